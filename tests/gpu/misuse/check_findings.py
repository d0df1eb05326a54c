"""Checks a `pinshim report --format json` against the MISUSE(<rule>) marks
of a program's source: each mark must have a finding of that rule at that
file and line. Usage:
  check_findings.py SOURCE REPORT_JSON [--native-ok] [--framework NAME]
                    [--worker-thread-ok]
--native-ok        also accepts a finding of the rule at a native frame (for
                   programs whose own lines a report may not recover).
--framework NAME   the findings at the marks must carry that framework
                   ("pytorch", "cupy", "jax") and a fix in its terms.
--worker-thread-ok a finding of the rule whose stack belongs to a thread
                   without a Python state (a framework's own worker) is an
                   expected limit (XFAIL), not a failure.
A NOFINDING(<rule>) mark says the opposite: no finding of that rule may be
at that line (a copy a framework already makes from pinned memory).
Prints one line per mark and exits 1 when one is missing or wrong."""
import json
import os
import re
import sys

# Words a framework's fix must use.
FRAMEWORK_WORDS = {"pytorch": ["pin_memory"], "cupy": ["cupyx.empty_pinned"], "jax": ["jax."]}


def main():
    source, report = sys.argv[1], sys.argv[2]
    flags = sys.argv[3:]
    native_ok = "--native-ok" in flags
    worker_ok = "--worker-thread-ok" in flags
    framework = flags[flags.index("--framework") + 1] if "--framework" in flags else None
    marks = []
    absent = []
    with open(source) as f:
        for number, text in enumerate(f, 1):
            for rule in re.findall(r"MISUSE\(([a-z-]+)\)", text):
                marks.append((rule, number))
            for rule in re.findall(r"NOFINDING\(([a-z-]+)\)", text):
                absent.append((rule, number))
    with open(report) as f:
        findings = json.load(f)["findings"]
    base = os.path.basename(source)
    missing = 0
    for rule, line in marks:
        of_rule = [f for f in findings if f["rule"] == rule]
        exact = [f for f in of_rule if f["site"] and
                 (f["site"].get("file") or "").endswith(base) and f["site"].get("line") == line]
        workers = [f for f in of_rule if f["site"] and
                   f["site"].get("python_status") == "no_thread_state"]
        if exact:
            f = exact[0]
            problem = ""
            if not f["site"].get("python") and base.endswith(".py"):
                problem = "site is not a Python frame"
            if framework:
                words = FRAMEWORK_WORDS.get(framework, [])
                if f.get("framework") != framework:
                    problem = "framework %r, expected %r" % (f.get("framework"), framework)
                elif f.get("generic_fix") and not all(w in f["fix"] for w in words):
                    problem = "fix lacks %s: %s" % (words, f["fix"])
            if problem:
                missing += 1
                print("WRONG   %s at %s:%d: %s" % (rule, base, line, problem))
            else:
                print("ok      %s at %s:%d (%s; framework %s)" % (
                    rule, base, line, f["site"].get("function"), f.get("framework")))
        elif worker_ok and workers:
            site = workers[0]["site"]
            print("XFAIL   %s at %s:%d: the copy ran on a thread without a Python state "
                  "(the framework's worker), reported at %s (%s:%s); see docs/limits.md" % (
                      rule, base, line, site.get("function"), site.get("file"), site.get("line")))
        elif native_ok and of_rule:
            site = of_rule[0]["site"]
            print("ok      %s at native frame %s (%s:%s) for %s:%d" % (
                rule, site.get("function"), site.get("file"), site.get("line"), base, line))
        else:
            missing += 1
            print("MISSING %s at %s:%d; findings: %s" % (
                rule, base, line, [(f["rule"], (f["site"] or {}).get("file"),
                                    (f["site"] or {}).get("line"),
                                    (f["site"] or {}).get("python_status")) for f in findings]))
    for rule, line in absent:
        wrong = [f for f in findings if f["rule"] == rule and f["site"] and
                 (f["site"].get("file") or "").endswith(base) and f["site"].get("line") == line]
        if wrong:
            missing += 1
            print("WRONG   %s at %s:%d: no such finding belongs there" % (rule, base, line))
        else:
            print("ok      no %s at %s:%d" % (rule, base, line))
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
