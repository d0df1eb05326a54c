"""`pinshim fleet` end to end. Eight rule programs record their traces;
make_fleet_traces turns them into 2,000 traces of 50 hosts and 40 programs
(every third program variant another build, whose sites are other keys), to
which one corrupt trace is added. `pinshim report --format json` and
`pinshim fleet` on a local cluster of two workers read the same traces: the
fleet's totals must equal the report's (processes, copies, bytes, each
rule's findings counted per process, estimated time lost), the corrupt trace
must be listed with its reason and skipped, the same line in many processes
and hosts must be one site, and the page must load in headless Chromium
with no error and no request. An existing cluster (started apart, its
workers without the fleet package) gives the same totals for one host.
Without dask, the command names the packages it needs."""

import glob
import json
import os
import shutil
import subprocess
import sys
import time
import unittest

RUNFILES = os.getcwd()
sys.path.insert(0, os.path.join(RUNFILES, "tests", "trace"))
import headless_chromium  # noqa: E402

PINSHIM = os.path.join(RUNFILES, "analyzer", "pinshim")
GENERATOR = os.path.join(RUNFILES, "tests", "trace", "make_fleet_traces")
PROGRAMS = os.path.join(RUNFILES, "tests", "trace", "programs")
TMP = os.environ.get("TEST_TMPDIR", "/tmp")
COUNT = 2000
HOSTS = 50

# program -> extra environment (as tests/trace/rules_test.py runs them)
SEEDS = {
    "async_pageable": {},
    "budget_refused": {"PINSHIM_MODE": "enforce", "PINSHIM_BUDGET": str(4 << 20),
                       "PINSHIM_POLICY": "deny"},
    "over_pinning": {"PINSHIM_BUDGET": str(64 << 20)},
    "pageable_hot": {},
    "pinned_churn": {},
    "pinned_unused": {},
    "small_copies": {},
    "sync_copy_loop": {},
}


def run(command, **kwargs):
    return subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, timeout=600, **kwargs)


def make_fleet(root):
    seeds = os.path.join(TMP, "seeds")
    shutil.rmtree(seeds, ignore_errors=True)
    for name, extra in SEEDS.items():
        env = dict(os.environ, PINSHIM_TRACE_DIR=seeds, **extra)
        proc = run([os.path.join(PROGRAMS, name)], env=env)
        assert proc.returncode == 0, (name, proc.stderr[-2000:])
    shutil.rmtree(root, ignore_errors=True)
    proc = run([GENERATOR, "--out", root, "--count", str(COUNT), "--hosts", str(HOSTS),
                "--programs", "5", "--rebuild-every", "3"] +
               sorted(glob.glob(os.path.join(seeds, "*.pstrace"))))
    assert proc.returncode == 0, proc.stderr
    # Symbols archived once and kept beside every host's traces, as a fleet
    # collects them (docs/fleet.md): no trace needs the programs' files.
    proc = run([PINSHIM, "archive", os.path.join(root, "node-0")])
    assert proc.returncode == 0, proc.stderr
    for host in glob.glob(os.path.join(root, "node-*")):
        if not os.path.exists(os.path.join(host, "pinshim-symbols.txt")):
            shutil.copy(os.path.join(root, "node-0", "pinshim-symbols.txt"), host)
    corrupt = os.path.join(root, "node-7", "corrupt.4242.pstrace")
    with open(corrupt, "wb") as f:
        f.write(b"PINSHIMX" + bytes(range(256)) * 4)
    return corrupt


# A cluster started apart from pinshim fleet, as an existing one would be.
SCHEDULER = """
import os, signal, sys, time
if __name__ == "__main__":
    from distributed import LocalCluster
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    cluster = LocalCluster(n_workers=1, threads_per_worker=1, dashboard_address=None,
                           local_directory=sys.argv[2])
    try:
        with open(sys.argv[1] + ".tmp", "w") as f:
            f.write(cluster.scheduler_address)
        os.rename(sys.argv[1] + ".tmp", sys.argv[1])
        time.sleep(3600)
    finally:
        cluster.close()
"""


class FleetTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.root = os.path.join(TMP, "fleet-traces")
        cls.corrupt = make_fleet(cls.root)
        hosts = sorted(glob.glob(os.path.join(cls.root, "node-*")))
        proc = run([PINSHIM, "report", "--format", "json"] + hosts)
        assert proc.returncode == 0, proc.stderr[-3000:]
        cls.report = json.loads(proc.stdout)
        cls.out = os.path.join(TMP, "fleet-out")
        shutil.rmtree(cls.out, ignore_errors=True)
        proc = run([PINSHIM, "fleet", "--out", cls.out, "--workers", "2", cls.root])
        cls.fleet_stderr = proc.stderr
        assert proc.returncode == 0, proc.stderr[-3000:]
        with open(os.path.join(cls.out, "summary.json")) as f:
            cls.summary = json.load(f)

    def table(self, name):
        with open(os.path.join(self.out, name + ".jsonl")) as f:
            return [json.loads(line) for line in f]

    def test_totals_equal_the_reports(self):
        r, t = self.report, self.summary["totals"]
        self.assertEqual(t["processes"], COUNT)
        self.assertEqual(t["processes"], r["summary"]["processes"])
        self.assertEqual(t["copies"], sum(p["copies"] for p in r["processes"]))
        self.assertEqual(t["copy_bytes"], sum(b for p in r["processes"]
                                              for kinds in p["bytes_moved"].values()
                                              for b in kinds.values()))
        # The report merges a rule's findings at one site across processes;
        # counted per process they are the fleet's findings.
        by_rule = {}
        for f in r["findings"]:
            by_rule[f["rule"]] = by_rule.get(f["rule"], 0) + len(f["processes"])
        self.assertEqual(t["findings_by_rule"], by_rule)
        self.assertEqual(t["findings"], sum(by_rule.values()))
        self.assertGreaterEqual(len(by_rule), 8, "the seeds should show eight rules")
        self.assertAlmostEqual(t["estimated_seconds_lost"],
                               r["summary"]["estimated_seconds_lost"], delta=1e-6 * COUNT)
        self.assertGreater(t["estimated_seconds_lost"], 0)

    def test_the_corrupt_trace_is_listed_and_skipped(self):
        problems = self.table("problems")
        self.assertEqual([p["trace"] for p in problems], [self.corrupt])
        self.assertIn("not a pinshim trace", problems[0]["problem"])
        self.assertEqual(self.summary["totals"]["unreadable_traces"], 1)
        self.assertEqual(len(self.report["problems"]), 1)
        self.assertIn("%d/%d traces analyzed" % (COUNT + 1, COUNT + 1), self.fleet_stderr)

    def test_one_line_in_many_processes_and_hosts_is_one_site(self):
        top = self.table("top_sites")
        hot = [s for s in top if s["rules"] == "pageable-hot"]
        # The builds the generator left alone share one key; each rebuilt
        # variant is a key of its own, which the archive cannot name.
        self.assertGreaterEqual(len(hot), 2)
        widest = max(hot, key=lambda s: s["processes"])
        self.assertTrue(widest["site"].startswith("n"), widest)
        self.assertIn("pageable_hot.cc:9", widest["short"])
        self.assertEqual(len({s["build_id"] for s in hot}), len(hot))
        self.assertEqual(widest["hosts"], HOSTS)
        self.assertGreaterEqual(widest["processes"], 100)
        self.assertEqual(sum(s["processes"] for s in hot), COUNT // len(SEEDS))
        self.assertEqual(len({s["site"] for s in top}), len(top))

    def test_hosts_and_bandwidth(self):
        hosts = self.table("host_pinned")
        self.assertEqual(len(hosts), HOSTS)
        self.assertTrue(all(h["peak_pinned_bytes"] >= h["largest_process_peak_bytes"] > 0
                            for h in hosts), hosts[:3])
        kinds = {(b["direction"], b["memory"]) for b in self.table("bandwidth")}
        self.assertIn(("H2D", "pageable"), kinds)
        self.assertIn(("H2D", "pinned"), kinds)

    def test_the_page_loads_without_errors(self):
        page = os.path.join(self.out, "fleet.html")
        with open(page) as f:
            html = f.read()
        self.assertIn("default-src 'none'", html)
        self.assertNotIn("<script", html)
        chromium = headless_chromium.find_chromium()
        self.assertIsNotNone(chromium, "chromium is needed (scripts/install_test_deps.sh)")
        b = headless_chromium.Chromium(chromium, os.path.join(TMP, "fleet.chromium.log"))
        try:
            b.open("file://" + page)
            text = b.evaluate("document.body.innerText")
            tables = b.evaluate("document.querySelectorAll('table').length")
            problems = b.problems("file://" + page)
        finally:
            b.close()
        self.assertEqual(problems, [])
        self.assertIn("Top call sites fleet-wide", text)
        self.assertIn("pageable_hot.cc:9", text)
        self.assertIn("corrupt.4242.pstrace", text)
        self.assertEqual(tables, 5)

    def test_an_existing_cluster_gives_the_same_totals(self):
        script = os.path.join(TMP, "scheduler.py")
        with open(script, "w") as f:
            f.write(SCHEDULER)
        address = os.path.join(TMP, "scheduler.address")
        space = os.path.join(TMP, "scheduler-space")
        os.makedirs(space, exist_ok=True)
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        cluster = subprocess.Popen(["/usr/bin/python3", script, address, space], env=env,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.time() + 240
            while not os.path.exists(address) and time.time() < deadline:
                self.assertIsNone(cluster.poll(), "the cluster did not start")
                time.sleep(0.5)
            with open(address) as f:
                scheduler = f.read()
            host = os.path.join(self.root, "node-3")
            out = os.path.join(TMP, "fleet-existing")
            proc = run([PINSHIM, "fleet", "--scheduler", scheduler, "--out", out, host])
            self.assertEqual(proc.returncode, 0, proc.stderr[-3000:])
        finally:
            cluster.terminate()
            try:
                cluster.wait(timeout=60)
            except subprocess.TimeoutExpired:
                cluster.kill()
                cluster.wait()
        with open(os.path.join(out, "summary.json")) as f:
            summary = json.load(f)
        report = json.loads(run([PINSHIM, "report", "--format", "json", host]).stdout)
        self.assertEqual(summary["run"]["workers"], 1)
        self.assertEqual(summary["totals"]["processes"], len(report["processes"]))
        self.assertEqual(summary["totals"]["copies"], sum(p["copies"] for p in report["processes"]))
        self.assertEqual(summary["totals"]["findings"],
                         sum(len(f["processes"]) for f in report["findings"]))

    def test_without_dask_it_names_the_packages(self):
        wrapper = os.path.join(TMP, "python-without-site")
        with open(wrapper, "w") as f:
            f.write("#!/bin/sh\nexec /usr/bin/python3 -S \"$@\"\n")
        os.chmod(wrapper, 0o755)
        env = dict(os.environ, PINSHIM_PYTHON=wrapper)
        proc = run([PINSHIM, "fleet", "--out", os.path.join(TMP, "unused"), self.root], env=env)
        self.assertEqual(proc.returncode, 2)
        self.assertIn("python3-dask python3-distributed python3-pandas", proc.stderr)
        self.assertFalse(os.path.exists(os.path.join(TMP, "unused")))


if __name__ == "__main__":
    unittest.main()
