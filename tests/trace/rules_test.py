"""End to end: each program in programs/ commits one misuse; its trace goes
through `pinshim report`, and the report must name the rule at the exact file
and line marked `MISUSE(rule)` in the program's source (and, where marked
`ALLOC(rule)`, the allocation site in the evidence). The clean program must
produce no finding at all, and no program a finding of another rule.

TRACE_PROGRAM_SUFFIX picks the harness backend ("" records directly,
"_driver" calls the driver); TRACE_PRELOAD, when set, is preloaded into the
programs (libpinshim.so, which then writes the trace)."""

import json
import os
import re
import shutil
import subprocess
import sys
import unittest

HERE = "tests/trace"
REPORT = "analyzer/report/pinshim-report"
TMP = os.environ.get("TEST_TMPDIR", "/tmp")
SUFFIX = os.environ.get("TRACE_PROGRAM_SUFFIX", "")
PRELOAD = os.environ.get("TRACE_PRELOAD", "")

# program -> extra environment
PROGRAMS = {
    "async_pageable": {},
    "clean": {},
    "copy_race": {},
    "copy_race_guard": {"PINSHIM_COPY_GUARD": "1"},
    "copy_race_guard_edges": {"PINSHIM_COPY_GUARD": "1"},
    "copy_guard_neighbours": {"PINSHIM_COPY_GUARD": "1"},
    "free_in_flight": {},
    "non_portable": {},
    "over_pinning": {"PINSHIM_BUDGET": str(64 << 20)},
    "pageable_hot": {},
    "pinned_churn": {},
    "pinned_unused": {},
    "small_copies": {},
    "sync_copy_loop": {},
    "wc_read": {},
    "wc_read_guard": {"PINSHIM_WC_GUARD": "1"},
}

# Enforce mode: with the recorder backend the harness emulates the budget;
# with the driver backend the preloaded library enforces and records it.
ENFORCE = {"PINSHIM_MODE": "enforce", "PINSHIM_BUDGET": str(4 << 20)}
PROGRAMS.update({
    "budget_refused": dict(ENFORCE, PINSHIM_POLICY="deny"),
    "budget_refused_fallback": dict(ENFORCE, PINSHIM_POLICY="fallback"),
})

# VMM host and host-pool memory: the program calls the driver API itself,
# so it runs with the driver backend only. So does the copy guard on
# malloc'd buffers: the preloaded library's allocation hooks tell which
# blocks glibc mapped for themselves (in observe and in optimize mode).
if SUFFIX == "_driver":
    PROGRAMS["vmm_host_kinds"] = {}
    PROGRAMS["vmm_host_held"] = {"PINSHIM_BUDGET": str(64 << 20)}
    PROGRAMS["copy_race_guard_malloc"] = {"PINSHIM_COPY_GUARD": "1"}
    PROGRAMS["copy_race_guard_malloc_optimize"] = {"PINSHIM_COPY_GUARD": "1",
                                                   "PINSHIM_MODE": "optimize"}
    PROGRAMS["copy_race_guard_small"] = {"PINSHIM_COPY_GUARD": "1",
                                         "PINSHIM_TRACK_THRESHOLD": "4K"}

# RULE_PROGRAMS_ONLY (space-separated names) runs those programs alone, for a
# quick check of a few rules on the GPU host (tests/gpu/copy_guard_check.sh).
if os.environ.get("RULE_PROGRAMS_ONLY"):
    PROGRAMS = {k: v for k, v in PROGRAMS.items() if k in os.environ["RULE_PROGRAMS_ONLY"].split()}

# Runs of one program under another configuration: run name -> program.
PROGRAM_OF = {"budget_refused_fallback": "budget_refused",
              "copy_race_guard_malloc_optimize": "copy_race_guard_malloc"}


def markers(source, kind):
    """(rule, line) for every `KIND(rule)` comment in the source."""
    found = []
    with open(source) as f:
        for number, text in enumerate(f, 1):
            for rule in re.findall(kind + r"\(([a-z-]+)\)", text):
                found.append((rule, number))
    return found


def sites_in(value):
    """Every site object ({"function", "file", "line", ...}) inside evidence."""
    if isinstance(value, dict):
        if "function" in value and "line" in value:
            yield value
        for v in value.values():
            yield from sites_in(v)
    elif isinstance(value, list):
        for v in value:
            yield from sites_in(v)


# A program's exit status when it cannot run on this machine (harness kNotRun).
NOT_RUN = 77


# program -> its standard output in the run above
OUTPUTS = {}


def run_program(name, extra_env=None):
    """The trace directory, or None when the program cannot run here."""
    trace_dir = os.path.join(TMP, "traces", name)
    shutil.rmtree(trace_dir, ignore_errors=True)
    env = dict(os.environ, PINSHIM_TRACE_DIR=trace_dir)
    env.update(PROGRAMS[name])
    env.update(extra_env or {})
    if PRELOAD:
        env["LD_PRELOAD"] = os.path.abspath(PRELOAD)
    binary = PROGRAM_OF.get(name, name) + SUFFIX
    proc = subprocess.run([os.path.join(HERE, "programs", binary)], env=env,
                          capture_output=True, text=True, timeout=120)
    if proc.returncode == NOT_RUN:
        return None, proc.stderr.strip()
    if proc.returncode != 0:
        raise AssertionError("%s exited %d: %s" % (name, proc.returncode, proc.stderr))
    OUTPUTS[name] = proc.stdout
    return trace_dir, ""


def plain_output(name):
    """The program's standard output without pinshim (nothing preloaded, no
    PINSHIM_ setting)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PINSHIM_")}
    env.pop("LD_PRELOAD", None)
    binary = PROGRAM_OF.get(name, name) + SUFFIX
    proc = subprocess.run([os.path.join(HERE, "programs", binary)], env=env,
                          capture_output=True, text=True, timeout=120)
    return proc.returncode, proc.stdout


def report(args):
    return subprocess.run([REPORT] + args, capture_output=True, text=True, timeout=300)


SEVERITY_RANK = {"info": 0, "warning": 1, "error": 2}


class RulesTest(unittest.TestCase):
    reports = {}
    not_run = {}  # program -> why (e.g. the non-portable one on a one-GPU machine)

    @classmethod
    def setUpClass(cls):
        for name in PROGRAMS:
            trace_dir, why = run_program(name)
            if trace_dir is None:
                # One line the GPU tier's table picks up.
                print("NOT RUN %s: %s" % (name, why))
                cls.not_run[name] = why
                continue
            out = report(["--format", "json", trace_dir])
            if out.returncode != 0:
                raise AssertionError("report of %s failed: %s" % (name, out.stderr))
            cls.reports[name] = (trace_dir, json.loads(out.stdout))

    def check_program(self, name):
        if name not in PROGRAMS:
            self.skipTest("not selected (RULE_PROGRAMS_ONLY)")
        if name in self.not_run:
            self.skipTest("not run: " + self.not_run[name])
        source = os.path.join(HERE, "programs", PROGRAM_OF.get(name, name) + ".cc")
        trace_dir, data = self.reports[name]
        self.assertEqual(data["version"], 1)
        self.assertEqual(len(data["processes"]), 1)
        self.assertTrue(data["processes"][0]["trace_complete"])
        expected = markers(source, "MISUSE")
        # TOLERATE(rule) marks a finding that may also appear, depending on
        # how long the program ran (e.g. pinned memory held a while).
        rules = {rule for rule, _ in expected} | {rule for rule, _ in markers(source, "TOLERATE")}
        findings = data["findings"]
        described = ["%s at %s" % (f["rule"], f["site"]) for f in findings]
        for f in findings:
            self.assertIn(f["rule"], rules, "unexpected finding in %s: %s" % (name, described))
        for rule, line in expected:
            hits = [f for f in findings if f["rule"] == rule and f["site"]
                    and (f["site"]["file"] or "").endswith(source) and f["site"]["line"] == line]
            self.assertTrue(hits, "%s: no %s finding at %s:%d; got %s" %
                            (name, rule, source, line, described))
            f = hits[0]
            self.assertIn(f["severity"], ("info", "warning", "error"))
            self.assertTrue(f["explanation"] and f["fix"])
            self.assertGreaterEqual(f["estimated_seconds_lost"], 0)
            self.assertTrue(f["stack"])
        for rule, line in markers(source, "ALLOC"):
            sites = [site for f in findings if f["rule"] == rule for site in sites_in(f["evidence"])]
            self.assertTrue(any((site.get("file") or "").endswith(source) and site.get("line") == line
                                for site in sites),
                            "%s: allocation site %s:%d not in the evidence: %s" %
                            (name, source, line, sites))
        # The text report names the same rule and place.
        text = report([trace_dir])
        self.assertEqual(text.returncode, 0, text.stderr)
        for rule, line in expected:
            self.assertIn(rule, text.stdout)
            self.assertIn("%s:%d" % (source, line), text.stdout)
        if not expected:
            self.assertEqual(findings, [])
            self.assertIn("No findings.", text.stdout)

    def test_async_pageable(self):
        self.check_program("async_pageable")

    def test_clean(self):
        self.check_program("clean")

    def test_copy_race(self):
        self.check_program("copy_race")
        _, data = self.reports["copy_race"]
        for f in data["findings"]:
            self.assertEqual(f["severity"], "error", f["explanation"])
            self.assertTrue(f["evidence"]["proven"])

    def test_copy_race_guard(self):
        self.check_program("copy_race_guard")
        _, data = self.reports["copy_race_guard"]
        for f in data["findings"]:
            self.assertEqual(f["severity"], "error", f["explanation"])
            self.assertEqual(f["evidence"]["via"], ["plain access (copy guard)"])

    def test_copy_race_guard_edges(self):
        # The first and the last byte of a range that starts and ends inside
        # pages shared with other data are caught at their lines; that data
        # is not reported, and keeps its values.
        self.check_program("copy_race_guard_edges")
        _, data = self.reports["copy_race_guard_edges"]
        self.assertEqual(len(data["findings"]), 2, data["findings"])
        for f in data["findings"]:
            self.assertEqual(f["evidence"]["via"], ["plain access (copy guard)"])
        self.assertEqual(plain_output("copy_race_guard_edges"),
                         (0, OUTPUTS["copy_race_guard_edges"]))
        self.assertIn("data ok", OUTPUTS["copy_race_guard_edges"])

    def test_copy_guard_neighbours(self):
        # Threads updating data on a guarded range's end pages: no finding,
        # no lost update, the same output as without pinshim.
        self.check_program("copy_guard_neighbours")
        self.assertEqual(OUTPUTS["copy_guard_neighbours"], "neighbours ok\n")
        self.assertEqual(plain_output("copy_guard_neighbours"),
                         (0, OUTPUTS["copy_guard_neighbours"]))

    def test_copy_race_guard_malloc(self):
        # A malloc'd buffer glibc mapped for itself: its first and last byte
        # are caught on the pages it shares with its chunk's header and
        # padding; so is the first byte of one smaller than a buffer just
        # freed (glibc maps it, with the guard on, where it would otherwise
        # serve it from its heap); a heap buffer's first page, shared with
        # other blocks, is not guarded (a thread that blocks every signal
        # writes there unharmed, the read of its first byte unreported); the
        # same output as without pinshim, in observe and in optimize mode.
        for name in ("copy_race_guard_malloc", "copy_race_guard_malloc_optimize"):
            with self.subTest(name):
                if name not in PROGRAMS:
                    self.skipTest("the driver backend only")
                self.check_program(name)
                _, data = self.reports[name]
                self.assertEqual(len(data["findings"]), 4, data["findings"])
                for f in data["findings"]:
                    self.assertEqual(f["evidence"]["via"], ["plain access (copy guard)"])
                self.assertEqual(OUTPUTS[name],
                                 "heap buffer ok\nreused buffer ok\nmapped buffer ok\n")
                self.assertEqual(plain_output(name), (0, OUTPUTS[name]))

    def test_copy_race_guard_small(self):
        # A registered malloc'd buffer of 24 KiB: with the tracking threshold
        # below its size, glibc maps it for itself under the guard, and its
        # first and last byte are caught; the same output as without
        # pinshim.
        name = "copy_race_guard_small"
        if name not in PROGRAMS:
            self.skipTest("the driver backend only")
        self.check_program(name)
        _, data = self.reports[name]
        self.assertEqual(len(data["findings"]), 2, data["findings"])
        for f in data["findings"]:
            self.assertEqual(f["evidence"]["via"], ["plain access (copy guard)"])
        self.assertEqual(OUTPUTS[name], "small buffer ok\n")
        self.assertEqual(plain_output(name), (0, OUTPUTS[name]))

    def test_free_in_flight(self):
        self.check_program("free_in_flight")
        _, data = self.reports["free_in_flight"]
        for f in data["findings"]:
            self.assertEqual(f["severity"], "error", f["explanation"])

    def test_non_portable(self):
        self.check_program("non_portable")

    def test_one_device_reports_the_two_device_program_as_not_run(self):
        binary = os.path.join(HERE, "programs", "non_portable" + SUFFIX)
        ldd = subprocess.run(["ldd", binary], capture_output=True, text=True).stdout
        simulated = [l for l in ldd.splitlines() if "libcuda.so.1" in l and "fakecuda" in l]
        if SUFFIX != "_driver" or not simulated or os.environ.get("FAKECUDA_DEVICES"):
            self.skipTest("needs the simulated driver with its default two devices")
        trace_dir, why = run_program("non_portable", {"FAKECUDA_DEVICES": "1"})
        self.assertIsNone(trace_dir)
        self.assertIn("needs two devices", why)

    def test_over_pinning(self):
        self.check_program("over_pinning")

    def test_pageable_hot(self):
        self.check_program("pageable_hot")
        _, data = self.reports["pageable_hot"]
        f = [f for f in data["findings"] if f["rule"] == "pageable-hot"][0]
        self.assertEqual(f["evidence"]["copies"], 40)
        self.assertEqual(f["evidence"]["bytes"], 40 * (4 << 20))
        self.assertGreater(f["estimated_seconds_lost"], 0.005)

    def test_pinned_churn(self):
        self.check_program("pinned_churn")

    def test_vmm_host_kinds(self):
        """VMM host memory mapped and unmapped every batch is churn, named as
        such; a host pool's per-batch allocations are not; copies of both
        kinds are pinned ones: no pageable-hot or async-pageable, and the
        sync-copy-loop fix does not ask to pin them."""
        if "vmm_host_kinds" not in PROGRAMS:
            self.skipTest("the driver backend only")
        self.check_program("vmm_host_kinds")
        findings = self.reports["vmm_host_kinds"][1]["findings"]
        churn = [f for f in findings if f["rule"] == "pinned-churn"]
        self.assertEqual(len(churn), 1, churn)
        self.assertIn("mapped and unmapped 12 times", churn[0]["explanation"])
        self.assertIn("cuMemMap/cuMemUnmap", churn[0]["explanation"])
        loop = [f for f in findings if f["rule"] == "sync-copy-loop"]
        self.assertEqual(len(loop), 1, loop)
        self.assertIn("pinned already", loop[0]["fix"])
        self.assertNotIn("from pinned buffers", loop[0]["fix"])

    def test_vmm_host_held(self):
        """VMM host memory mapped past the budget is over-pinning, a VMM
        mapping and a host pool allocation never copied are pinned-unused:
        the rules count both kinds as pinned memory."""
        if "vmm_host_held" not in PROGRAMS:
            self.skipTest("the driver backend only")
        self.check_program("vmm_host_held")

    def test_pinned_unused(self):
        self.check_program("pinned_unused")

    def test_small_copies(self):
        self.check_program("small_copies")

    def test_sync_copy_loop(self):
        self.check_program("sync_copy_loop")

    def test_wc_read(self):
        self.check_program("wc_read")

    def test_wc_read_guard(self):
        self.check_program("wc_read_guard")
        _, data = self.reports["wc_read_guard"]
        f = [f for f in data["findings"] if f["rule"] == "wc-read"][0]
        self.assertGreater(f["evidence"]["page_guard_samples"], 0)

    def check_budget(self, name, outcome):
        if name not in self.reports:
            self.skipTest("needs the recorder backend")
        self.check_program(name)
        trace_dir, data = self.reports[name]
        budget = data["processes"][0]["budget"]
        # Four 1 MiB buffers fit the 4 MiB budget; the fifth and the 2 MiB
        # registration are refused.
        self.assertEqual(budget["granted"], 4)
        self.assertEqual(budget[outcome], 2)
        self.assertEqual(budget["denied"] + budget["fallback"], 2)
        self.assertEqual(budget["decisions"], 6)
        self.assertEqual(budget["evictions"], 0)
        self.assertEqual(budget["refused_bytes"], 3 << 20)
        self.assertEqual(budget["process_budget"], 4 << 20)
        self.assertIsNone(budget["node_budget"])
        findings = [f for f in data["findings"] if f["rule"] == "budget-refused"]
        self.assertEqual(len(findings), 2)
        for f in findings:
            self.assertEqual(f["severity"], "warning")
            self.assertEqual(f["estimated_seconds_lost"], 0)
            ev = f["evidence"]
            self.assertEqual(ev["refused"], 1)
            self.assertEqual(ev[outcome], 1)
            self.assertEqual(ev["outcome"], [outcome])
            self.assertEqual(ev["limiter"], ["process"])
            self.assertEqual(ev["process_budget"], 4 << 20)
            self.assertIn("PINSHIM_BUDGET", f["fix"])
        by_bytes = sorted(f["evidence"]["bytes"] for f in findings)
        self.assertEqual(by_bytes, [1 << 20, 2 << 20])
        text = report([trace_dir]).stdout
        line = ("budget: 4 granted, %d denied, %d fallback, 0 evictions (0 B evicted); "
                "process budget 4.00 MiB, node budget none" %
                (budget["denied"], budget["fallback"]))
        self.assertIn(line, text)
        self.assertIn("WARNING budget-refused", text)

    def test_budget_refused_denied(self):
        self.check_budget("budget_refused", "denied")

    def test_budget_refused_fallback(self):
        self.check_budget("budget_refused_fallback", "fallback")

    def test_no_budget_line_without_decisions(self):
        _, data = self.reports["clean"]
        self.assertIsNone(data["processes"][0]["budget"])
        self.assertNotIn("budget:", report([self.reports["clean"][0]]).stdout)

    def test_fail_on_sets_the_exit_status(self):
        clean_dir = self.reports["clean"][0]
        wc_dir = self.reports["wc_read"][0]
        churn_dir = self.reports["pinned_churn"][0]
        self.assertEqual(report(["--fail-on", "info", clean_dir]).returncode, 0)
        self.assertEqual(report(["--fail-on", "error", wc_dir]).returncode, 1)
        self.assertEqual(report(["--fail-on=warning", churn_dir]).returncode, 1)
        self.assertEqual(report(["--fail-on", "error", churn_dir]).returncode, 0)
        self.assertEqual(report(["--fail-on", "fatal", churn_dir]).returncode, 2)

    def test_many_processes_are_merged_and_listed(self):
        dirs = [self.reports[n][0] for n in ("pageable_hot", "wc_read", "clean")]
        out = report(["--format", "json"] + dirs)
        self.assertEqual(out.returncode, 0, out.stderr)
        data = json.loads(out.stdout)
        self.assertEqual(len(data["processes"]), 3)
        rules = sorted({f["rule"] for f in data["findings"]})
        self.assertEqual(rules, ["pageable-hot", "wc-read"])
        # Most severe first, then by estimated loss.
        order = [(SEVERITY_RANK[f["severity"]], f["estimated_seconds_lost"])
                 for f in data["findings"]]
        self.assertEqual(order, sorted(order, reverse=True))


if __name__ == "__main__":
    # Arguments after the script pick tests (-k PATTERN), as unittest's own.
    unittest.main(argv=[sys.argv[0], "-v"] + sys.argv[1:])
