#!/usr/bin/env bash
# Observe mode's cost on a real GPU, side by side in one run: a loop of
# cudaMemcpy calls from a reused pageable buffer (bench/gpu/copy_loop.cu), run
# without the library, with it (observe, no trace) and with it writing a
# trace, alternating the three for ROUNDS rounds. Prints the median loop time
# of each and the overhead (median over rounds of each round's ratio to the
# run without the library, so drift between rounds cancels), plus the
# trace's bytes per copy event.
#
#   bash bench/gpu/observe_overhead.sh LIBDIR [ROUNDS]
set -euo pipefail
LIBDIR="$(cd "$1" && pwd)"
ROUNDS="${2:-11}"
HERE="$(cd "$(dirname "$0")" && pwd)"
. "$HERE/bundle_env.sh" "$LIBDIR"
work="$(mktemp -d)"
nvcc -O2 -gencode arch=compute_90,code=sm_90 -o "$work/copy_loop" "$HERE/copy_loop.cu"
run() {  # run VARIANT BYTES ITERS -> seconds
  local variant=$1 bytes=$2 iters=$3 out
  case $variant in
    none)  out=$("$work/copy_loop" "$bytes" "$iters" pageable) ;;
    observe) out=$(LD_PRELOAD="$LIBDIR/libpinshim.so" "$work/copy_loop" "$bytes" "$iters" pageable) ;;
    trace) rm -rf "$work/trace" && mkdir "$work/trace"
           out=$(LD_PRELOAD="$LIBDIR/libpinshim.so" PINSHIM_TRACE_DIR="$work/trace" \
                 "$work/copy_loop" "$bytes" "$iters" pageable)
           echo "$(cat "$work/trace"/*.pstrace | wc -c)" > "$work/trace_bytes" ;;
  esac
  sed -n 's/.*seconds=\([0-9.]*\).*/\1/p' <<<"$out"
}
printf '%-8s %-8s %12s %12s %12s %10s %10s %14s\n' size iters none_s observe_s trace_s observe% trace% trace_B/copy
for spec in "1048576 6000" "4096 60000"; do
  set -- $spec
  bytes=$1 iters=$2
  : > "$work/none"; : > "$work/observe"; : > "$work/trace_s"
  for ((r = 0; r < ROUNDS; r++)); do
    run none "$bytes" "$iters" >> "$work/none"
    run observe "$bytes" "$iters" >> "$work/observe"
    run trace "$bytes" "$iters" >> "$work/trace_s"
  done
  python3 - "$bytes" "$iters" "$work" <<'PY'
import statistics, sys
b, it, w = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
vals = lambda f: [float(x) for x in open(f"{w}/{f}").read().split()]
N, O, T = vals("none"), vals("observe"), vals("trace_s")
med = statistics.median
ro = med(o / n - 1 for n, o in zip(N, O))
rt = med(t / n - 1 for n, t in zip(N, T))
tb = int(open(f"{w}/trace_bytes").read())
print(f"{b:<8} {it:<8} {med(N):12.6f} {med(O):12.6f} {med(T):12.6f} {100*ro:+9.2f}% {100*rt:+9.2f}% {tb/(it+3):14.1f}")
PY
done
