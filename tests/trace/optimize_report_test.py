"""End to end: programs/optimize_pinning.cc runs under the preloaded library
in optimize mode with a small pin cap, on the (simulated) driver; its trace
goes through `pinshim report`, whose "pinshim's own pinning" section must
show the pool's hits, the registration of the hot buffer, the refused
registration (and why), the eviction of the first registration for the
cap to make room for a later one, and the buffers pinshim left alone, each
at the line marked BUFFER(kind) in the program."""

import json
import os
import re
import shutil
import subprocess
import sys
import unittest

HERE = "tests/trace"
REPORT = "analyzer/report/pinshim-report"
PRELOAD = "shim/libpinshim.so"
PROGRAM = "optimize_pinning"
SOURCE = os.path.join(HERE, "programs", PROGRAM + ".cc")
TMP = os.environ.get("TEST_TMPDIR", "/tmp")
MiB = 1 << 20


def buffer_lines():
    """kind -> line of its BUFFER(kind) marker."""
    found = {}
    with open(SOURCE) as f:
        for number, text in enumerate(f, 1):
            for kind in re.findall(r"BUFFER\(([a-z_]+)\)", text):
                found[kind] = number
    return found


def run(name, extra_env):
    trace_dir = os.path.join(TMP, "traces", name)
    shutil.rmtree(trace_dir, ignore_errors=True)
    # PINSHIM_SELF_CHECK=0: the paths the report is checked against are
    # taken whatever the simulated driver's speeds.
    env = dict(os.environ, PINSHIM_TRACE_DIR=trace_dir, LD_PRELOAD=os.path.abspath(PRELOAD),
               PINSHIM_SELF_CHECK="0")
    env.update(extra_env)
    proc = subprocess.run([os.path.join(HERE, "programs", PROGRAM + "_driver")], env=env,
                          capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        raise AssertionError("%s exited %d: %s" % (name, proc.returncode, proc.stderr))
    return trace_dir


def report(args):
    out = subprocess.run([REPORT] + args, capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        raise AssertionError("report failed: %s" % out.stderr)
    return out.stdout


class OptimizeReportTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.trace_dir = run("optimize", {"PINSHIM_MODE": "optimize", "PINSHIM_PIN_CAP": "8M"})
        cls.data = json.loads(report(["--format", "json", cls.trace_dir]))
        cls.text = report([cls.trace_dir])
        cls.process = cls.data["processes"][0]
        cls.own = cls.process["optimize"]
        cls.lines = buffer_lines()

    def buffer(self, by, kind=None):
        found = [b for b in self.own["buffers"] if b["by"] == by and
                 (kind is None or (b["allocated_at"] or {}).get("line") == self.lines[kind])]
        self.assertEqual(len(found), 1, "%s: %s" % (by, json.dumps(self.own["buffers"], indent=1)))
        return found[0]

    def assert_allocated_at(self, b, kind):
        site = b["allocated_at"]
        self.assertIsNotNone(site, b)
        self.assertTrue((site["file"] or "").endswith(SOURCE), site)
        self.assertEqual(site["line"], self.lines[kind], site)

    def test_the_trace_is_whole_and_in_optimize_mode(self):
        self.assertEqual(len(self.data["processes"]), 1)
        self.assertIn("optimize", self.process["mode"])
        self.assertTrue(self.process["trace_complete"])
        self.assertIsNone(self.process["damage"])
        self.assertTrue(self.own["counters_recorded"])

    def test_pinned_bytes_stay_under_the_cap(self):
        pinned = self.own["pinned_bytes"]
        self.assertEqual(pinned["cap"], 8 * MiB)
        # The held pool slab (2 MiB) and a 4 MiB registration at least.
        self.assertGreaterEqual(pinned["peak"], 6 * MiB)
        self.assertLessEqual(pinned["peak"], 8 * MiB)
        # The held block's slab stays to the end; the registrations do not.
        self.assertGreaterEqual(pinned["final"], 2 * MiB)
        self.assertLess(pinned["final"], 6 * MiB)

    def test_repeated_pinned_allocations_hit_the_pool(self):
        pool = self.own["pool"]
        self.assertEqual(pool["hits"] + pool["misses"], 11)
        self.assertGreaterEqual(pool["hits"], 5)
        self.assertGreater(pool["hit_rate"], 0.4)
        self.assertEqual(pool["dedicated"], 0)
        self.assertGreater(self.own["estimated_seconds_saved"]["allocations"], 0)

    def test_hot_buffers_are_registered_and_the_first_evicted_for_the_cap(self):
        cache = self.own["cache"]
        self.assertEqual(cache["buffers_registered"], 2)
        self.assertEqual(cache["registrations"], 2)
        self.assertEqual(cache["evictions"], 1)
        self.assertEqual(cache["releases"], 1)
        self.assertGreaterEqual(cache["copies_served_pinned"], 2)
        # Each registering copy already ran pinned; the cache's own hits
        # count only the copies after it.
        self.assertEqual(cache["hits"] + cache["registrations"], cache["copies_served_pinned"])
        self.assertGreater(self.own["estimated_seconds_saved"]["copies"], 0)
        dropped = self.own["dropped_bytes"]
        self.assertEqual(dropped["program_released"], 4 * MiB)  # `next`, at its free
        # `hot`, and any idle pool slabs evicted before it.
        self.assertGreaterEqual(dropped["evicted_cap"], 4 * MiB)
        first = self.buffer("cache", "cache")
        second = self.buffer("cache", "evicts")
        for b in (first, second):
            self.assertEqual(b["handled"], "pinned")
            self.assertEqual(b["size"], 4 * MiB)
            self.assertEqual(b["copies"], 10)
            self.assertGreaterEqual(b["copies_pinned"], 1)
        self.assertEqual(first["copies_pinned"] + second["copies_pinned"],
                         cache["copies_served_pinned"])
        self.assertEqual(first["unpinned"], "evicted_cap")
        self.assertEqual(second["unpinned"], "program_released")

    def test_the_larger_buffer_is_refused_for_the_cap(self):
        refusals = self.own["cache"]["refusals"]
        self.assertEqual(list(refusals), ["cap"])
        self.assertGreaterEqual(refusals["cap"], 1)
        b = self.buffer("refused")
        self.assertEqual(b["handled"], "left_alone")
        self.assertEqual(b["reason"], "cap")
        self.assertEqual(b["refusals"], refusals["cap"])
        self.assertEqual(b["copies_pinned"], 0)
        self.assertEqual(b["size"], 7 * MiB)
        self.assertIn("PINSHIM_PIN_CAP", b["detail"])
        self.assert_allocated_at(b, "refused")

    def test_untracked_and_mmap_pieces_are_left_alone(self):
        untracked = self.buffer("untracked")
        self.assertEqual(untracked["handled"], "left_alone")
        self.assertIsNone(untracked["allocation"])
        self.assertEqual(untracked["copies"], 20)
        region = self.buffer("mmap_region")
        self.assertEqual(region["handled"], "left_alone")
        self.assertEqual(region["size"], 8 * MiB)
        self.assert_allocated_at(region, "mmap_region")
        declined = self.own["cache"]["declined"]
        self.assertEqual(declined["untracked"], 20)
        self.assertEqual(declined["sub_allocation"], 20)
        # Largest first.
        copied = [b["bytes_copied"] for b in self.own["buffers"]]
        self.assertEqual(copied, sorted(copied, reverse=True))
        self.assertEqual(self.own["hot_buffers"], 5)

    def test_the_text_report_tells_the_same(self):
        for expected in ("pinshim's own pinning (optimize mode):",
                         "; cap 8.00 MiB",
                         "registration cache: 2 buffers registered (2 registrations);",
                         "evicted for the pin cap",
                         "pinned by pinshim (registration cache)",
                         "left alone (refused: cap): pinshim's pin cap (8.00 MiB) was full",
                         "left alone (untracked memory)",
                         "left alone (mmap region)",
                         "%s:%d" % (SOURCE, self.lines["cache"]),
                         "%s:%d" % (SOURCE, self.lines["evicts"]),
                         "%s:%d" % (SOURCE, self.lines["refused"])):
            self.assertIn(expected, self.text)
        pool = self.own["pool"]
        self.assertIn("pool: %d hit%s, %d miss" % (pool["hits"], "" if pool["hits"] == 1 else "s",
                                                   pool["misses"]), self.text)

    def test_observe_mode_has_no_section(self):
        trace_dir = run("observe", {"PINSHIM_MODE": "observe"})
        data = json.loads(report(["--format", "json", trace_dir]))
        self.assertIsNone(data["processes"][0]["optimize"])
        self.assertNotIn("pinshim's own pinning", report([trace_dir]))


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0], "-v"])
