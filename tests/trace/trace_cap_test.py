"""Capped traces (PINSHIM_TRACE_MAX), end to end on the simulated driver:
programs/many_copies.cc runs under the preloaded library with a small cap
and without one. The capped file stays within the cap plus its site totals
(and the stacks they name); its report counts every copy the uncapped one
does, by direction and memory kind, names the same top findings at the same
lines, and says where detail ended."""

import json
import os
import re
import shutil
import subprocess
import unittest

HERE = "tests/trace"
REPORT = "analyzer/report/pinshim-report"
PRELOAD = "shim/libpinshim.so"
PROGRAM = os.path.join(HERE, "programs", "many_copies_driver")
SOURCE = os.path.join(HERE, "programs", "many_copies.cc")
TMP = os.environ.get("TEST_TMPDIR", "/tmp")
CAP = 128 * 1024
ROUNDS = "20000"
# What a capped file may hold beyond the cap: the site totals frame
# (two cells per site here) and the stacks first seen after the cap.
TOTALS_ALLOWANCE = 16 * 1024


def misuse_lines():
    found = {}
    with open(SOURCE) as f:
        for number, text in enumerate(f, 1):
            for rule in re.findall(r"MISUSE\(([a-z-]+)\)", text):
                found[rule] = number
    return found


def run(name, env):
    trace_dir = os.path.join(TMP, "trace_cap", name)
    shutil.rmtree(trace_dir, ignore_errors=True)
    e = dict(os.environ, PINSHIM_TRACE_DIR=trace_dir, LD_PRELOAD=os.path.abspath(PRELOAD))
    e.update(env)
    proc = subprocess.run([PROGRAM, ROUNDS], env=e, capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        raise AssertionError("%s exited %d: %s" % (name, proc.returncode, proc.stderr))
    files = [os.path.join(trace_dir, f) for f in os.listdir(trace_dir) if f.endswith(".pstrace")]
    if len(files) != 1:
        raise AssertionError("%s: expected one trace, found %s" % (name, files))
    return files[0]


def report(args):
    out = subprocess.run([REPORT] + args, capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        raise AssertionError("report failed: %s" % out.stderr)
    return out.stdout


class TraceCapTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.full = run("full", {"PINSHIM_TRACE_MAX": "0"})
        cls.capped = run("capped", {"PINSHIM_TRACE_MAX": str(CAP)})
        cls.full_json = json.loads(report(["--format", "json", cls.full]))
        cls.capped_json = json.loads(report(["--format", "json", cls.capped]))
        cls.capped_text = report([cls.capped])

    def test_uncapped_trace_passes_the_cap(self):
        # Otherwise the capped run proves nothing.
        self.assertGreater(os.path.getsize(self.full), 4 * CAP)
        self.assertIsNone(self.full_json["processes"][0]["detail_end"])

    def test_capped_file_size(self):
        size = os.path.getsize(self.capped)
        self.assertLessEqual(size, CAP + TOTALS_ALLOWANCE)

    def test_totals_equal(self):
        full = self.full_json["processes"][0]
        capped = self.capped_json["processes"][0]
        self.assertEqual(capped["copies"], full["copies"])
        self.assertEqual(capped["copies"], 2 * int(ROUNDS))
        self.assertEqual(capped["failed_copies"], full["failed_copies"])
        self.assertEqual(capped["bytes_moved"], full["bytes_moved"])

    def test_same_top_findings_at_same_lines(self):
        lines = misuse_lines()

        def top(doc):
            out = {}
            for f in doc["findings"]:
                out.setdefault(f["rule"], (f["site"]["file"], f["site"]["line"], f["evidence"]))
            return out

        full, capped = top(self.full_json), top(self.capped_json)
        # The first finding is the one that cost most in each run; the two
        # runs are timed apart, so where two rules cost about the same in
        # the uncapped run either may come first.
        first_capped = self.capped_json["findings"][0]["rule"]
        first_full = self.full_json["findings"][0]["rule"]
        if first_capped != first_full:
            cost = {}
            for f in self.full_json["findings"]:
                cost.setdefault(f["rule"], f["estimated_seconds_lost"])
            self.assertIn(first_capped, cost)
            self.assertGreaterEqual(cost[first_capped], 0.75 * cost[first_full],
                                    "capped first %s, uncapped first %s: no near tie (%s)" %
                                    (first_capped, first_full, cost))
        for rule in ("pageable-hot", "async-pageable"):
            self.assertIn(rule, capped)
            self.assertEqual(capped[rule][:2], full[rule][:2])
            self.assertTrue(capped[rule][0].endswith("many_copies.cc"), capped[rule][0])
            self.assertEqual(capped[rule][1], lines[rule])
        # Every copy of the site is in the capped finding too.
        self.assertEqual(capped["pageable-hot"][2]["copies"], int(ROUNDS))
        self.assertEqual(full["pageable-hot"][2]["copies"], int(ROUNDS))
        self.assertEqual(capped["async-pageable"][2]["calls"], full["async-pageable"][2]["calls"])

    def test_report_says_where_detail_ended(self):
        d = self.capped_json["processes"][0]["detail_end"]
        self.assertIsNotNone(d)
        self.assertEqual(d["cap_bytes"], CAP)
        self.assertGreater(d["copies_after"], 0)
        self.assertLess(d["copies_after"], 2 * int(ROUNDS))
        self.assertEqual(d["spilled_copies"], 0)
        self.assertGreater(d["synchronizations_after"], 0)
        self.assertIn("copy-race", d["rules_detail_only"])
        self.assertNotIn("pageable-hot", d["rules_detail_only"])
        self.assertIn("detail: per-event detail ended at ", self.capped_text)
        html = report(["--format", "html", self.capped])
        self.assertIn("per-event detail ended", html)


if __name__ == "__main__":
    unittest.main()
