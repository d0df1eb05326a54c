#!/usr/bin/env bash
# Runs every test (unit, interception against the simulated driver, tool and
# budget tests), fuzzes the trace reader, checks the C++ formatting, runs
# the unit and interception tests again under AddressSanitizer and
# UndefinedBehaviorSanitizer and the concurrent ones under ThreadSanitizer
# (scripts/sanitize.sh), and ends with one line: "N passed, N failed[, N
# skipped]", counting individual test cases from each test's XML report, the
# sanitizer runs' included; the fuzzer, the format check and the
# thread-safety check count one each.
set -uo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh || exit 2
scripts/install_test_deps.sh || exit 2

logs="$(mktemp -d /tmp/pinshim-test.XXXXXX)"
quiet='^(Loading|Analyzing|INFO: (Analyzed|Found|Elapsed|Build completed|From))'

# Interpreters the Python-frames test runs besides the system's: pyenv's,
# where there is one (the test itself looks into no home directory).
pythons="${PINSHIM_TEST_PYTHONS:-}"
for p in "${PYENV_ROOT:-$HOME/.pyenv}"/versions/*/bin/python3 \
         "${PYENV_ROOT:-$HOME/.pyenv}"/versions/*/bin/python; do
  [ -x "$p" ] && pythons="${pythons:+$pythons:}$p"
done

start=$SECONDS
bazel test //... --test_output=errors --test_env=PINSHIM_TEST_PYTHONS="$pythons" 2>&1 |
  tee "$logs/plain.log" | grep -Ev "$quiet"
status=${PIPESTATUS[0]}
echo "the suite took $((SECONDS - start))s"

# The trace reader under libFuzzer for a bounded time (crashes it finds are
# kept in tests/trace/fuzz/regressions/, which the suite above replays).
fuzz_seconds="${PINSHIM_FUZZ_SECONDS:-60}"
echo "fuzzing the trace reader for ${fuzz_seconds}s"
if bash tests/trace/fuzz/run_fuzzer.sh "$fuzz_seconds" > /tmp/pinshim-fuzz.log 2>&1; then
  fuzz=pass
else
  fuzz=fail
  tail -n 20 /tmp/pinshim-fuzz.log
fi

# Formatting: every tracked C++ file as clang-format-14 and the root
# .clang-format leave it (scripts/format_check.sh --fix formats them).
if bash scripts/format_check.sh > "$logs/format.log" 2>&1; then
  format=pass
else
  format=fail
fi
tail -n 1 "$logs/format.log"

# Locking: the annotated sources under clang's -Wthread-safety, after
# proving the check refuses a file that breaks it
# (scripts/thread_safety_check.sh).
if bash scripts/thread_safety_check.sh > "$logs/threadsafety.log" 2>&1; then
  threadsafety=pass
else
  threadsafety=fail
fi
tail -n 1 "$logs/threadsafety.log"

# The sanitizers, one build each (.bazelrc: --config=asan|ubsan|tsan), on
# the simulated driver. PINSHIM_SANITIZERS="" skips them.
sanitizers=(${PINSHIM_SANITIZERS-asan ubsan tsan})
for san in "${sanitizers[@]}"; do
  bash scripts/sanitize.sh "$san" --list > "$logs/$san.targets"
  echo "$san runs $(wc -l < "$logs/$san.targets") test targets: $(tr '\n' ' ' < "$logs/$san.targets")"
  mapfile -t targets < "$logs/$san.targets"
  start=$SECONDS
  bash scripts/sanitize.sh "$san" "${targets[@]}" 2>&1 | tee "$logs/$san.log" | grep -Ev "$quiet"
  echo "${PIPESTATUS[0]}" > "$logs/$san.status"
  echo "$san took $((SECONDS - start))s"
done

python3 - "$status" "$fuzz" "$format" "$threadsafety" "$logs" "${sanitizers[@]}" <<'PY'
import glob, os, re, sys, xml.etree.ElementTree as ET

# A target bazel reports as failed whose report shows no failed case (its
# cases passed, then the binary exited with an error: a sanitizer's report
# at exit, a crash in teardown) counts as one failed case.
FAILED_STATES = ("FAILED", "TIMEOUT", "INCOMPLETE", "NO STATUS", "FAILED TO BUILD")
SUMMARY = re.compile(r"^(//\S+)\s+(?:\(cached\) )?(PASSED|FLAKY|" + "|".join(FAILED_STATES) + r")\b")

def bazel_states(log):
    states = {}
    try:
        with open(log, errors="replace") as f:
            for line in f:
                m = SUMMARY.match(line)
                if m:
                    states[m.group(1)] = m.group(2)
    except OSError:
        pass
    return states

def count_report(path, tally, sanitizer):
    """Adds the cases of one test.xml to tally; returns its failed cases.
    In a sanitizer's run (sanitizer set), each skipped case is listed with
    its reason: a case that cannot run under that sanitizer says why."""
    try:
        root = ET.parse(path).getroot()
    except (ET.ParseError, OSError):
        tally["failed"] += 1
        print(f"unreadable test report: {path}")
        return 1
    failed = 0
    for case in root.iter("testcase"):
        if case.find("failure") is not None or case.find("error") is not None:
            tally["failed"] += 1
            failed += 1
        elif case.find("skipped") is not None or case.get("status") == "notrun":
            tally["skipped"] += 1
            note = case.find("skipped")
            message = note.get("message", "") if note is not None else ""
            if sanitizer is None and message.startswith("expected failure"):
                # Named expected failures (docs/limits.md), listed every run.
                print(f"expected failure: {case.get('classname')}: {case.get('name')}")
            elif sanitizer is not None:
                why = " ".join(message.split("\n")[1:]).strip() or message.strip()
                print(f"{sanitizer}: not run: {case.get('classname')}.{case.get('name')}: {why}")
        else:
            tally["passed"] += 1
    return failed

def report_path(testlogs, label):
    package, name = label[2:].split(":", 1)
    return os.path.join(testlogs, package, name, "test.xml")

status = int(sys.argv[1])
fuzz = sys.argv[2]
format_check = sys.argv[3]
thread_safety = sys.argv[4]
logs = sys.argv[5]
sanitizers = sys.argv[6:]
total = {"passed": 0, "failed": 0, "skipped": 0}

plain = {"passed": 0, "failed": 0, "skipped": 0}
states = bazel_states(os.path.join(logs, "plain.log"))
for path in glob.glob("bazel-testlogs/**/test.xml", recursive=True):
    # Reports of repeated runs (--runs_per_test) from other invocations.
    if "/run_" in path:
        continue
    failed = count_report(path, plain, None)
    label = "//" + ":".join(os.path.split(os.path.dirname(os.path.relpath(path, "bazel-testlogs"))))
    if failed == 0 and states.get(label) in FAILED_STATES:
        plain["failed"] += 1
        print(f"{label}: its cases passed, but it failed ({states[label]}; see its test.log)")
# bazel exits 3 when tests failed, other non-zero codes for build errors.
if status not in (0, 3) and plain["failed"] == 0:
    plain["failed"] = 1
    print("the build failed before the tests could run")
for k in total:
    total[k] += plain[k]
if fuzz == "pass":
    total["passed"] += 1
else:
    total["failed"] += 1
    print("the trace reader fuzzer failed (see /tmp/pinshim-fuzz.log)")
if format_check == "pass":
    total["passed"] += 1
else:
    total["failed"] += 1
    with open(os.path.join(logs, "format.log"), errors="replace") as f:
        print(f.read().rstrip())
if thread_safety == "pass":
    total["passed"] += 1
else:
    total["failed"] += 1
    with open(os.path.join(logs, "threadsafety.log"), errors="replace") as f:
        print(f.read().rstrip())

ok = total["failed"] == 0 and status == 0
for san in sanitizers:
    tally = {"passed": 0, "failed": 0, "skipped": 0}
    with open(os.path.join(logs, san + ".targets")) as f:
        targets = [t.strip() for t in f if t.strip()]
    with open(os.path.join(logs, san + ".status")) as f:
        san_status = int(f.read().strip() or "1")
    states = bazel_states(os.path.join(logs, san + ".log"))
    testlogs = f"bazel-{san}-testlogs"
    for label in targets:
        path = report_path(testlogs, label)
        if not os.path.exists(path):
            tally["failed"] += 1
            print(f"{san}: {label}: no test report (it did not build or did not run)")
            continue
        failed = count_report(path, tally, san)
        if failed == 0 and states.get(label) in FAILED_STATES:
            tally["failed"] += 1
            print(f"{san}: {label}: its cases passed, but it failed "
                  f"({states[label]}: a sanitizer report or a crash at exit; see its test.log)")
    if san_status not in (0, 3) and tally["failed"] == 0:
        tally["failed"] = 1
        print(f"{san}: the build failed before the tests could run")
    line = f"{san}: {tally['passed']} passed, {tally['failed']} failed"
    if tally["skipped"]:
        line += f", {tally['skipped']} skipped"
    print(line + f" ({len(targets)} test targets)")
    for k in total:
        total[k] += tally[k]
    ok = ok and tally["failed"] == 0 and san_status == 0

line = f"{total['passed']} passed, {total['failed']} failed"
if total["skipped"]:
    line += f", {total['skipped']} skipped"
print(line)
sys.exit(0 if ok else 1)
PY
