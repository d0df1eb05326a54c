"""Live metrics in every mode (PINSHIM_METRICS_FILE), end to end on the
simulated driver: programs/many_copies.cc runs under the preloaded library
in observe, optimize and enforce mode; each metrics file must pass
`promtool check metrics` (Debian's prometheus package: a missing promtool
fails the test) and count the program's copies."""

import os
import re
import shutil
import subprocess
import unittest

HERE = "tests/trace"
PRELOAD = "shim/libpinshim.so"
PROGRAM = os.path.join(HERE, "programs", "many_copies_driver")
TMP = os.environ.get("TEST_TMPDIR", "/tmp")
ROUNDS = 300
FAMILIES = ["pinshim_copies_total", "pinshim_copy_bytes_total", "pinshim_copy_seconds_total",
            "pinshim_pinned_bytes", "pinshim_staged_bytes_total",
            "pinshim_registered_in_place_bytes_total", "pinshim_estimated_seconds_lost_total"]
RULES = ["pageable-hot", "async-pageable", "small-copies", "sync-copy-loop"]


def promtool():
    path = shutil.which("promtool")
    if path is None:
        raise AssertionError("promtool is missing: install Debian's prometheus package "
                             "(scripts/install_test_deps.sh)")
    return path


def run(mode, extra=None):
    d = os.path.join(TMP, "live_metrics", mode)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    path = os.path.join(d, "pinshim.prom")
    env = dict(os.environ, LD_PRELOAD=os.path.abspath(PRELOAD), PINSHIM_MODE=mode,
               PINSHIM_METRICS_FILE=path, PINSHIM_LEDGER_PATH=os.path.join(d, "ledger"),
               PINSHIM_SELF_CHECK="0")
    env.update(extra or {})
    proc = subprocess.run([PROGRAM, str(ROUNDS)], env=env, capture_output=True, text=True,
                          timeout=300)
    if proc.returncode != 0:
        raise AssertionError("%s exited %d: %s" % (mode, proc.returncode, proc.stderr))
    with open(path) as f:
        return path, f.read()


def values(text, name):
    """{labels text: value} of one family's samples."""
    out = {}
    for line in text.splitlines():
        m = re.match(r"^%s\{([^}]*)\} (\S+)$" % re.escape(name), line)
        if m:
            out[m.group(1)] = float(m.group(2))
    return out


class LiveMetricsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.files = {
            "observe": run("observe"),
            "optimize": run("optimize"),
            "enforce": run("enforce", {"PINSHIM_BUDGET": "1G"}),
        }

    def test_promtool_accepts_every_file(self):
        tool = promtool()
        for mode, (path, _) in self.files.items():
            with open(path, "rb") as f:
                out = subprocess.run([tool, "check", "metrics"], stdin=f, capture_output=True,
                                     text=True, timeout=60)
            self.assertEqual(out.returncode, 0, "%s: %s%s" % (mode, out.stdout, out.stderr))

    def test_every_family_with_help_and_type(self):
        for mode, (_, text) in self.files.items():
            for family in FAMILIES:
                self.assertIn("# HELP %s " % family, text, mode)
                self.assertIn("# TYPE %s " % family, text, mode)
                self.assertTrue(values(text, family), "%s: no %s samples" % (mode, family))

    def test_copies_counted_by_direction_and_memory(self):
        for mode, (_, text) in self.files.items():
            copies = values(text, "pinshim_copies_total")
            pid = re.search(r'pid="(\d+)"', next(iter(copies))).group(1)
            h2d = sum(v for k, v in copies.items() if 'direction="H2D"' in k)
            d2h = sum(v for k, v in copies.items() if 'direction="D2H"' in k)
            self.assertEqual(h2d, ROUNDS, mode)
            self.assertEqual(d2h, ROUNDS, mode)
            by_bytes = values(text, "pinshim_copy_bytes_total")
            self.assertEqual(sum(v for k, v in by_bytes.items() if 'direction="H2D"' in k),
                             ROUNDS * 64 * 1024, mode)
            if mode != "optimize":
                key = 'pid="%s",direction="H2D",memory="pageable"' % pid
                self.assertEqual(copies[key], ROUNDS, mode)

    def test_losses_by_rule_bounded_labels(self):
        for mode, (_, text) in self.files.items():
            lost = values(text, "pinshim_estimated_seconds_lost_total")
            rules = sorted(re.search(r'rule="([^"]+)"', k).group(1) for k in lost)
            self.assertEqual(rules, sorted(RULES), mode)
            for k in lost:
                self.assertEqual(set(re.findall(r'(\w+)="', k)), {"pid", "rule"}, k)
            self.assertGreaterEqual(min(lost.values()), 0, mode)
        observe = values(self.files["observe"][1], "pinshim_estimated_seconds_lost_total")
        self.assertGreater(sum(v for k, v in observe.items() if "pageable-hot" in k), 0)

    def test_pinned_bytes_by_kind(self):
        for mode, (_, text) in self.files.items():
            pinned = values(text, "pinshim_pinned_bytes")
            kinds = {re.search(r'kind="([^"]+)"', k).group(1) for k in pinned}
            self.assertTrue({"pinned", "registered", "pinshim"} <= kinds, (mode, kinds))


if __name__ == "__main__":
    unittest.main()
