#!/bin/bash
# Runs the built pinshim binary: help and version, every class of bad input
# with its exit status and message, what `pinshim run` hands to the command,
# and exit statuses passed through or made up like a shell's.
set -u

PINSHIM="${TEST_SRCDIR}/${TEST_WORKSPACE}/analyzer/pinshim"
TMP="$(mktemp -d "${TEST_TMPDIR:-/tmp}/pinshim_test.XXXXXX")"
cd "${TMP}"
# The config file of the machine running the test must not change results.
export PINSHIM_CONFIG=
unset PINSHIM_LIBRARY LD_PRELOAD PINSHIM_MODE PINSHIM_BUDGET PINSHIM_NODE_BUDGET \
  PINSHIM_TRACE_DIR PINSHIM_SUMMARY PINSHIM_POLICY PINSHIM_TRACK_THRESHOLD \
  PINSHIM_METRICS_FILE PINSHIM_SAMPLE_MS PINSHIM_PIN_CAP PINSHIM_LEDGER_SHARED \
  PINSHIM_LEDGER_PATH PINSHIM_PROFILE

failures=0
fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}

# run_pinshim ARGS...: runs pinshim, leaving STATUS, OUT and ERR.
run_pinshim() {
  "${PINSHIM}" "$@" >"${TMP}/out" 2>"${TMP}/err"
  STATUS=$?
  OUT="$(cat "${TMP}/out")"
  ERR="$(cat "${TMP}/err")"
}

# expect STATUS EXACT_STDERR ARGS...: exit status and the whole of stderr.
expect() {
  local want_status="$1" want_err="$2"
  shift 2
  run_pinshim "$@"
  if [[ "${STATUS}" != "${want_status}" ]]; then
    fail "pinshim $*: status ${STATUS}, want ${want_status} (stderr: ${ERR})"
  fi
  if [[ "${ERR}" != "${want_err}" ]]; then
    fail "pinshim $*: stderr
  got:  ${ERR}
  want: ${want_err}"
  fi
}

# expect_prefix STATUS STDERR_PREFIX ARGS...: stderr is one line starting so.
expect_prefix() {
  local want_status="$1" want_prefix="$2"
  shift 2
  run_pinshim "$@"
  if [[ "${STATUS}" != "${want_status}" ]]; then
    fail "pinshim $*: status ${STATUS}, want ${want_status} (stderr: ${ERR})"
  fi
  if [[ "${ERR}" != "${want_prefix}"* || "$(printf '%s\n' "${ERR}" | wc -l)" != 1 ]]; then
    fail "pinshim $*: stderr
  got:  ${ERR}
  want one line starting: ${want_prefix}"
  fi
}

# env_value NAME: the value of NAME in OUT (output of `env`).
env_value() {
  printf '%s\n' "${OUT}" | sed -n "s/^$1=//p"
}

SIZE_FORMS='an integer or decimal with an optional unit B, K/KB/KiB, M/MB/MiB, G/GB/GiB, T/TB/TiB (any case, 1K = 1024), e.g. 4096, 512K, 1.5GiB'
SIZE_OR_PERCENT="${SIZE_FORMS}, or a percentage of physical memory above 0 and at most 100, e.g. 25%"

# --- help and version -------------------------------------------------------
run_pinshim --version
[[ "${STATUS}" == 0 && "${OUT}" =~ ^pinshim\ [0-9]+\.[0-9]+\.[0-9]+$ ]] ||
  fail "--version: status ${STATUS}, output '${OUT}'"

for help in "--help" "-h" "help"; do
  run_pinshim ${help}
  [[ "${STATUS}" == 0 && -z "${ERR}" ]] || fail "${help}: status ${STATUS}"
  for word in run report archive status calibrate HTML Perfetto "help settings"; do
    grep -q -- "${word}" "${TMP}/out" || fail "${help} does not mention ${word}"
  done
  # Short: the settings are in `pinshim help settings`.
  (( $(wc -l < "${TMP}/out") <= 25 )) || fail "${help} is $(wc -l < "${TMP}/out") lines"
  grep -q PINSHIM_ "${TMP}/out" && fail "${help} lists settings"
done

run_pinshim help settings
[[ "${STATUS}" == 0 && -z "${ERR}" ]] || fail "help settings: status ${STATUS}"
for word in PINSHIM_MODE PINSHIM_TRACE_DIR PINSHIM_SUMMARY PINSHIM_BUDGET \
    PINSHIM_NODE_BUDGET PINSHIM_POLICY PINSHIM_TRACK_THRESHOLD PINSHIM_CONFIG \
    PINSHIM_METRICS_FILE PINSHIM_SAMPLE_MS PINSHIM_PIN_CAP \
    PINSHIM_LEDGER_SHARED PINSHIM_LEDGER_PATH PINSHIM_PROFILE PINSHIM_COPY_GUARD \
    PINSHIM_LIBRARY PINSHIM_STAGE_CHUNK PINSHIM_SELF_CHECK; do
  grep -q -- "${word}" "${TMP}/out" || fail "help settings does not mention ${word}"
done

for help in "run --help" "run -h" "help run"; do
  run_pinshim ${help}
  [[ "${STATUS}" == 0 ]] || fail "${help}: status ${STATUS}"
  for word in --mode --trace-dir --summary --budget --node-budget --policy \
      --track-threshold --metrics-file --profile --config --pin-cap --idle-trim-s \
      --sample-ms --trace-max --ledger-shared --ledger --copy-guard --wc-guard --python-frames --self-check \
      PINSHIM_LIBRARY "help settings" 127; do
    grep -q -- "${word}" "${TMP}/out" || fail "${help} does not mention ${word}"
  done
  # One line per option, grouped by the mode it needs.
  for group in "Basics:" "With a trace (--trace-dir):" "Optimize mode (--mode optimize):" \
      "Enforce mode (--mode enforce):"; do
    grep -qx -- "${group}" "${TMP}/out" || fail "${help} has no group ${group}"
  done
  (( $(grep -c '^  --' "${TMP}/out") == 20 )) || fail "${help}: not one line per option"
  (( $(wc -l < "${TMP}/out") <= 50 )) || fail "${help} is $(wc -l < "${TMP}/out") lines"
done
# Help wraps at 79 columns.
if awk 'length > 79' "${TMP}/out" | grep -q .; then
  fail "run --help has lines over 79 columns"
fi

run_pinshim
[[ "${STATUS}" == 2 && "${ERR}" == *"usage: pinshim COMMAND"* ]] ||
  fail "no arguments: status ${STATUS}"
expect 2 'pinshim: unknown command "frobnicate"; commands: run, report, export, fleet, archive, status, calibrate, help (see pinshim --help)' frobnicate
expect 2 'pinshim: unknown command "frobnicate"; commands: run, report, export, fleet, archive, status, calibrate, help (see pinshim --help)' help frobnicate
expect 2 'pinshim: unknown option "--verbose"; accepted before a command: --help, --version' --verbose

# --- bad input to run: exit 2 and one line naming the problem ----------------
expect 2 'pinshim run: --mode "fast": unknown mode "fast"; accepted: observe, optimize, enforce, or a comma-separated combination such as optimize,enforce' \
  run --mode fast -- true
expect 2 "pinshim run: --budget \"12X\": unknown unit \"X\"; accepted: ${SIZE_OR_PERCENT}" \
  run --budget 12X -- true
expect 2 "pinshim run: --budget \"101%\": percentage must be above 0 and at most 100; accepted: ${SIZE_OR_PERCENT}" \
  run --budget=101% true
expect 2 "pinshim run: --node-budget \"-1G\": negative; accepted: ${SIZE_OR_PERCENT}" \
  run --node-budget -1G true
expect 2 "pinshim run: --node-budget \"\": empty; accepted: ${SIZE_OR_PERCENT}" \
  run --node-budget= true
expect 2 "pinshim run: --track-threshold \"10%\": a percentage is not accepted here; accepted: ${SIZE_FORMS}" \
  run --track-threshold 10% true
# Careless values: one line each, nothing run.
expect 2 "pinshim run: --trace-dir needs a value (DIR), not \"--\" (write --trace-dir=VALUE for a value that starts with '--')" \
  run --trace-dir -- true
expect 2 'pinshim run: --summary= needs a FILE; see pinshim run --help' run --summary= true
expect 2 'pinshim run: --summary "yes": a word, not a file name; accepted: 0 (none), 1 or /dev/stderr (stderr) or a file path (write ./yes for a file of that name)' \
  run --summary=yes true
# /dev/stderr is a link, which no output follows; it names standard error.
expect 0 "" run --summary=/dev/stderr true
PINSHIM_SUMMARY=yes expect_prefix 2 'pinshim run: PINSHIM_SUMMARY="yes": a word, not a file name' \
  run true
expect_prefix 2 'pinshim run: --track-threshold "0": below 4K' run --track-threshold 0 true
expect_prefix 2 'pinshim run: --budget "0": a budget of 0 bytes would refuse every pinning' \
  run --mode enforce --budget 0 true
expect_prefix 2 'pinshim run: --node-budget "0": a budget of 0 bytes' run --node-budget=0 true
expect 2 "pinshim run: --pin-cap \"lots\": not a number; accepted: ${SIZE_OR_PERCENT}" \
  run --pin-cap lots true
expect 2 'pinshim run: --policy "drop": unknown policy; accepted: deny, fallback, evict' \
  run --policy drop true
expect 2 'pinshim run: --sample-ms "0": out of range; accepted: an integer from 1 to 60000 (milliseconds)' \
  run --sample-ms 0 true
expect 2 'pinshim run: --ledger-shared "2": not 0 or 1; accepted: 0 or 1' \
  run --ledger-shared=2 true
expect 2 'pinshim run: unknown option "--budjet"; see pinshim run --help' \
  run --budjet 1G true
expect 2 'pinshim run: unknown option "-x"; see pinshim run --help' run -x true
expect 2 'pinshim run: --budget needs a value (SIZE); see pinshim run --help' \
  run --budget
expect 2 'pinshim run: missing command; usage: pinshim run [OPTIONS] [--] CMD [ARGS...]' \
  run --mode optimize
expect 2 'pinshim run: missing command; usage: pinshim run [OPTIONS] [--] CMD [ARGS...]' \
  run --mode optimize --

# Config files: missing, malformed (file and line named), inherited variables.
expect 2 "pinshim run: ${TMP}/absent.conf: cannot open config file: no such file or directory" \
  run --config absent.conf -- true
printf 'mode = optimize\nbudget 4G\n' >bad.conf
expect 2 "pinshim run: ${TMP}/bad.conf:2: expected \"key = value\", got \"budget 4G\"" \
  run --config bad.conf -- true
printf 'mode = optimize\nbudget = 4X\n' >badvalue.conf
expect_prefix 2 "pinshim run: ${TMP}/badvalue.conf:2: budget = \"4X\": unknown unit \"X\"; accepted:" \
  run --config badvalue.conf -- true
# An option overrides the bad file value, but the file is still malformed.
expect_prefix 2 "pinshim run: ${TMP}/badvalue.conf:2: budget = \"4X\"" \
  run --config badvalue.conf --budget 1G -- true
PINSHIM_POLICY=maybe expect 2 'pinshim run: PINSHIM_POLICY="maybe": unknown policy; accepted: deny, fallback, evict' \
  run -- true
# An option replaces a bad inherited variable.
PINSHIM_POLICY=maybe run_pinshim run --policy evict -- true
[[ "${STATUS}" == 0 ]] || fail "--policy over a bad PINSHIM_POLICY: ${STATUS} ${ERR}"

# Settings that do nothing in the chosen mode: one line per kind, naming
# each as it was given; the command runs anyway.
expect 0 "pinshim run: --budget and --policy have no effect without enforce mode (--mode enforce); ignored" \
  run --budget 1G --policy fallback -- true
expect 0 "" run --mode enforce --budget 1G --policy fallback -- true
PINSHIM_PIN_CAP=1G expect 0 "pinshim run: PINSHIM_PIN_CAP and --self-check have no effect without optimize mode (--mode optimize); ignored" \
  run --self-check=0 -- true
expect 0 "pinshim run: --ledger-shared has no effect without a node budget (--node-budget) in enforce mode; ignored
pinshim run: --sample-ms and --copy-guard have no effect without a trace (--trace-dir); ignored" \
  run --sample-ms 5 --copy-guard --ledger-shared -- true
expect 0 "" run --trace-dir "${TMP}/guarded" --copy-guard -- true

# Trace directories that cannot be created or written.
touch plainfile
expect 2 "pinshim run: trace directory \"${TMP}/plainfile\": exists and is not a directory" \
  run --trace-dir plainfile -- true
expect 2 "pinshim run: trace directory \"${TMP}/plainfile/sub\": cannot create directory: Not a directory" \
  run --trace-dir plainfile/sub -- true
expect_prefix 2 'pinshim run: trace directory "/proc/self": directory is not writable: ' \
  run --trace-dir /proc/self -- true
if [[ "$(id -u)" != 0 ]]; then
  mkdir readonly && chmod 555 readonly
  expect 2 "pinshim run: trace directory \"${TMP}/readonly/traces\": cannot create directory: Permission denied" \
    run --trace-dir readonly/traces -- true
fi

# A library that cannot be found.
PINSHIM_LIBRARY="${TMP}/none.so" expect_prefix 2 \
  "pinshim run: PINSHIM_LIBRARY=\"${TMP}/none.so\": No such file or directory; accepted:" \
  run -- true
mkdir -p lonely/bin && cp "${PINSHIM}" lonely/bin/pinshim
"${TMP}/lonely/bin/pinshim" run -- true 2>"${TMP}/err"
STATUS=$?
[[ "${STATUS}" == 2 && "$(cat "${TMP}/err")" == "pinshim run: cannot find libpinshim.so (looked for ${TMP}/lonely/bin/../lib/libpinshim.so,"*"; set PINSHIM_LIBRARY to the library's path" ]] ||
  fail "copied binary without library: status ${STATUS}: $(cat "${TMP}/err")"

# Profiles are read before anything runs, with the library's own parser.
expect 2 "pinshim run: ${TMP}/absent.profile: cannot open profile: no such file or directory" \
  run --mode optimize --profile absent.profile -- true
printf 'site 00+0x1\n' >noheader.profile
expect 2 "pinshim run: ${TMP}/noheader.profile:1: not a pinshim profile (line 1 must be \"# pinshim profile v1\")" \
  run --mode optimize --profile noheader.profile -- true
printf '# pinshim profile v1\n# a comment\nsite 0a1b+0x10 0a1b\n' >badframe.profile
expect_prefix 2 "pinshim run: ${TMP}/badframe.profile:3: bad frame \"0a1b\" (expected BUILDID+0xOFFSET" \
  run --mode optimize --profile badframe.profile -- true
PINSHIM_PROFILE="${TMP}/noheader.profile" expect_prefix 2 "pinshim run: ${TMP}/noheader.profile:1: not a pinshim profile" \
  run -- true

# --- what the command receives ---------------------------------------------
printf '# pinshim profile v1\nsite 0a1b+0x10\n' >p.out
LD_PRELOAD=libm.so.6 run_pinshim run --mode optimize,enforce --budget 1G \
  --node-budget 50% --policy fallback --track-threshold 1M --trace-dir rel/traces \
  --summary --metrics-file m.jsonl --profile p.out --sample-ms 20 --pin-cap 2G \
  --ledger-shared --ledger rel/ledger --config "" -- env
[[ "${STATUS}" == 0 ]] || fail "run env: status ${STATUS}: ${ERR}"
[[ -z "${ERR}" ]] || fail "run env printed: ${ERR}"
check_var() {
  local got
  got="$(env_value "$1")"
  [[ "${got}" == "$2" ]] || fail "$1=${got}, want $2"
}
check_var PINSHIM_MODE optimize,enforce
check_var PINSHIM_BUDGET 1G
check_var PINSHIM_NODE_BUDGET 50%
check_var PINSHIM_POLICY fallback
check_var PINSHIM_TRACK_THRESHOLD 1M
check_var PINSHIM_TRACE_DIR "${TMP}/rel/traces"
check_var PINSHIM_SUMMARY 1
check_var PINSHIM_METRICS_FILE "${TMP}/m.jsonl"
check_var PINSHIM_PROFILE "${TMP}/p.out"
check_var PINSHIM_SAMPLE_MS 20
check_var PINSHIM_PIN_CAP 2G
check_var PINSHIM_LEDGER_SHARED 1
check_var PINSHIM_LEDGER_PATH "${TMP}/rel/ledger"
check_var PINSHIM_CONFIG ""
[[ -d rel/traces ]] || fail "trace directory rel/traces was not created"
[[ -z "$(ls -A rel/traces)" ]] || fail "the writability probe was left behind"
preload="$(env_value LD_PRELOAD)"
library="${preload%%:*}"
[[ "${preload}" == "${library}:libm.so.6" ]] || fail "LD_PRELOAD=${preload}"
[[ "${library}" == /*/libpinshim.so && -f "${library}" ]] ||
  fail "preloaded library ${library} is not an absolute path to libpinshim.so"

# The library is really loaded into the command.
run_pinshim run cat /proc/self/maps
[[ "${STATUS}" == 0 ]] || fail "run cat: status ${STATUS}: ${ERR}"
grep -q "libpinshim.so" "${TMP}/out" || fail "libpinshim.so not mapped in the command"

# Our library already in LD_PRELOAD is not preloaded twice.
LD_PRELOAD="libm.so.6 ${library}" run_pinshim run env
[[ "$(env_value LD_PRELOAD)" == "${library}:libm.so.6" ]] ||
  fail "LD_PRELOAD with the library already in it: $(env_value LD_PRELOAD)"

# Summary to a file: relative paths anchored here; 0 stays 0.
run_pinshim run --summary=sum-%p.txt env
check_var PINSHIM_SUMMARY "${TMP}/sum-%p.txt"
run_pinshim run --summary=0 env
check_var PINSHIM_SUMMARY 0
# Only options that were given are set.
run_pinshim run env
[[ -z "$(printf '%s\n' "${OUT}" | grep '^PINSHIM_MODE=')" ]] ||
  fail "PINSHIM_MODE set without --mode"

# PINSHIM_LIBRARY names the library explicitly.
cp "${library}" "${TMP}/copy.so"
PINSHIM_LIBRARY=copy.so run_pinshim run env
[[ "$(env_value LD_PRELOAD)" == "${TMP}/copy.so" ]] ||
  fail "PINSHIM_LIBRARY=copy.so gave LD_PRELOAD=$(env_value LD_PRELOAD)"

# Arguments after the command are the command's, options included.
run_pinshim run echo --mode fast -- x
[[ "${STATUS}" == 0 && "${OUT}" == "--mode fast -- x" ]] ||
  fail "run echo --mode fast: status ${STATUS}, output '${OUT}'"
# A command starting with '-' needs '--'.
expect 2 'pinshim run: unknown option "-weird"; see pinshim run --help' run -weird

# --- exit statuses ---------------------------------------------------------
run_pinshim run -- sh -c 'exit 7'
[[ "${STATUS}" == 7 ]] || fail "exit 7 came back as ${STATUS}"
run_pinshim run sh -c 'exit 0'
[[ "${STATUS}" == 0 ]] || fail "exit 0 came back as ${STATUS}"
# (bash would report the signal on its own stderr; that is not pinshim's.)
{ run_pinshim run -- sh -c 'kill -TERM $$'; } 2>/dev/null
[[ "${STATUS}" == 143 ]] || fail "SIGTERM came back as ${STATUS}"

expect 127 'pinshim run: no-such-command-pinshim-test: command not found' \
  run -- no-such-command-pinshim-test arg
expect 127 'pinshim run: ./no-such-file: no such file or directory' \
  run -- ./no-such-file
printf '#!/bin/sh\nexit 0\n' >notexec.sh
chmod 644 notexec.sh
expect 126 'pinshim run: ./notexec.sh: permission denied (not executable)' \
  run -- ./notexec.sh
mkdir -p adir
expect 126 'pinshim run: ./adir: is a directory' run -- ./adir

if [[ "${failures}" != 0 ]]; then
  echo "${failures} check(s) failed" >&2
  exit 1
fi
echo "all checks passed"
