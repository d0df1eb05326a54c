"""Checks a `pinshim report --format json` against the MISUSE(rule) marks of
a program's source: each mark must have a finding of that rule at that file
and line. Usage: check_findings.py SOURCE REPORT_JSON [--native-ok]
--native-ok also accepts a finding of the rule whose site is a native frame
(for Python programs, whose own lines a report may not recover). Prints one
line per mark and exits 1 when one is missing."""
import json
import os
import re
import sys


def main():
    source, report = sys.argv[1], sys.argv[2]
    native_ok = "--native-ok" in sys.argv[3:]
    marks = []
    with open(source) as f:
        for number, text in enumerate(f, 1):
            for rule in re.findall(r"MISUSE\(([a-z-]+)\)", text):
                marks.append((rule, number))
    with open(report) as f:
        findings = json.load(f)["findings"]
    base = os.path.basename(source)
    missing = 0
    for rule, line in marks:
        of_rule = [f for f in findings if f["rule"] == rule]
        exact = [f for f in of_rule
                 if (f["site"].get("file") or "").endswith(base) and f["site"].get("line") == line]
        if exact:
            print("ok      %s at %s:%d" % (rule, base, line))
        elif native_ok and of_rule:
            site = of_rule[0]["site"]
            print("ok      %s at native frame %s (%s:%s) for %s:%d" % (
                rule, site.get("function"), site.get("file"), site.get("line"), base, line))
        else:
            missing += 1
            print("MISSING %s at %s:%d; findings: %s" % (
                rule, base, line, [(f["rule"], f["site"].get("file"), f["site"].get("line"))
                                   for f in findings]))
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
