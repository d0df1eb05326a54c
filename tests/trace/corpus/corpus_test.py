"""The corpus of correct programs under libpinshim.so, traced, with and
without PINSHIM_COPY_GUARD=1: each must run as it runs without the library
(exit status 0, the same output) and its report must hold no warning or
error of the rules about queued copies (copy-race, free-in-flight). To show
the check can fail, the copy-race misuse program goes through it too and
must fail it.

Environment (defaults: the Bazel runfiles): CORPUS_BIN_DIR (the programs),
CORPUS_PROGRAMS (space-separated names; default: every executable file
there without a dot in its name), PRELOAD (libpinshim.so), REPORT (the
report command, split on spaces), MISUSE_PROGRAM (the copy-race program)."""
import json
import os
import shutil
import subprocess
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
BIN_DIR = os.environ.get("CORPUS_BIN_DIR", "tests/trace/corpus")
PRELOAD = os.path.abspath(os.environ.get("PRELOAD", "shim/libpinshim.so"))
REPORT = os.environ.get("REPORT", "analyzer/report/pinshim-report").split()
MISUSE = os.environ.get("MISUSE_PROGRAM", "tests/trace/programs/copy_race_driver")
TMP = os.environ.get("TEST_TMPDIR", "/tmp")
RULES = ("copy-race", "free-in-flight")


def programs():
    names = os.environ.get("CORPUS_PROGRAMS", "").split()
    if names:
        return names
    return sorted(f for f in os.listdir(BIN_DIR)
                  if "." not in f and not f.startswith("corpus_test")
                  and os.path.isfile(os.path.join(BIN_DIR, f))
                  and os.access(os.path.join(BIN_DIR, f), os.X_OK))


def run(binary, trace_dir=None, guard=False):
    env = dict(os.environ)
    if trace_dir is not None:
        shutil.rmtree(trace_dir, ignore_errors=True)
        os.makedirs(trace_dir)
        env.update(LD_PRELOAD=PRELOAD, PINSHIM_TRACE_DIR=trace_dir)
        if guard:
            env["PINSHIM_COPY_GUARD"] = "1"
    return subprocess.run([binary], env=env, capture_output=True, text=True, timeout=300)


def bad_findings(trace_dir):
    """The report's warnings and errors of RULES, and the whole report."""
    out = subprocess.run(REPORT + ["--format", "json", trace_dir], capture_output=True,
                         text=True, timeout=300)
    if out.returncode != 0:
        raise AssertionError("report failed: " + out.stderr)
    data = json.loads(out.stdout)
    bad = [f for f in data["findings"]
           if f["rule"] in RULES and f["severity"] in ("warning", "error")]
    return bad, data


class CorpusTest(unittest.TestCase):
    def test_every_program_is_clean(self):
        names = programs()
        self.assertGreaterEqual(len(names), 15, names)
        rows = []
        failures = []
        for name in names:
            binary = os.path.join(BIN_DIR, name)
            base = run(binary)
            if base.returncode != 0:
                failures.append("%s fails without pinshim: %s" % (name, base.stderr.strip()))
                continue
            for guard in (False, True):
                mode = "guard" if guard else "trace"
                d = os.path.join(TMP, "corpus", name + "-" + mode)
                proc = run(binary, d, guard)
                if proc.returncode != 0 or proc.stdout != base.stdout:
                    failures.append("%s (%s) ran differently under pinshim: rc %d, %r vs %r; %s" %
                                    (name, mode, proc.returncode, proc.stdout, base.stdout,
                                     proc.stderr.strip()))
                    continue
                bad, data = bad_findings(d)
                info = [f for f in data["findings"] if f["rule"] in RULES]
                copies = sum(p["copies"] for p in data["processes"])
                rows.append("%-26s %-6s copies %4d  %s" % (
                    name, mode, copies,
                    "clean" if not info else "%d info: %s" % (
                        len(info), "; ".join(f["explanation"][:160] for f in info))))
                for f in bad:
                    failures.append("%s (%s): %s %s at %s: %s" % (
                        name, mode, f["severity"], f["rule"], f["site"], f["explanation"]))
                if copies == 0:
                    failures.append("%s (%s): the trace holds no copy" % (name, mode))
        print("\n".join(rows))
        self.assertEqual(failures, [], "\n".join(failures))

    def test_the_check_finds_a_real_race(self):
        if not os.access(MISUSE, os.X_OK):
            self.skipTest("no misuse program at " + MISUSE)
        d = os.path.join(TMP, "corpus", "misuse")
        proc = run(MISUSE, d)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        bad, _ = bad_findings(d)
        self.assertTrue(any(f["rule"] == "copy-race" and f["severity"] == "error" for f in bad),
                        bad)


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0], "-v"])
