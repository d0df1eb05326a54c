#!/usr/bin/env bash
# pinshim's overhead on the CPU benchmarks, side by side with and without the
# library preloaded (observe mode, the default):
#   bench/copy:copy_call_bench   64-byte cuMemcpyHtoD / cuMemcpyHtoDAsync
#                                through cuGetProcAddress (target: at most
#                                50 ns added), run twice: on the simulated
#                                driver (tests/fakecuda, rows "fakecuda:") and
#                                on bench/copy's do-nothing driver (rows
#                                "null-driver:"), whose copies cost nanoseconds
#                                rather than the simulated driver's thread
#                                hand-offs, so the added time is resolvable
#   bench/malloc:malloc_bench    malloc+free pairs (target for 64 bytes: at
#                                most 5 ns added)
#   bench/page:page_call_bench   madvise / mmap calls that touch no pinned
#                                memory, with the library in optimize mode
#                                and a registration in its cache (target: at
#                                most 10 ns added)
#
#   bash bench/run_cpu_benches.sh [--no-build]
#
# Each round runs every benchmark binary once without and once with
# LD_PRELOAD=bazel-bin/shim/libpinshim.so, alternating which goes first, with
# Google Benchmark's --benchmark_repetitions; a round's figure is Google
# Benchmark's median aggregate (CPU time), and the table shows the median of
# the rounds' figures. Environment: BENCH_ROUNDS (default 5), BENCH_REPS
# (default 5), BENCH_MIN_TIME (seconds per repetition, default 0.1),
# BENCH_FILTER (a --benchmark_filter regex).
set -u -o pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
ROUNDS="${BENCH_ROUNDS:-5}"
REPS="${BENCH_REPS:-5}"
MIN_TIME="${BENCH_MIN_TIME:-0.1}"
FILTER="${BENCH_FILTER:-.}"

TARGETS=(//bench/copy:copy_call_bench //bench/copy:null_driver/libcuda.so.1
         //bench/malloc:malloc_bench //bench/page:page_call_bench //shim:libpinshim.so
         //tests/fakecuda:libcuda.so.1)
if [ "${1:-}" != "--no-build" ]; then
  bazel build "${TARGETS[@]}" || { echo "bench: build failed" >&2; exit 1; }
fi

# Where this build's outputs are (the bazel-bin link follows whichever
# configuration was built last, possibly another one).
BIN="$(bazel info bazel-bin 2>/dev/null)" || BIN="$(cd bazel-bin && pwd -P)"
LIB="$BIN/shim/libpinshim.so"
# label|binary|folder holding the libcuda.so.1 to use|settings with the library
BENCHES=("fakecuda|$BIN/bench/copy/copy_call_bench|$BIN/tests/fakecuda|"
         "null-driver|$BIN/bench/copy/copy_call_bench|$BIN/bench/copy/null_driver|"
         "malloc|$BIN/bench/malloc/malloc_bench||"
         "page-optimize|$BIN/bench/page/page_call_bench|$BIN/tests/fakecuda|PINSHIM_MODE=optimize")
for f in "$LIB" "$BIN/tests/fakecuda/libcuda.so.1" "$BIN/bench/copy/null_driver/libcuda.so.1" \
         "$BIN/bench/copy/copy_call_bench" "$BIN/bench/malloc/malloc_bench" \
         "$BIN/bench/page/page_call_bench"; do
  [ -e "$f" ] || { echo "bench: missing $f (build first)" >&2; exit 1; }
done

# Defaults only: no pinshim settings from the caller's environment.
for v in $(env | sed -n 's/^\(PINSHIM_[A-Za-z0-9_]*\)=.*/\1/p'); do unset "$v"; done

WORK="$(mktemp -d "${TMPDIR:-/tmp}/pinshim-bench.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT

run_one() {  # label|binary|driver_dir  mode  round
  local label bin driver settings
  IFS='|' read -r label bin driver settings <<< "$1"
  local mode="$2" round="$3"
  local out="$WORK/$label.$mode.$round.json"
  local env_args=()
  [ -n "$driver" ] && env_args+=(LD_LIBRARY_PATH="$driver${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")
  [ "$mode" = with ] && env_args+=(LD_PRELOAD="$LIB")
  [ "$mode" = with ] && [ -n "$settings" ] && env_args+=("$settings")
  if ! env "${env_args[@]}" "$bin" --benchmark_repetitions="$REPS" \
      --benchmark_min_time="$MIN_TIME" --benchmark_filter="$FILTER" \
      --benchmark_out="$out" --benchmark_out_format=json \
      > "$WORK/$label.$mode.$round.log" 2>&1; then
    echo "bench: $label ($mode pinshim, round $round) failed:" >&2
    tail -n 20 "$WORK/$label.$mode.$round.log" >&2
    return 1
  fi
}

echo "pinshim CPU benchmarks: $ROUNDS rounds x $REPS repetitions, min_time ${MIN_TIME}s"
status=0
for ((r = 1; r <= ROUNDS; r++)); do
  for bench in "${BENCHES[@]}"; do
    if ((r % 2)); then order=(without with); else order=(with without); fi
    for mode in "${order[@]}"; do run_one "$bench" "$mode" "$r" || status=1; done
  done
  echo "  round $r/$ROUNDS done"
done
[ "$status" -eq 0 ] || { echo "bench: some runs failed; no table" >&2; exit 1; }

commit="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
dirty=""
git diff --quiet HEAD -- shim bench tests/fakecuda 2>/dev/null || dirty=" (shim/bench/fakecuda differ from it)"
echo "commit $commit$dirty; $(nproc) CPUs; load average $(cut -d' ' -f1-3 /proc/loadavg)"

python3 bench/side_by_side.py "$WORK"
