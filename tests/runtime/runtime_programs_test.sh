#!/usr/bin/env bash
# CUDA runtime programs built by nvcc (the GPU tier's copy program with the
# static and the shared runtime, the misuse program) on the simulated
# driver, through the GPU tier's own runs and checks (run_gpu_tier.sh
# --programs): without pinshim, under `pinshim run --summary` and under
# LD_PRELOAD with PINSHIM_SUMMARY.
#
# Expected failure, named: the CUDA runtime does not start on the simulated
# driver. It asks the driver for private tables by UUID (cuGetExportTable),
# the last of them a keyed integrity check of the driver, and the simulated
# driver has none of them (tests/fakecuda/README.md). So every program fails
# at its first CUDA call that needs the device, with cudaErrorNotSupported,
# and prints no expect: line; the GPU tier's table then shows each run
# failed for exactly that reason and no other: with pinshim, the same output
# and exit code as without it, and a summary written. The driver names what
# it does not simulate, once per process. When runtime programs do run here,
# this test fails and must require the GPU tier's checks to pass instead.
#
# Usage: runtime_programs_test.sh RUN_GPU_TIER LIBPINSHIM PINSHIM LIBCUDA NAME=PROGRAM...
set -uo pipefail

tier="$1" library="$2" tool="$3" driver="$4"
shift 4
tmp="${TEST_TMPDIR:?}"
export TMPDIR="$tmp/work" HOME="$tmp/home" OUT="$tmp/logs"
mkdir -p "$TMPDIR" "$HOME" "$OUT" "$tmp/lib"
ln -s "$PWD/$library" "$tmp/lib/libpinshim.so"
ln -s "$PWD/$tool" "$tmp/lib/pinshim"
# The loader finds the simulated driver as it would find the real one.
export LD_LIBRARY_PATH="$PWD/$(dirname "$driver")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export GPU_TIER_TIMEOUT=60

programs=("$@")
for spec in "${programs[@]}"; do programs_abs+=("${spec%%=*}=$PWD/${spec#*=}"); done
bash "$tier" --programs "$tmp/lib" "${programs_abs[@]}" > "$tmp/tier.out" 2>&1
tier_rc=$?
cat "$tmp/tier.out"

failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}

[ "$tier_rc" -ne 0 ] || fail "the GPU tier passed: runtime programs run here now (see this script's header)"

# row NAME MODE RESULT DETAIL_REGEX: the table has this row.
row() {
  grep -Eq "^$1 +$2 +$3 +$4\$" "$OUT/table.txt" || fail "no row '$1 $2 $3 $4' in the table"
}
row libpinshim.so ldd PASS -
row pinshim ldd PASS -
unsupported='cudaErrorNotSupported'
row copy_static without FAIL "exit code 2: FATAL line [0-9]+: cudaSetDevice\(0\) returned 801 $unsupported"
row copy_shared without FAIL "exit code 2: FATAL line [0-9]+: cudaSetDevice\(0\) returned 801 $unsupported"
row misuse_program without FAIL \
  "exit code 1: [^ ]*misuse_program.cu:[0-9]+ cudaMalloc\(&dev, kBytes\): operation not supported"
nothing='nothing to compare: no expect line without pinshim \[-\]'
expected_rows=2
for spec in "${programs[@]}"; do
  name="${spec%%=*}"
  for mode in run preload; do row "$name" "$mode" FAIL "$nothing"; done
  expected_rows=$((expected_rows + 3))
done
grep -q "^2 passed, $((expected_rows - 2)) failed\$" "$OUT/table.txt" ||
  fail "unexpected totals: $(tail -n 1 "$OUT/table.txt")"

# Each run: the driver's one line naming what it does not simulate, and, with
# pinshim, a summary that counts no copy and no pinned operation.
named="fakecuda: cuGetExportTable is not simulated: the CUDA runtime's private tables; programs built with cudart stop here"
work="$(ls -d "$TMPDIR"/pinshim-gpu-tier.* | head -n 1)"
for spec in "${programs[@]}"; do
  name="${spec%%=*}"
  before=$failures
  for mode in base run preload; do
    err="$work/run/$name/$mode.err"
    [ "$(grep -c '^fakecuda: ' "$err")" -eq 1 ] && grep -qxF "$named" "$err" ||
      fail "$name $mode: stderr does not hold exactly the line: $named"
    [ "$mode" = base ] && continue
    summary="$(ls "$work/run/$name/sum-$mode"/summary.*.txt 2> /dev/null | head -n 1)"
    grep -q '^pinshim: totals copies=0 copy_bytes=0 pin_calls=0$' "$summary" 2> /dev/null ||
      fail "$name $mode: no summary with zero copies and pinned operations"
  done
  [ "$failures" -eq "$before" ] &&
    echo "XFAIL $name: the CUDA runtime stops at start-up on the simulated driver, alike with and without pinshim"
done

echo "runtime_programs_test: $failures failure(s)"
[ "$failures" -eq 0 ]
