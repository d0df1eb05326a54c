"""The hazard suite: hazard_program changes the pages behind buffers it
copies in every way tests/hazards/hazard_program.cc lists; its output must be
the same without pinshim and under it in every mode. One test case per
(configuration, program line), written to $XML_OUTPUT_FILE so each counts.

Usage: hazards_test.py PROGRAM LIBPINSHIM REPORT [DRIVER_DIR]
DRIVER_DIR goes first on LD_LIBRARY_PATH (the simulated driver); leave it
out to run against the real driver (the GPU tier does).

The cases on memory the driver maps run in a process of their own, and
each alone when that one does not finish: how each such case ended is
compared too, so a case that ends its process without pinshim must end it
alike with it.

A case that cannot be made right stays here as a named expected failure
(EXPECTED_FAILURES, printed as XFAIL, listed in docs/limits.md); one that
starts passing is reported (XPASS) and fails, so the list stays true."""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

PROGRAM, LIB, REPORT = (os.path.abspath(a) for a in sys.argv[1:4])
DRIVER_DIR = os.path.abspath(sys.argv[4]) if len(sys.argv) > 4 else None
TMP = os.environ.get("TEST_TMPDIR") or tempfile.mkdtemp(prefix="pinshim-hazards-")

# configuration name -> environment (None: without the library). The
# self-check (PINSHIM_SELF_CHECK) is off where a configuration means to
# exercise given paths: on the simulated driver their speeds mean nothing,
# and the self-check would take some off. "optimize+self-check" runs as a
# user would, every path left to the self-check.
OPTIMIZE = {"PINSHIM_MODE": "optimize", "PINSHIM_SELF_CHECK": "0"}
CONFIGS = {
    "observe": {"PINSHIM_MODE": "observe"},
    "optimize": dict(OPTIMIZE),
    "optimize+enforce": dict(OPTIMIZE, PINSHIM_MODE="optimize,enforce", PINSHIM_BUDGET="8G",
                             PINSHIM_NODE_BUDGET="16G"),
    "optimize+verify": dict(OPTIMIZE, PINSHIM_VERIFY_PAGES="1"),
    "optimize+no-pin-in-place": dict(OPTIMIZE, PINSHIM_PIN_IN_PLACE="0",
                                     PINSHIM_STAGE_WORKERS="3"),
    "optimize+staged": dict(OPTIMIZE, PINSHIM_STAGE_WORKERS="3"),
    "optimize+self-check": {"PINSHIM_MODE": "optimize", "PINSHIM_STAGE_WORKERS": "3"},
}

# Cases a configuration leaves out, and why. With the self-check on,
# whether a buffer is pinned in place depends on measured speeds, so a page
# change no hook can see may or may not meet a stale registration; those
# cases run where in-place pinning is certain.
LEFT_OUT = {
    ("optimize+self-check", "%s raw_syscall_dontneed" % kind)
    for kind in ("malloc", "mmap", "hotsite")
}

# (configuration, case) -> why it fails, as docs/limits.md says.
# A page change no hook can see (a raw madvise system call) leaves in-place
# pinning stale: only page verification (or no in-place pinning) catches it.
EXPECTED_FAILURES = {
    (config, "%s raw_syscall_dontneed" % kind): "a page change no hook can see"
    for config in ("optimize", "optimize+enforce", "optimize+staged")
    for kind in ("malloc", "mmap", "hotsite")
}


# Kinds of memory the driver maps: their cases run apart from the rest, as
# they may end the process (hazard_program.cc).
DRIVER_MAPPED = ["vmm-host", "host-pool"]


class Ended:
    """What a run that did not finish printed, and how it ended."""

    def __init__(self, how, stdout="", stderr=""):
        self.returncode = None
        self.how = how
        self.stdout = stdout
        self.stderr = stderr


def how_ended(proc):
    if isinstance(proc, Ended):
        return proc.how
    if proc.returncode < 0:
        return "signal %d" % -proc.returncode
    return "exit %d" % proc.returncode


def finished(proc):
    return not isinstance(proc, Ended) and proc.returncode == 0 and "done" in proc.stdout


def run(env_extra, trace_dir=None, args=(), timeout=600):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("PINSHIM_") and k != "LD_PRELOAD"}
    if DRIVER_DIR:
        env["LD_LIBRARY_PATH"] = DRIVER_DIR + (":" + env["LD_LIBRARY_PATH"]
                                               if env.get("LD_LIBRARY_PATH") else "")
    summary = None
    if env_extra is not None:
        env["LD_PRELOAD"] = LIB
        summary = os.path.join(TMP, "summary.%d" % len(os.listdir(TMP)))
        env["PINSHIM_SUMMARY"] = summary
        # Nothing outside the test's directory: no config file of the
        # machine's, no node ledger but the test's own.
        env["PINSHIM_CONFIG"] = ""
        env["PINSHIM_LEDGER_PATH"] = os.path.join(TMP, "node-ledger")
        env.update(env_extra)
        if trace_dir:
            env["PINSHIM_TRACE_DIR"] = trace_dir
    try:
        proc = subprocess.run([PROGRAM] + list(args), env=env, capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired as e:
        def text(b):
            return b.decode(errors="replace") if isinstance(b, bytes) else (b or "")
        proc = Ended("timed out after %d s" % timeout, text(e.stdout), text(e.stderr))
    lines = {}
    for line in proc.stdout.splitlines():
        name, sep, rest = line.partition(":")
        if sep:
            lines[name] = rest.strip()
    failures = re.findall(r"fakecuda pin failures: (\d+)", proc.stderr)
    if failures and failures[-1] != "0":
        print("the simulated driver could not pin %s ranges: its copies were not faithful" %
              failures[-1])
        lines["simulated driver pinned every range"] = "no"
    elif failures:
        lines["simulated driver pinned every range"] = "yes"
    counters = {}
    if summary and os.path.exists(summary):
        with open(summary) as f:
            for line in f:
                if line.startswith("pinshim: optimize "):
                    counters = dict(kv.split("=") for kv in line.split()[2:])
    return proc, lines, counters


def run_driver_mapped(env_extra, trace_dir=None):
    """The cases on memory the driver maps, in one process; when that one
    does not finish (exit 0 after "done"), each case again in a process of
    its own, so that a case that ends its process is named with how it
    ended (its line reads "ended: <how>"). Returns the lines, and how the
    one process ended (None: it finished)."""
    proc, lines, _ = run(env_extra, trace_dir, DRIVER_MAPPED)
    if finished(proc):
        return lines, None
    listed = subprocess.run([PROGRAM, "--list"] + DRIVER_MAPPED, capture_output=True, text=True,
                            timeout=60).stdout.split("\n")
    lines = {}
    for name in filter(None, listed):
        one, got, _ = run(env_extra, trace_dir, [name], timeout=120)
        lines.update(got)
        if not finished(one):
            lines[name] = "ended: " + how_ended(one)
    return lines, how_ended(proc)


def merge(lines, more):
    """The lines of the two parts of a run, as one."""
    key = "simulated driver pinned every range"
    merged = dict(lines)
    merged.update(more)
    if "no" in (lines.get(key), more.get(key)):
        merged[key] = "no"
    return merged


def main():
    cases = []  # (suite, name, failure message or None, skipped?)
    rest = [a for kind in DRIVER_MAPPED for a in ("-x", kind)]
    ref_proc, ref, _ = run(None, args=rest)
    if not finished(ref_proc):
        print(ref_proc.stdout, ref_proc.stderr)
        cases.append(("reference", "runs", "the program failed without pinshim", False))
        ref = {}
    ref_mapped, ref_mapped_end = run_driver_mapped(None)
    if ref_mapped_end is not None:
        print("without pinshim, the cases on memory the driver maps ended the process "
              "(%s); each alone:" % ref_mapped_end)
        for name in sorted(ref_mapped):
            print("  %s: %s" % (name, ref_mapped[name]))
    ref = merge(ref, ref_mapped)
    if ref.get("simulated driver pinned every range") == "no":
        cases.append(("reference", "simulated driver pinned every range",
                      "the simulated driver's copies were not faithful (see above)", False))
    for config, env in CONFIGS.items():
        trace_dir = os.path.join(TMP, "traces-" + config.replace("+", "-"))
        shutil.rmtree(trace_dir, ignore_errors=True)
        traced = config in ("optimize", "optimize+staged")
        proc, got, counters = run(env, trace_dir if traced else None, rest)
        if how_ended(proc) != how_ended(ref_proc):
            print("FAIL %s: %s (without pinshim %s); stderr ends:\n%s" %
                  (config, how_ended(proc), how_ended(ref_proc), proc.stderr[-3000:]))
            cases.append((config, "exit status",
                          "%s, without pinshim %s: %s" % (how_ended(proc), how_ended(ref_proc),
                                                          proc.stderr[-2000:]), False))
        mapped, mapped_end = run_driver_mapped(env, trace_dir if traced else None)
        got = merge(got, mapped)
        if ref_mapped_end is None:
            cases.append((config, "cases on driver-mapped memory finish in one process",
                          None if mapped_end is None else
                          "the process ended (%s); without pinshim it finished" % mapped_end,
                          False))
        for name, want in ref.items():
            if (config, name) in LEFT_OUT:
                continue
            have = got.get(name)
            expected_failure = (config, name) in EXPECTED_FAILURES
            if have == want:
                if expected_failure:
                    print("XPASS %s / %s: matches; take it off EXPECTED_FAILURES" % (config, name))
                    cases.append((config, name, "unexpectedly passed (XPASS)", False))
                else:
                    cases.append((config, name, None, False))
            elif expected_failure:
                print("XFAIL %s / %s (%s; docs/limits.md)" %
                      (config, name, EXPECTED_FAILURES[(config, name)]))
                cases.append((config, name, None, True))
            else:
                print("FAIL %s / %s\n  without pinshim: %s\n  with:            %s" %
                      (config, name, want, have))
                cases.append((config, name, "without pinshim: %s; with: %s" % (want, have), False))
        # The suite proves something only if optimize mode really pinned
        # what the cases then change, and really followed the changes.
        if config in ("optimize", "optimize+enforce", "optimize+verify"):
            need = {"cache_registrations": 1, "arena_allocs": 1, "pool_hits": 1,
                    "page_change_drops": 10}
            short = [k for k, v in need.items() if int(counters.get(k, "0")) < v]
            cases.append((config, "pinned before the pages changed",
                          ("the run proves nothing: %s below %s in %s" %
                           (short, need, counters)) if short else None, False))
        if config == "optimize+no-pin-in-place":
            pinned = [k for k in ("cache_registrations", "arena_allocs")
                      if int(counters.get(k, "0")) != 0]
            cases.append((config, "pins nothing in place",
                          "pinned in place: %s" % counters if pinned else None, False))
        if config in ("optimize+no-pin-in-place", "optimize+staged"):
            staged = int(counters.get("staged_copies", "0"))
            cases.append((config, "staged copies ran",
                          None if staged >= 50 else "only %d staged copies: %s" % (staged, counters),
                          False))
        if config == "optimize":
            cases.append((config, "trace records the page changes", check_trace(trace_dir), False))
        if config == "optimize+staged":
            cases.append((config, "report counts the staged copies", check_staged(trace_dir),
                          False))
    write_xml(cases)
    failed = [c for c in cases if c[2]]
    xfail = [c for c in cases if c[3]]
    print("%d cases, %d failed, %d expected failures" % (len(cases), len(failed), len(xfail)))
    return 1 if failed else 0


def check_trace(trace_dir):
    """The optimize run's trace lists the page-change drops with call sites."""
    out = subprocess.run([REPORT, "--format", "json", trace_dir], capture_output=True, text=True,
                         timeout=300)
    if out.returncode != 0:
        return "report failed: " + out.stderr[-500:]
    data = json.loads(out.stdout)
    changes = []
    for proc in data.get("processes", []):
        own = proc.get("optimize") or {}
        changes += own.get("page_changes", [])
    calls = {c["call"] for c in changes}
    want = {"page_change_madvise", "page_change_map_fixed", "page_change_mremap",
            "page_change_munmap"}
    if not want <= calls:
        return "page changes in the report: %s; missing %s" % (sorted(calls), sorted(want - calls))
    parts = {c["part"] for c in changes}
    if not {"cache", "arena", "pool"} <= parts:
        return "page changes by part: %s" % sorted(parts)
    source = os.path.basename(PROGRAM) + ".cc"
    sited = [c for c in changes if (c.get("site") or {}).get("file", "").endswith(source)]
    if not sited:
        return "no page change is sited in %s: %s" % (source, changes[:3])
    text = subprocess.run([REPORT, trace_dir], capture_output=True, text=True, timeout=300)
    if "pages the program changed" not in text.stdout:
        return "the text report has no page-change lines"
    return None


def check_staged(trace_dir):
    """The report's optimize section counts the staged copies, as the trace
    recorded them."""
    out = subprocess.run([REPORT, "--format", "json", trace_dir], capture_output=True, text=True,
                         timeout=300)
    if out.returncode != 0:
        return "report failed: " + out.stderr[-500:]
    staged = 0
    for proc in json.loads(out.stdout).get("processes", []):
        staged += ((proc.get("optimize") or {}).get("staged") or {}).get("copies", 0)
    if staged < 50:
        return "the report counts %d staged copies" % staged
    text = subprocess.run([REPORT, trace_dir], capture_output=True, text=True, timeout=300)
    if "staged copies" not in text.stdout:
        return "the text report does not mention the staged copies"
    return None


def write_xml(cases):
    path = os.environ.get("XML_OUTPUT_FILE")
    if not path:
        return
    suites = ET.Element("testsuites")
    by_suite = {}
    for suite, name, failure, xfail in cases:
        s = by_suite.get(suite)
        if s is None:
            s = by_suite[suite] = ET.SubElement(suites, "testsuite", name="hazards/" + suite)
        case = ET.SubElement(s, "testcase", name=name, classname="hazards." + suite)
        if failure:
            ET.SubElement(case, "failure", message=failure[:1000])
        elif xfail:
            # An expected failure: listed, and counted as skipped, never as passed.
            ET.SubElement(case, "skipped", message="expected failure: " + name)
    ET.ElementTree(suites).write(path)


if __name__ == "__main__":
    sys.exit(main())
