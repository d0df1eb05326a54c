"""`pinshim report` end to end, beyond single rules: bad input of every kind
(each gets one clear line, and what is readable is still reported), traces of
processes that were killed or are still running, fork and exec, missing
binaries, and the Perfetto timeline."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import unittest

HERE = "tests/trace"
REPORT = "analyzer/report/pinshim-report"
TMP = os.environ.get("TEST_TMPDIR", "/tmp")


def program(name):
    return os.path.join(HERE, "programs", name)


def fresh_dir(name):
    d = os.path.join(TMP, "report_test", name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    return d


def run(name, trace_dir, args=(), env=None, binary=None):
    e = dict(os.environ, PINSHIM_TRACE_DIR=trace_dir)
    e.update(env or {})
    subprocess.run([binary or program(name)] + list(args), env=e, check=True, timeout=120)


def report(args):
    return subprocess.run([REPORT] + args, capture_output=True, text=True, timeout=300)


def traces(d):
    return sorted(os.path.join(d, f) for f in os.listdir(d) if f.endswith(".pstrace"))


class BadInputTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.good_dir = fresh_dir("good")
        run("pageable_hot", cls.good_dir)
        cls.good = traces(cls.good_dir)[0]
        with open(cls.good, "rb") as f:
            cls.bytes = f.read()

    def write(self, name, data):
        d = fresh_dir("bad_" + name)
        path = os.path.join(d, name + ".pstrace")
        with open(path, "wb") as f:
            f.write(data)
        return path

    def assert_one_line_error(self, out, text):
        self.assertEqual(out.returncode, 2, out.stdout + out.stderr)
        lines = out.stderr.strip().splitlines()
        self.assertTrue(any(text in l for l in lines), out.stderr)
        for line in lines:
            self.assertTrue(line.startswith("pinshim report: "), line)

    def test_empty_file(self):
        self.assert_one_line_error(report([self.write("empty", b"")]), "empty file")

    def test_foreign_file(self):
        self.assert_one_line_error(report([self.write("foreign", b"\x7fELF\x02\x01\x01" + b"\0" * 100)]),
                                   "not a pinshim trace")

    def test_wrong_version(self):
        data = bytearray(self.bytes)
        data[8] = 7
        self.assert_one_line_error(report([self.write("version", bytes(data))]),
                                   "trace format version 7, but this pinshim reads version 1")

    def test_truncated_header(self):
        self.assert_one_line_error(report([self.write("short", self.bytes[:12])]),
                                   "truncated in its header")

    def test_missing_path_and_empty_directory(self):
        self.assert_one_line_error(report(["/nonexistent/trace.pstrace"]), "No such file")
        empty = fresh_dir("no_traces")
        with open(os.path.join(empty, "notes.txt"), "w") as f:
            f.write("not a trace\n")
        self.assert_one_line_error(report([empty]), "no pinshim traces")
        # It names pinshim run's option, which most users gave, and says
        # what a program that never reached CUDA leaves: nothing.
        self.assert_one_line_error(report([empty]), "pinshim run --trace-dir")
        self.assert_one_line_error(report([empty]), "did the program reach CUDA?")

    def test_truncated_trace_reports_what_is_readable(self):
        # Into the end record: the events before it are all there.
        path = self.write("truncated", self.bytes[: len(self.bytes) - 5])
        out = report(["--format", "json", path])
        self.assertEqual(out.returncode, 0, out.stderr)
        data = json.loads(out.stdout)
        proc = data["processes"][0]
        self.assertFalse(proc["trace_complete"])
        self.assertIn("unfinished record", proc["damage"])
        self.assertEqual([f["rule"] for f in data["findings"]], ["pageable-hot"])
        text = report([path])
        self.assertIn("note: ", text.stdout)

    def test_corrupt_middle_is_skipped(self):
        data = bytearray(self.bytes)
        middle = len(data) // 2
        for i in range(middle, middle + 40):
            data[i] ^= 0xA5
        out = report(["--format", "json", self.write("corrupt", bytes(data))])
        self.assertEqual(out.returncode, 0, out.stderr)
        proc = json.loads(out.stdout)["processes"][0]
        self.assertIn("damaged data", proc["damage"])
        self.assertTrue(proc["trace_complete"])

    def test_random_garbage_after_a_good_trace(self):
        out = report(["--format", "json", self.write("garbage", self.bytes + os.urandom(5000))])
        self.assertEqual(out.returncode, 0, out.stderr)
        proc = json.loads(out.stdout)["processes"][0]
        self.assertIn("unfinished record", proc["damage"])

    def test_good_and_bad_together(self):
        bad = self.write("mixed", b"garbage")
        out = report(["--format", "json", self.good, bad])
        self.assertEqual(out.returncode, 0)
        self.assertIn("not a pinshim trace", out.stderr)
        data = json.loads(out.stdout)
        self.assertEqual(len(data["processes"]), 1)
        self.assertEqual(len(data["problems"]), 1)

    def test_bad_options(self):
        self.assert_one_line_error(report(["--format", "xml", self.good]), "unknown format 'xml'")
        self.assert_one_line_error(report(["--frobnicate", self.good]), "unknown option")
        self.assert_one_line_error(report([]), "no trace given")
        self.assert_one_line_error(report(["--calibration", "/nonexistent", self.good]),
                                   "cannot open")
        self.assertEqual(report(["--help"]).returncode, 0)


class ProcessesTest(unittest.TestCase):
    def test_missing_binary_gives_module_offset_and_why(self):
        d = fresh_dir("missing_binary")
        copy = os.path.join(d, "vanishing_program")
        shutil.copy(program("pageable_hot"), copy)
        run(None, d, binary=copy)
        os.remove(copy)
        out = report(["--format", "json", d])
        self.assertEqual(out.returncode, 0, out.stderr)
        data = json.loads(out.stdout)
        self.assertTrue(any("vanishing_program" in p and "file not found" in p
                            for p in data["processes"][0]["symbol_problems"]),
                        data["processes"][0]["symbol_problems"])
        site = data["findings"][0]["site"]
        self.assertIsNone(site["function"])
        self.assertTrue(site["module"].endswith("vanishing_program"))
        self.assertGreater(site["offset"], 0)
        self.assertIn("file not found", site["note"])
        text = report([d]).stdout
        self.assertIn("vanishing_program+0x", text)

    def test_killed_process(self):
        d = fresh_dir("killed")
        proc = subprocess.Popen([program("long_running")], env=dict(os.environ, PINSHIM_TRACE_DIR=d))
        # Still running: the report says so, and reports what is there (batches
        # reach the file once 100 ms old; wait for them however slow the machine).
        deadline = time.time() + 60
        while True:
            out = report(["--format", "json", d])
            if out.returncode == 0 and json.loads(out.stdout)["findings"]:
                break
            self.assertLess(time.time(), deadline, out.stderr)
            time.sleep(0.2)
        running = json.loads(out.stdout)["processes"][0]
        self.assertIn("still running", running["damage"])
        self.assertIn("pageable-hot", [f["rule"] for f in json.loads(out.stdout)["findings"]])
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        time.sleep(5.5)  # let the file age past "still being written"
        out = report(["--format", "json", d])
        self.assertEqual(out.returncode, 0, out.stderr)
        data = json.loads(out.stdout)
        self.assertFalse(data["processes"][0]["trace_complete"])
        self.assertIn("killed or crashed", data["processes"][0]["damage"])
        f = [f for f in data["findings"] if f["rule"] == "pageable-hot"]
        self.assertTrue(f)
        self.assertGreater(f[0]["evidence"]["copies"], 50)

    def test_fork_and_exec_each_get_a_trace(self):
        d = fresh_dir("fork_exec")
        run("fork_and_exec", d)
        files = traces(d)
        self.assertEqual(len(files), 3, files)
        out = report(["--format", "json", d])
        self.assertEqual(out.returncode, 0, out.stderr)
        data = json.loads(out.stdout)
        procs = data["processes"]
        self.assertEqual(len(procs), 3)
        self.assertTrue(all(p["trace_complete"] for p in procs), procs)
        by_copies = sorted(p["copies"] for p in procs)
        self.assertEqual(by_copies, [5, 6, 7])
        parent = [p for p in procs if p["copies"] == 5][0]
        child = [p for p in procs if p["copies"] == 6][0]
        after_exec = [p for p in procs if p["copies"] == 7][0]
        self.assertEqual(child["forked_from"], parent["pid"])
        self.assertEqual(after_exec["pid"], parent["pid"])
        self.assertEqual(after_exec["command_line"][1:], ["after-exec"])
        # One site, found in all three processes, merged.
        f = [f for f in data["findings"] if f["rule"] == "pageable-hot"]
        self.assertEqual(len(f), 1)
        self.assertEqual(sorted(f[0]["processes"]), [0, 1, 2])
        by_process = f[0]["seconds_lost_by_process"]
        self.assertEqual(len(by_process), 3)
        self.assertAlmostEqual(sum(by_process), f[0]["estimated_seconds_lost"])
        # 5, 6 and 7 copies of the same size: losses in that proportion.
        losses = dict(zip(f[0]["processes"], by_process))
        ordered = [losses[procs.index(p)] for p in (parent, child, after_exec)]
        self.assertAlmostEqual(ordered[0] / 5, ordered[2] / 7)
        self.assertLess(ordered[0], ordered[1])
        self.assertLess(ordered[1], ordered[2])


class PerfettoTest(unittest.TestCase):
    def test_timeline_has_slices_counters_and_metadata(self):
        d = fresh_dir("perfetto")
        run("over_pinning", d, env={"PINSHIM_BUDGET": str(64 << 20)})
        run("pageable_hot", d)
        out = report(["--format", "perfetto", d])
        self.assertEqual(out.returncode, 0, out.stderr)
        data = json.loads(out.stdout)
        events = data["traceEvents"]
        kinds = {(e["ph"], e.get("cat")) for e in events}
        self.assertIn(("X", "copy"), kinds)
        self.assertIn(("X", "pinned"), kinds)
        self.assertIn(("C", "memory"), kinds)
        names = {e["name"] for e in events}
        self.assertIn("pinned bytes", names)
        self.assertIn("pinned budget", names)
        self.assertIn("process_name", names)
        self.assertIn("thread_name", names)
        pids = {e["pid"] for e in events if e["ph"] == "X"}
        self.assertEqual(len(pids), 2)
        for e in events:
            if e["ph"] == "X":
                self.assertGreaterEqual(e["ts"], 0)
                self.assertGreaterEqual(e["dur"], 0)
                self.assertIn("tid", e)
        copies = [e for e in events if e.get("cat") == "copy"]
        self.assertEqual(len(copies), 40 + 4)
        peak = max(e["args"]["program pinned"] for e in events if e["name"] == "pinned bytes")
        self.assertEqual(peak, 4 * (32 << 20))

        # Stacks are named: each copy carries its symbolized call site and
        # its stack in the file's stack table, outermost frame last.
        frames = data["stackFrames"]
        for e in copies:
            self.assertRegex(e["args"]["site"], r"\.cc:\d+\)$")
            chain, sf = [], e["sf"]
            while sf is not None:
                chain.append(frames[sf]["name"])
                sf = frames[sf].get("parent")
            self.assertIn(e["args"]["site"], chain)
        # Findings are on the timeline, one track each, spanning the events
        # at their call site.
        json_report = json.loads(report(["--format", "json", d]).stdout)
        findings = [e for e in events if e.get("cat") == "finding"]
        self.assertEqual(len(findings), len(json_report["findings"]))
        tracks = {(e["pid"], e["tid"]) for e in findings}
        self.assertEqual(len(tracks), len(findings))
        named = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
                 if e["ph"] == "M" and e["name"] == "thread_name"}
        for e in findings:
            self.assertTrue(named[(e["pid"], e["tid"])].startswith("finding: "))
            self.assertIn(e["args"]["severity"], ("info", "warning", "error"))
            self.assertTrue(e["args"]["explanation"])
        hot = [e for e in findings if e["name"] == "WARNING pageable-hot"]
        self.assertEqual(len(hot), 1)
        hot_copies = [c for c in copies if c["pid"] == hot[0]["pid"] and
                      c["args"]["site"] == hot[0]["args"]["site"]]
        self.assertTrue(hot_copies)
        self.assertEqual(hot[0]["ts"], min(c["ts"] for c in hot_copies))

    def test_budget_refusals_are_instants_on_their_thread(self):
        d = fresh_dir("perfetto_budget")
        run("budget_refused", d, env={"PINSHIM_MODE": "enforce", "PINSHIM_BUDGET": str(4 << 20),
                                      "PINSHIM_POLICY": "deny"})
        out = report(["--format", "perfetto", d])
        self.assertEqual(out.returncode, 0, out.stderr)
        events = json.loads(out.stdout)["traceEvents"]
        refusals = [e for e in events if e.get("cat") == "budget"]
        # Granted decisions stay off the timeline.
        self.assertEqual(len(refusals), 2)
        pid = refusals[0]["pid"]
        for e in refusals:
            self.assertEqual(e["ph"], "i")
            self.assertEqual(e["s"], "t")
            self.assertEqual(e["tid"], pid)  # the main thread made the calls
            self.assertEqual(e["args"]["decision"], "denied")
            self.assertEqual(e["args"]["limiter"], "process")
            self.assertEqual(e["args"]["process_budget"], 4 << 20)
        self.assertEqual(sorted(e["args"]["owner"] for e in refusals),
                         ["program_alloc", "program_register"])
        budgets = [e["args"]["budget"] for e in events if e["name"] == "pinned budget"]
        self.assertTrue(budgets)
        self.assertEqual(set(budgets), {4 << 20})


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0], "-v"])
