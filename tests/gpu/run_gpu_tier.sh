#!/usr/bin/env bash
# The GPU tier in one command.
#
#   bash tests/gpu/run_gpu_tier.sh LIBDIR     LIBDIR holds libpinshim.so and the
#                                             pinshim tool (and optionally
#                                             cpu_tests.txt)
#   bash tests/gpu/run_gpu_tier.sh --selftest checks this script's parsing,
#                                             comparison and orchestration with
#                                             canned summaries; needs no GPU
#   bash tests/gpu/run_gpu_tier.sh --programs LIBDIR NAME=PROGRAM...
#                                             the same three runs and checks of
#                                             programs built elsewhere, on
#                                             whatever driver the loader finds
#                                             (tests/runtime: the simulated one)
#
# For each program (copy_program.cu with the static and the shared CUDA
# runtime, driver_program.cc through cuGetProcAddress and linked to libcuda,
# torch_program.py) it runs the program without pinshim, under
# `pinshim run --summary=FILE --` and under plain LD_PRELOAD with
# PINSHIM_SUMMARY, and checks that
#   (a) standard output is identical with and without the library,
#   (b) the summary's counts equal the program's own "expect:" line,
#   (c) the exit code is identical.
# It traces a NumPy <-> CuPy program (cupy_roundtrip.py) under --trace-dir
# in observe and in optimize mode and checks that a complete trace exists
# and `pinshim report` reports it (then archives it and prints the archive's
# size), and it builds the corpus of correct programs (tests/trace/corpus)
# with nvcc and checks that pinshim reports no copy-race or free-in-flight
# warning or error for any of them.
# Then it runs every command listed in LIBDIR/cpu_tests.txt (one a line, run
# from LIBDIR; blank lines and # comments ignored); a line "NOT RUN NAME:
# WHY" in a command's output becomes a row of its own, SKIP, with the reason
# (the two-GPU rule check on a one-GPU machine). It prints a table and
# "N passed, N failed", writes at most five logs under $OUT when $OUT is set,
# and exits non-zero on any failure.
#
# Environment: GPU_TIER_TIMEOUT (seconds per program run, default 120),
# GPU_TIER_ONLY (space-separated program names to run, default all),
# NVCC (default: nvcc on PATH, else /usr/local/cuda/bin/nvcc),
# NVCC_ARCH (default: -gencode arch=compute_90,code=[sm_90,compute_90]),
# GPU_TIER_PYTHON (default python3).
set -u -o pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
TIMEOUT="${GPU_TIER_TIMEOUT:-120}"
PYTHON="${GPU_TIER_PYTHON:-python3}"

PASSED=0
FAILED=0
SKIPPED=0
ROWS=()

# ---- summary parsing and comparison ----------------------------------------

# derive_counts FILE...: reads pinshim summaries and prints one key=value per
# line in the vocabulary of the programs' expect lines, plus "error=..." lines
# for anything malformed or inconsistent.
derive_counts() {
  awk '
    function hexval(s,   i, n, c) {
      s = tolower(s); sub(/^0x/, "", s); n = 0
      for (i = 1; i <= length(s); i++) {
        c = index("0123456789abcdef", substr(s, i, 1))
        if (c == 0) return -1
        n = n * 16 + c - 1
      }
      return n
    }
    function fields(   i, eq) {
      split("", kv)
      for (i = 3; i <= NF; i++) {
        eq = index($i, "=")
        if (eq > 1) kv[substr($i, 1, eq - 1)] = substr($i, eq + 1)
      }
    }
    function need(names,   n, a, i) {
      n = split(names, a, " ")
      for (i = 1; i <= n; i++) {
        if (!(a[i] in kv)) { err("record without " a[i] ": " $0); return 0 }
        if (a[i] ~ /^(calls|bytes|failed)$/ && kv[a[i]] !~ /^[0-9]+$/) {
          err("bad number in " a[i] ": " $0); return 0
        }
      }
      if (kv["failed"] + 0 > kv["calls"] + 0) { err("failed > calls: " $0); return 0 }
      if (kv["api"] !~ /^cu[A-Z][A-Za-z0-9_]*$/) { err("api is not a driver ABI symbol: " $0); return 0 }
      return 1
    }
    function err(msg) { errors[++nerr] = msg }
    BEGIN {
      split("copies h2d d2h h2h d2d copy_bytes h2d_bytes d2h_bytes failed_copies " \
            "pin_allocs pin_frees registers unregisters failed_pins " \
            "pinned_acquired pinned_released pin_alloc_bytes register_bytes " \
            "host_pageable host_pinned host_registered host_pinshim host_managed " \
            "host_vmm-host host_host-pool " \
            "host_program_pinned host_wc summaries copy_calls pin_calls", keys, " ")
      for (i in keys) v[keys[i]] = 0
    }
    $1 != "pinshim:" { next }
    $2 == "summary" {
      fields(); v["summaries"]++
      if (!("pid" in kv) || !("program" in kv) || !("mode" in kv)) err("bad summary line: " $0)
      else if (kv["mode"] !~ /^observe(,optimize)?(,enforce)?$/) err("unexpected mode: " $0)
      next
    }
    $2 == "copy" {
      fields()
      if (!need("api dir src dst flags calls bytes failed")) next
      ok = kv["calls"] - kv["failed"]
      d = kv["dir"]
      if (d == "H2D") { v["h2d"] += ok; v["h2d_bytes"] += kv["bytes"]; host = kv["src"] }
      else if (d == "D2H") { v["d2h"] += ok; v["d2h_bytes"] += kv["bytes"]; host = kv["dst"] }
      else if (d == "H2H") { v["h2h"] += ok; host = "" }
      else if (d == "D2D") { v["d2d"] += ok; host = "" }
      else { err("unknown dir: " $0); next }
      if (kv["src"] !~ /^(pageable|pinned|registered|pinshim|managed|device|vmm-host|host-pool)$/ ||
          kv["dst"] !~ /^(pageable|pinned|registered|pinshim|managed|device|vmm-host|host-pool)$/) {
        err("unknown kind: " $0); next
      }
      fl = hexval(kv["flags"])
      if (kv["flags"] !~ /^0x[0-9a-fA-F]+$/ || fl < 0) { err("bad flags: " $0); next }
      if (host != "") {
        v["host_" host] += ok
        if (host == "pinned" || host == "registered") v["host_program_pinned"] += ok
        # CU_MEMHOSTALLOC_WRITECOMBINED; for registrations bit 2 means I/O memory.
        if (host == "pinned" && int(fl / 4) % 2 == 1) v["host_wc"] += ok
      }
      v["copies"] += ok
      v["copy_calls"] += kv["calls"]
      v["copy_bytes"] += kv["bytes"]
      v["failed_copies"] += kv["failed"]
      next
    }
    $2 == "pin" {
      fields()
      if (!need("api op flags calls bytes failed")) next
      ok = kv["calls"] - kv["failed"]
      o = kv["op"]
      if (o == "alloc") { v["pin_allocs"] += ok; v["pinned_acquired"] += ok; v["pin_alloc_bytes"] += kv["bytes"] }
      else if (o == "free") { v["pin_frees"] += ok; v["pinned_released"] += ok }
      else if (o == "register") { v["registers"] += ok; v["pinned_acquired"] += ok; v["register_bytes"] += kv["bytes"] }
      else if (o == "unregister") { v["unregisters"] += ok; v["pinned_released"] += ok }
      else { err("unknown op: " $0); next }
      v["pin_calls"] += kv["calls"]
      v["failed_pins"] += kv["failed"]
      next
    }
    $2 == "totals" {
      fields()
      if (!("copies" in kv) || !("copy_bytes" in kv) || !("pin_calls" in kv)) { err("bad totals line: " $0); next }
      ntot++
      t_copies += kv["copies"]; t_bytes += kv["copy_bytes"]; t_pins += kv["pin_calls"]
      next
    }
    # Other records ("note", ...) are informative; they do not change counts.
    { next }
    END {
      if (v["summaries"] == 0) err("no summary line found")
      if (ntot != v["summaries"]) err("summary lines: " v["summaries"] ", totals lines: " ntot)
      # totals copies: all calls, or successful calls; either reading is accepted.
      if (t_copies != v["copy_calls"] && t_copies != v["copies"])
        err("totals copies=" t_copies " but copy lines hold " v["copy_calls"] " calls")
      if (t_bytes != v["copy_bytes"])
        err("totals copy_bytes=" t_bytes " but copy lines hold " v["copy_bytes"])
      if (t_pins != v["pin_calls"])
        err("totals pin_calls=" t_pins " but pin lines hold " v["pin_calls"])
      for (i = 1; i in keys; i++) printf "%s=%.0f\n", keys[i], v[keys[i]]
      for (i = 1; i <= nerr; i++) print "error=" errors[i]
    }
  ' "$@"
}

# compare_expect "EXPECT_LINE" DERIVED_FILE: prints a one-line digest
# ("h2d 40/40 d2h 40/40 pin 21/21") then one line per problem; returns 1 if
# any key differs, is unknown, or the summary had errors.
compare_expect() {
  local expect_line="$1" derived="$2"
  awk -v line="$expect_line" '
    { eq = index($0, "="); k = substr($0, 1, eq - 1); val = substr($0, eq + 1)
      if (k == "error") { problems[++np] = "summary: " val } else seen[k] = val }
    function show(k) { if (k in lo) digest = digest sprintf("%s %s/%s ", k, want[k], seen[k]) }
    END {
      n = split(line, parts, " ")
      for (i = 1; i <= n; i++) {
        if (parts[i] == "expect:") continue
        eq = index(parts[i], "=")
        if (eq < 2) { problems[++np] = "malformed expect field: " parts[i]; continue }
        k = substr(parts[i], 1, eq - 1); w = substr(parts[i], eq + 1)
        if (w ~ /^[0-9]+$/) { lo[k] = w + 0; hi[k] = w + 0 }
        else if (w ~ /^[0-9]+\.\.[0-9]+$/) { split(w, r, /\.\./); lo[k] = r[1] + 0; hi[k] = r[2] + 0 }
        else { problems[++np] = "malformed expect value: " parts[i]; continue }
        want[k] = w; nwant++
        if (!(k in seen)) { problems[++np] = "unknown expect key: " k; continue }
        s = seen[k] + 0
        if (s < lo[k] || s > hi[k]) problems[++np] = sprintf("%s expected %s seen %s", k, w, seen[k])
      }
      if (nwant == 0) problems[++np] = "empty expect line"
      digest = ""
      show("copies"); show("h2d"); show("d2h"); show("d2d")
      pe = 0; ps = 0; have = 0
      split("pin_allocs pin_frees registers unregisters", pk, " ")
      for (j = 1; j <= 4; j++) if (pk[j] in lo) { pe += lo[pk[j]]; ps += seen[pk[j]]; have = 1 }
      if (have) digest = digest sprintf("pin %d/%d ", pe, ps)
      else if ("pinned_acquired" in lo) show("pinned_acquired")
      sub(/ +$/, "", digest)
      print (digest == "" ? "-" : digest)
      for (i = 1; i <= np; i++) print problems[i]
      exit (np > 0)
    }
  ' "$derived"
}

# ---- bookkeeping -----------------------------------------------------------

LOGDIR=""
log_runs() { printf '%s\n' "$@" >> "$LOGDIR/runs.log"; }

record() {  # program mode result detail
  ROWS+=("$1|$2|$3|$4")
  case "$3" in
    PASS) PASSED=$((PASSED + 1)) ;;
    SKIP) SKIPPED=$((SKIPPED + 1)) ;;
    *) FAILED=$((FAILED + 1)) ;;
  esac
}

print_table() {
  local row
  {
    printf '%-16s %-8s %-6s %s\n' program mode result "counts expected/seen, or why"
    printf '%-16s %-8s %-6s %s\n' ---------------- -------- ------ ------------------------------
    for row in "${ROWS[@]}"; do
      IFS='|' read -r p m r d <<< "$row"
      printf '%-16s %-8s %-6s %s\n' "$p" "$m" "$r" "$d"
    done
    printf '%d passed, %d failed' "$PASSED" "$FAILED"
    [ "$SKIPPED" -gt 0 ] && printf ', %d skipped' "$SKIPPED"
    printf '\n'
  } | tee "$LOGDIR/table.txt"
}

# ---- running one program -----------------------------------------------------

# run_program NAME CMD...: the three runs and their checks.
run_program() {
  local name="$1"; shift
  local dir="$WORK/run/$name"
  mkdir -p "$dir/sum-run" "$dir/sum-preload"
  log_runs "" "==== $name: $*"

  timeout -k 10 "$TIMEOUT" "$@" > "$dir/base.out" 2> "$dir/base.err"
  local base_rc=$?
  log_runs "-- without pinshim: rc=$base_rc" "-- stdout:" "$(cat "$dir/base.out")" \
           "-- stderr (tail):" "$(tail -n 20 "$dir/base.err")"
  local expect_line
  expect_line="$(grep '^expect:' "$dir/base.out" | tail -n 1)"
  if [ "$base_rc" -eq 124 ] || [ "$base_rc" -eq 137 ]; then
    record "$name" without FAIL "timed out after ${TIMEOUT}s"
  elif [ "$base_rc" -ne 0 ]; then
    record "$name" without FAIL "exit code $base_rc: $(grep -m1 FATAL "$dir/base.out" || tail -n 1 "$dir/base.err")"
  elif [ -z "$expect_line" ]; then
    record "$name" without FAIL "no expect: line"
  else
    record "$name" without PASS "$(echo "$expect_line" | wc -w | awk '{print $1 - 1}') counts claimed"
  fi

  local mode
  for mode in run preload; do
    if [ "$mode" = run ]; then
      # PINSHIM_LIBRARY: the tool looks for the library in PREFIX/lib or a
      # Bazel tree, not beside itself as LIBDIR has it.
      timeout -k 10 "$TIMEOUT" env PINSHIM_LIBRARY="$LIBDIR/libpinshim.so" \
        "$LIBDIR/pinshim" run --summary="$dir/sum-run/summary.%p.txt" -- "$@" \
        > "$dir/$mode.out" 2> "$dir/$mode.err"
    else
      timeout -k 10 "$TIMEOUT" env LD_PRELOAD="$LIBDIR/libpinshim.so" \
        PINSHIM_SUMMARY="$dir/sum-preload/summary.%p.txt" "$@" \
        > "$dir/$mode.out" 2> "$dir/$mode.err"
    fi
    local rc=$?
    check_run "$name" "$mode" "$dir" "$base_rc" "$rc" "$expect_line"
  done
}

# check_run NAME MODE DIR BASE_RC RC EXPECT_LINE
check_run() {
  local name="$1" mode="$2" dir="$3" base_rc="$4" rc="$5" expect_line="$6"
  local problems=() digest="-"
  log_runs "-- $mode: rc=$rc"
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    problems+=("timed out after ${TIMEOUT}s")
  elif [ "$rc" -ne "$base_rc" ]; then
    problems+=("exit code $rc, without: $base_rc")
  fi
  if ! cmp -s "$dir/base.out" "$dir/$mode.out"; then
    problems+=("output differs")
    log_runs "-- $mode: output differs from the run without pinshim:" \
             "$(diff "$dir/base.out" "$dir/$mode.out" | head -n 40)"
  fi
  local sums=() f
  for f in "$dir/sum-$mode"/summary.*.txt; do [ -e "$f" ] && sums+=("$f"); done
  {
    echo "==== $name $mode: ${#sums[@]} summary file(s)"
    for f in "${sums[@]}"; do echo "-- $(basename "$f")"; cat "$f"; done
  } >> "$LOGDIR/summaries.log"
  if [ "${#sums[@]}" -eq 0 ]; then
    problems+=("no summary file written")
  elif [ -z "$expect_line" ]; then
    problems+=("nothing to compare: no expect line without pinshim")
  else
    derive_counts "${sums[@]}" > "$dir/$mode.derived"
    local cmp_out
    cmp_out="$(compare_expect "$expect_line" "$dir/$mode.derived")"
    local cmp_rc=$?
    digest="$(echo "$cmp_out" | head -n 1)"
    if [ "$cmp_rc" -ne 0 ]; then
      problems+=("$(echo "$cmp_out" | sed -n 2p)")
      log_runs "-- $mode: counts differ:" "$(echo "$cmp_out" | tail -n +2)" \
               "-- derived from the summary:" "$(cat "$dir/$mode.derived")"
    fi
  fi
  log_runs "-- $mode stderr (tail):" "$(tail -n 20 "$dir/$mode.err")"
  if [ "${#problems[@]}" -eq 0 ]; then
    record "$name" "$mode" PASS "$digest"
  else
    local why
    why="$(printf '%s; ' "${problems[@]}")"
    record "$name" "$mode" FAIL "${why%; } [$digest]"
  fi
}

wanted() {  # NAME: true if GPU_TIER_ONLY is unset or names it
  [ -z "${GPU_TIER_ONLY:-}" ] && return 0
  case " $GPU_TIER_ONLY " in *" $1 "*) return 0 ;; esac
  return 1
}

# ---- building ----------------------------------------------------------------

find_nvcc() {
  if [ -n "${NVCC:-}" ]; then echo "$NVCC"; return; fi
  if command -v nvcc > /dev/null 2>&1; then command -v nvcc; return; fi
  echo /usr/local/cuda/bin/nvcc
}

# build NAME CMD...: compiles, logs, records a failure if the compiler fails.
build() {
  local name="$1"; shift
  echo "+ $*" >> "$LOGDIR/setup.log"
  if ! "$@" >> "$LOGDIR/setup.log" 2>&1; then
    record "$name" build FAIL "compiler failed (setup.log)"
    return 1
  fi
}

build_programs() {
  local nvcc cuda_home arch
  nvcc="$(find_nvcc)"
  cuda_home="$(cd "$(dirname "$nvcc")/.." && pwd)"
  # shellcheck disable=SC2206
  arch=(${NVCC_ARCH:--gencode arch=compute_90,code=[sm_90,compute_90]})
  local b="$WORK/bin"
  mkdir -p "$b"
  {
    echo "== nvcc: $nvcc"
    "$nvcc" --version 2>&1 | tail -n 2
  } >> "$LOGDIR/setup.log"
  local common=(-std=c++17 -O2 -I"$HERE")
  if wanted copy_static; then
    build copy_static "$nvcc" "${common[@]}" "${arch[@]}" \
      -o "$b/copy_static" "$HERE/copy_program.cu"
  fi
  if wanted copy_shared; then
    build copy_shared "$nvcc" "${common[@]}" "${arch[@]}" -cudart shared \
      -Xlinker -rpath -Xlinker "$cuda_home/lib64" \
      -o "$b/copy_shared" "$HERE/copy_program.cu"
  fi
  if wanted driver_dlopen; then
    build driver_dlopen "$nvcc" "${common[@]}" \
      -o "$b/driver_dlopen" "$HERE/driver_program.cc" -ldl
  fi
  if wanted driver_linked; then
    # Linked against the toolkit's stub (else the driver's own libcuda.so);
    # at run time libcuda.so.1 is whatever driver the loader finds.
    build driver_linked "$nvcc" "${common[@]}" -DDRIVER_PROGRAM_LINKED \
      -o "$b/driver_linked" "$HERE/driver_program.cc" \
      -L"$cuda_home/lib64/stubs" -L"$cuda_home/targets/x86_64-linux/lib/stubs" \
      -L/usr/lib/x86_64-linux-gnu -Xlinker --no-as-needed -lcuda
  fi
  if wanted vmm_host || wanted vmm_import || wanted host_pool || wanted vmm_edges ||
    wanted pool_edges; then
    # The CI program of VMM host and host-pool memory, on the real driver.
    build vmm_program "$nvcc" "${common[@]}" \
      -o "$b/vmm_program" "$HERE/../interception/vmm_program.cc" \
      -L"$cuda_home/lib64/stubs" -L"$cuda_home/targets/x86_64-linux/lib/stubs" \
      -L/usr/lib/x86_64-linux-gnu -Xlinker --no-as-needed -lcuda
  fi
}

# ---- checks before anything runs --------------------------------------------------

check_libdir() {
  local ok=1 f
  {
    echo "== LIBDIR: $LIBDIR"
    ls -la "$LIBDIR"
  } >> "$LOGDIR/setup.log" 2>&1
  for f in libpinshim.so pinshim; do
    if [ ! -e "$LIBDIR/$f" ]; then
      record "$f" ldd FAIL "missing from $LIBDIR"
      ok=0
      continue
    fi
    echo "== ldd $LIBDIR/$f"
    ldd "$LIBDIR/$f" 2>&1 | tee -a "$LOGDIR/setup.log"
    if ldd "$LIBDIR/$f" 2>&1 | grep -q 'not found'; then
      record "$f" ldd FAIL "unresolved libraries (see ldd above)"
      ok=0
    else
      record "$f" ldd PASS "-"
    fi
  done
  [ "$ok" -eq 1 ]
}

run_cpu_tests() {
  local list="$LIBDIR/cpu_tests.txt" line n=0
  [ -f "$list" ] || { echo "no $list: no CPU tests listed" >> "$LOGDIR/cpu_tests.log"; return; }
  while IFS= read -r line || [ -n "$line" ]; do
    case "$line" in ''|'#'*) continue ;; esac
    n=$((n + 1))
    local name
    name="$(basename "${line%% *}")"
    echo "==== $line" >> "$LOGDIR/cpu_tests.log"
    (cd "$LIBDIR" && PINSHIM_LIBDIR="$LIBDIR" timeout -k 10 "$TIMEOUT" bash -c "$line") \
      >> "$LOGDIR/cpu_tests.log" 2>&1 < /dev/null
    local rc=$?
    echo "-- rc=$rc" >> "$LOGDIR/cpu_tests.log"
    # Checks a command could not run here, named by the command itself.
    local marker="==== $line"
    awk -v m="$marker" '$0 == m { seen = NR } END { print seen + 0 }' "$LOGDIR/cpu_tests.log" \
      > "$WORK/cpu_start"
    tail -n +"$(cat "$WORK/cpu_start")" "$LOGDIR/cpu_tests.log" | grep '^NOT RUN ' |
      while IFS= read -r nr; do
        local what="${nr#NOT RUN }"
        echo "${what%%:*}|${what#*: }" >> "$WORK/not_run"
      done
    if [ -f "$WORK/not_run" ]; then
      local entry
      while IFS= read -r entry; do
        record "${entry%%|*}" cpu SKIP "not run: ${entry#*|}"
      done < "$WORK/not_run"
      rm -f "$WORK/not_run"
    fi
    if [ "$rc" -eq 0 ]; then
      record "$name" cpu PASS "-"
    elif [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
      record "$name" cpu FAIL "timed out after ${TIMEOUT}s"
    else
      record "$name" cpu FAIL "exit code $rc (cpu_tests.log)"
    fi
  done < "$list"
  echo "$n CPU test(s) listed in $list"
}

# ---- traces of CuPy programs, and the corpus of correct programs ------------------

# cupy_traces: the NumPy <-> CuPy program traced in observe and optimize
# mode: a complete trace that `pinshim report` reads (CuPy's import spawns
# children through vfork before CUDA is touched, which once cost the whole
# trace); then `pinshim archive` on it, whose size is printed.
cupy_traces() {
  local mode dir
  for mode in observe optimize; do
    dir="$WORK/cupy-trace-$mode"
    rm -rf "$dir" && mkdir -p "$dir"
    log_runs "" "==== cupy_trace $mode"
    timeout -k 10 "$TIMEOUT" env PINSHIM_LIBRARY="$LIBDIR/libpinshim.so" \
      "$LIBDIR/pinshim" run --mode "$mode" --trace-dir "$dir" --summary="$dir/summary.%p.txt" \
      -- "$PYTHON" "$HERE/cupy_roundtrip.py" > "$dir/out" 2> "$dir/err"
    local rc=$?
    log_runs "-- rc=$rc" "$(cat "$dir/out")" "$(tail -n 20 "$dir/err")"
    if [ "$rc" -ne 0 ]; then
      record cupy_trace "$mode" FAIL "the program failed (rc $rc; runs.log)"
      continue
    fi
    local n
    n="$(ls "$dir"/*.pstrace 2> /dev/null | wc -l)"
    "$LIBDIR/pinshim" report --format json "$dir" > "$dir/report.json" 2> "$dir/report.err"
    local verdict
    verdict="$("$PYTHON" - "$dir/report.json" "$(awk '/^copies/ {print $2}' "$dir/out")" <<'PY'
import json, sys
try:
    data = json.load(open(sys.argv[1]))
except Exception as e:
    print("FAIL unreadable report: %s" % e); sys.exit()
want = int(sys.argv[2] or 0)
procs = [p for p in data["processes"] if p["copies"] > 0]
if not procs:
    print("FAIL no traced process with copies"); sys.exit()
p = max(procs, key=lambda p: p["copies"])
bad = [f for f in data["findings"] if f["rule"] in ("copy-race", "free-in-flight")
       and f["severity"] != "info"]
if not p["trace_complete"]:
    print("FAIL trace incomplete")
elif p["copies"] < want:
    print("FAIL %d copies traced, the program made %d" % (p["copies"], want))
elif bad:
    print("FAIL %s" % "; ".join("%s %s" % (f["rule"], f["explanation"][:120]) for f in bad))
else:
    print("PASS %d copies traced (program: %d), %d findings" % (p["copies"], want,
                                                                len(data["findings"])))
PY
)"
    if [ "$n" -eq 0 ]; then
      record cupy_trace "$mode" FAIL "no trace file written (summary: $(ls "$dir"/summary.* 2> /dev/null | wc -l))"
    elif [ "${verdict%% *}" = PASS ]; then
      local archived
      archived="$("$LIBDIR/pinshim" archive "$dir" 2>&1 | tail -n 1)"
      record cupy_trace "$mode" PASS "$n trace(s), ${verdict#PASS }; ${archived##*; }"
      log_runs "-- archive: $archived"
    else
      record cupy_trace "$mode" FAIL "${verdict#FAIL }"
    fi
  done
}

# corpus: the correct programs of tests/trace/corpus built with nvcc against
# the real driver, each run with and without the copy guard under a trace.
corpus() {
  local src="$HERE/../trace/corpus" out="$WORK/corpus" nvcc f
  nvcc="$(find_nvcc)"
  mkdir -p "$out"
  local built=0
  for f in "$src"/*.cc; do
    local n
    n="$(basename "$f" .cc)"
    if build "corpus/$n" "$nvcc" -std=c++17 -O2 -g -I"$HERE/../.." -o "$out/$n" "$f" \
         -L"$(cd "$(dirname "$nvcc")/.." && pwd)/lib64/stubs" -lcuda -lpthread; then
      built=$((built + 1))
    fi
  done
  log_runs "" "==== corpus ($built programs)"
  local misuse="$LIBDIR/rules/tests/trace/programs/copy_race_driver"
  timeout -k 10 $((TIMEOUT * 4)) env CORPUS_BIN_DIR="$out" PRELOAD="$LIBDIR/libpinshim.so" \
    REPORT="$LIBDIR/pinshim report" MISUSE_PROGRAM="$misuse" \
    "$PYTHON" "$src/corpus_test.py" > "$WORK/corpus.log" 2>&1
  local rc=$?
  log_runs "$(cat "$WORK/corpus.log")"
  if [ "$rc" -eq 0 ]; then
    record corpus "$built progs" PASS "no copy-race/free-in-flight warning or error, with and without the copy guard"
  else
    record corpus "$built progs" FAIL "$(grep -m1 -E ' \((trace|guard)\)|Error' "$WORK/corpus.log" | cut -c1-150) (runs.log)"
  fi
}

# start LIBDIR: the library folder, the work folder and the logs.
start() {
  LIBDIR="$(cd "$1" && pwd)" || { echo "usage: $0 LIBDIR | --selftest" >&2; exit 2; }
  WORK="$(mktemp -d "${TMPDIR:-/tmp}/pinshim-gpu-tier.XXXXXX")"
  LOGDIR="${OUT:-$WORK/logs}"
  mkdir -p "$LOGDIR"
  : > "$LOGDIR/setup.log"; : > "$LOGDIR/runs.log"; : > "$LOGDIR/summaries.log"
  : > "$LOGDIR/cpu_tests.log"
  echo "pinshim GPU tier: LIBDIR=$LIBDIR work=$WORK logs=$LOGDIR timeout=${TIMEOUT}s"
}

# programs LIBDIR NAME=PROGRAM...: run_program for each, then the table.
programs() {
  start "$1"
  shift
  local spec
  if check_libdir; then
    for spec in "$@"; do run_program "${spec%%=*}" "${spec#*=}"; done
  fi
  echo
  print_table
  [ "$FAILED" -eq 0 ]
}

main() {
  start "$1"
  {
    echo "== host: $(uname -a)"
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1 || true
  } >> "$LOGDIR/setup.log"

  if check_libdir; then
    build_programs
    local b="$WORK/bin" p
    for p in copy_static copy_shared driver_dlopen driver_linked; do
      wanted "$p" && [ -x "$b/$p" ] && run_program "$p" "$b/$p"
    done
    for p in vmm_host=vmm vmm_import=import host_pool=pool vmm_edges=edges-vmm \
      pool_edges=edges-pool; do
      wanted "${p%%=*}" && [ -x "$b/vmm_program" ] && run_program "${p%%=*}" "$b/vmm_program" "${p#*=}"
    done
    if wanted torch; then
      if "$PYTHON" -c 'import torch' > /dev/null 2>&1; then
        run_program torch "$PYTHON" "$HERE/torch_program.py"
      else
        record torch - SKIP "$PYTHON cannot import torch"
      fi
    fi
    if wanted cupy_trace; then
      if "$PYTHON" -c 'import cupy' > /dev/null 2>&1; then
        cupy_traces
      else
        record cupy_trace - SKIP "$PYTHON cannot import cupy"
      fi
    fi
    wanted corpus && corpus
  fi
  run_cpu_tests
  echo
  print_table
  echo "logs: $LOGDIR (setup.log runs.log summaries.log cpu_tests.log table.txt)"
  [ "$FAILED" -eq 0 ]
}

# ---- self test -----------------------------------------------------------------------

selftest() {
  local t
  t="$(mktemp -d "${TMPDIR:-/tmp}/pinshim-gpu-tier-selftest.XXXXXX")"
  local fails=0
  check() {  # description expected_rc actual_rc
    if [ "$2" -eq "$3" ]; then echo "ok   $1"; else echo "FAIL $1 (rc $3, wanted $2)"; fails=$((fails + 1)); fi
  }
  cat > "$t/a.txt" <<'EOF'
pinshim: summary pid=100 program=copy_static mode=observe
pinshim: copy api=cuMemcpyHtoD_v2 dir=H2D src=pageable dst=device flags=0x0 calls=3 bytes=12288 failed=1
pinshim: copy api=cuMemcpyHtoDAsync_v2 dir=H2D src=pinned dst=device flags=0x6 calls=2 bytes=8192 failed=0
pinshim: copy api=cuMemcpyDtoHAsync_v2 dir=D2H src=device dst=registered flags=0x0 calls=1 bytes=4096 failed=0
pinshim: copy api=cuMemcpyDtoD_v2 dir=D2D src=device dst=device flags=0x0 calls=1 bytes=100 failed=0
pinshim: pin api=cuMemHostAlloc op=alloc flags=0x4 calls=2 bytes=8192 failed=0
pinshim: pin api=cuMemFreeHost op=free flags=0x0 calls=3 bytes=8192 failed=1
pinshim: pin api=cuMemHostRegister_v2 op=register flags=0x0 calls=2 bytes=8192 failed=1
pinshim: pin api=cuMemHostUnregister op=unregister flags=0x0 calls=1 bytes=4096 failed=0
pinshim: note uncounted_keys=0 rtld_deepbind_loads=1 unknown_abi_lookups=0
pinshim: totals copies=7 copy_bytes=24676 pin_calls=8
EOF
  # A second process (a child, say) that did nothing.
  printf '%s\n' 'pinshim: summary pid=101 program=sh mode=observe' \
    'pinshim: totals copies=0 copy_bytes=0 pin_calls=0' > "$t/b.txt"
  derive_counts "$t/a.txt" "$t/b.txt" > "$t/d"
  local good="expect: copies=6 h2d=4 d2h=1 d2d=1 h2h=0 copy_bytes=20580..24676 failed_copies=0..1"
  good+=" pin_allocs=2 pin_frees=2 registers=1 unregisters=1 failed_pins=2 pin_alloc_bytes=8192"
  good+=" register_bytes=4096..8192 host_pageable=2 host_pinned=2 host_registered=1 host_wc=2"
  good+=" pinned_acquired=3 pinned_released=3 host_program_pinned=3 summaries=2"
  compare_expect "$good" "$t/d" > "$t/o"; check "matching counts pass" 0 $?
  grep -q '^copies 6/6 h2d 4/4 d2h 1/1 d2d 1/1 pin 6/6' "$t/o"; check "digest shows expected/seen" 0 $?
  compare_expect "${good/h2d=4/h2d=5}" "$t/d" > "$t/o"; check "one count off fails" 1 $?
  grep -q 'h2d expected 5 seen 4' "$t/o"; check "mismatch is named" 0 $?
  compare_expect "${good/failed_copies=0..1/failed_copies=2..3}" "$t/d" > /dev/null
  check "value outside a range fails" 1 $?
  compare_expect "${good/host_wc=2/host_wc=1}" "$t/d" > /dev/null
  check "write-combined copies counted from flags" 1 $?
  compare_expect "$good bogus_key=1" "$t/d" > /dev/null; check "unknown key fails" 1 $?
  compare_expect "expect:" "$t/d" > /dev/null; check "empty expect line fails" 1 $?
  compare_expect "expect: h2d=four" "$t/d" > /dev/null; check "malformed value fails" 1 $?

  sed 's/totals copies=7/totals copies=9/' "$t/a.txt" > "$t/bad1.txt"
  derive_counts "$t/bad1.txt" > "$t/d1"
  compare_expect "expect: h2d=4" "$t/d1" > "$t/o"; check "inconsistent totals fail" 1 $?
  sed 's/totals copies=7/totals copies=6/' "$t/a.txt" > "$t/ok2.txt"
  derive_counts "$t/ok2.txt" > "$t/d2"
  compare_expect "expect: h2d=4" "$t/d2" > /dev/null; check "totals as successful calls accepted" 0 $?
  sed 's/api=cuMemcpyHtoD_v2/api=cudaMemcpy/' "$t/a.txt" > "$t/bad2.txt"
  derive_counts "$t/bad2.txt" > "$t/d3"
  compare_expect "expect: d2d=1" "$t/d3" > /dev/null; check "runtime API name instead of driver symbol fails" 1 $?
  sed 's/ failed=0$//' "$t/a.txt" > "$t/bad3.txt"
  derive_counts "$t/bad3.txt" > "$t/d4"
  compare_expect "expect: d2d=1" "$t/d4" > /dev/null; check "record missing a field fails" 1 $?
  : > "$t/empty.txt"
  derive_counts "$t/empty.txt" > "$t/d5"
  compare_expect "expect: h2d=0" "$t/d5" > /dev/null; check "no summary line fails" 1 $?
  sed 's/mode=observe/mode=bogus/' "$t/a.txt" > "$t/bad4.txt"
  derive_counts "$t/bad4.txt" > "$t/d6"
  compare_expect "expect: h2d=4" "$t/d6" > /dev/null; check "unknown mode fails" 1 $?
  # The kinds of pinned host memory made without cuMemHostAlloc have keys too.
  printf '%s\n' 'pinshim: summary pid=7 program=vmm_program mode=observe' \
    'pinshim: copy api=cuMemcpyHtoD_v2 dir=H2D src=vmm-host dst=device flags=0x0 calls=2 bytes=8 failed=0' \
    'pinshim: copy api=cuMemcpyDtoH_v2 dir=D2H src=device dst=host-pool flags=0x0 calls=3 bytes=12 failed=0' \
    'pinshim: totals copies=5 copy_bytes=20 pin_calls=0' > "$t/k.txt"
  derive_counts "$t/k.txt" > "$t/d7"
  compare_expect "expect: h2d=2 d2h=3 host_vmm-host=2 host_host-pool=3" "$t/d7" > /dev/null
  check "vmm-host and host-pool copies counted by kind" 0 $?
  compare_expect "expect: host_vmm-host=3" "$t/d7" > /dev/null; check "vmm-host count off fails" 1 $?

  # End to end: a stand-in library directory and programs that print an
  # expect line and write their own "summary", as the library would.
  local lib="$t/lib"
  mkdir -p "$lib"
  cat > "$lib/pinshim" <<'EOF'
#!/usr/bin/env bash
# stand-in for `pinshim run --summary=FILE -- CMD...`
[ "$1" = run ] || exit 64
sum="${2#--summary=}"; shift 3
PINSHIM_SUMMARY="$sum" exec "$@"
EOF
  chmod +x "$lib/pinshim"
  if ! echo 'int pinshim_selftest_marker;' | cc -shared -fPIC -x c -o "$lib/libpinshim.so" - 2>/dev/null; then
    echo "skip end-to-end part: no C compiler"; rm -rf "$t"; [ "$fails" -eq 0 ]; return
  fi
  cat > "$t/prog.sh" <<'EOF'
#!/usr/bin/env bash
# $1: good | diverge | miscount | crash-with | hang
echo "checksum x fnv=1234"
if [ -n "${PINSHIM_SUMMARY:-}" ]; then
  f="${PINSHIM_SUMMARY//%p/$$}"
  n=2; [ "$1" = miscount ] && n=3
  printf '%s\n' "pinshim: summary pid=$$ program=prog.sh mode=observe" \
    "pinshim: copy api=cuMemcpyHtoD_v2 dir=H2D src=pageable dst=device flags=0x0 calls=$n bytes=8192 failed=0" \
    "pinshim: totals copies=$n copy_bytes=8192 pin_calls=0" > "$f"
  [ "$1" = diverge ] && echo "checksum y fnv=9999"
  [ "$1" = crash-with ] && exit 3
  [ "$1" = hang ] && sleep 30
fi
echo "expect: h2d=2 copy_bytes=8192"
EOF
  chmod +x "$t/prog.sh"
  cat > "$lib/cpu_tests.txt" <<'EOF'
# comment
true
false
echo 'NOT RUN two_gpu_check: needs two GPUs'
EOF
  (
    LIBDIR="$lib"; WORK="$t/work"; LOGDIR="$t/logs"; TIMEOUT=3
    mkdir -p "$WORK" "$LOGDIR"
    ROWS=(); PASSED=0; FAILED=0; SKIPPED=0
    for m in good diverge miscount crash-with hang; do run_program "$m" "$t/prog.sh" "$m"; done
    run_cpu_tests > /dev/null
    print_table > "$t/table"
  )
  cat "$t/table"
  row() { grep -E "^$1 +$2 +$3 " "$t/table" > /dev/null; }
  row good without PASS && row good run PASS && row good preload PASS; check "good program passes all modes" 0 $?
  row diverge run FAIL && grep -q 'output differs' "$t/table"; check "differing output fails" 0 $?
  row miscount preload FAIL && grep -q 'h2d expected 2 seen 3' "$t/table"; check "miscount fails" 0 $?
  row crash-with run FAIL && grep -q 'exit code 3, without: 0' "$t/table"; check "different exit code fails" 0 $?
  row hang run FAIL && grep -q 'timed out' "$t/table"; check "hang is cut by the timeout" 0 $?
  row true cpu PASS && row false cpu FAIL; check "cpu_tests.txt entries run and counted" 0 $?
  row two_gpu_check cpu SKIP && grep -q 'not run: needs two GPUs' "$t/table"
  check "a check that cannot run here is a row of its own, not run" 0 $?
  grep -q "^9 passed, 9 failed, 1 skipped" "$t/table"; check "totals line" 0 $?
  rm -rf "$t"
  echo "selftest: $fails failure(s)"
  [ "$fails" -eq 0 ]
}

case "${1:-}" in
  --selftest) selftest ;;
  --programs) shift; programs "$@" ;;
  ''|-h|--help) sed -n '2,/^set /{/^#/p}' "$0"; exit 2 ;;
  *) main "$1" ;;
esac
