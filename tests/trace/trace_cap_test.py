"""Capped traces (PINSHIM_TRACE_MAX), end to end on the simulated driver:
programs/many_copies.cc runs under the preloaded library with a small cap
and without one. The capped file stays within the cap plus its site totals
(and the stacks they name); its report counts every copy the uncapped one
does, by direction and memory kind, names the same top findings at the same
lines with costs that count every copy, and says where detail ended."""

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
        # Which finding comes first depends on time the two runs measured
        # apart (async-pageable counts time in calls), so the order is not
        # compared across runs. What the cap could break is checked instead:
        # each report ranks by its own costs, and the capped costs count
        # every copy, past the cap too.
        for doc in (self.full_json, self.capped_json):
            warnings = [f["estimated_seconds_lost"] for f in doc["findings"]
                        if f["severity"] == "warning"]
            self.assertEqual(warnings, sorted(warnings, reverse=True))
        cost = {}
        for name, doc in (("full", self.full_json), ("capped", self.capped_json)):
            for f in doc["findings"]:
                cost.setdefault((name, f["rule"]), (f["estimated_seconds_lost"], f["evidence"]))
        # pageable-hot: the bandwidth model's loss for each copy, the same
        # in both runs whatever their timing.
        self.assertAlmostEqual(cost[("capped", "pageable-hot")][0],
                               cost[("full", "pageable-hot")][0], delta=1e-6)
        # async-pageable: each call's time beyond 16 us (docs/production.md),
        # so the time of all calls less 16 us a call, or a little more where
        # a call under 16 us counts nothing.
        for name in ("full", "capped"):
            lost, ev = cost[(name, "async-pageable")]
            self.assertEqual(ev["calls"], int(ROUNDS))
            self.assertGreaterEqual(lost, ev["time_in_calls"] - ev["calls"] * 16e-6 - 1e-6,
                                    (name, lost, ev))
            self.assertLessEqual(lost, ev["time_in_calls"] + 1e-6, (name, lost, ev))
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
