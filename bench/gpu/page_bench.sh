#!/usr/bin/env bash
# The page-change hooks' cost on the GPU machine, side by side: the
# page_call_bench (bench/page) without and with the library in optimize
# mode, on the real driver, rounds alternating which side goes first; the
# table is bench/side_by_side.py's (target: at most 10 ns added to a call
# that touches no pinned memory).
#
#   bash bench/gpu/page_bench.sh BUNDLE [ROUNDS [KEEP]]  (BUNDLE: scripts/gpu_bundle.sh's .gpu)
#
# KEEP: a folder that gets the runs' Google Benchmark JSON files (for
# python3 bench/side_by_side.py KEEP later). Each benchmark also has a
# "/libc" twin, the same call straight into libc in the same process: the
# second table is the hook's cost inside one run.
set -u -o pipefail
bundle="$(cd "${1:?usage: page_bench.sh BUNDLE [ROUNDS]}" && pwd)"
rounds="${2:-9}"
keep="${3:-}"
bench="$bundle/bench/page_call_bench"
[ -x "$bench" ] || { echo "page_bench: no $bench (run scripts/gpu_bundle.sh)" >&2; exit 2; }
cd "$(dirname "$0")/../.."
work="$(mktemp -d "${TMPDIR:-/tmp}/pinshim-page.XXXXXX")"
trap 'rm -rf "$work"' EXIT
for v in $(env | sed -n 's/^\(PINSHIM_[A-Za-z0-9_]*\)=.*/\1/p'); do unset "$v"; done
echo "page_call_bench: $rounds rounds x 10 repetitions (interleaved), without and with pinshim (optimize)"
for ((r = 1; r <= rounds; r++)); do
  if ((r % 2)); then order=(without with); else order=(with without); fi
  for mode in "${order[@]}"; do
    env_args=(LD_LIBRARY_PATH="$bundle/lib")
    [ "$mode" = with ] && env_args+=(LD_PRELOAD="$bundle/libpinshim.so" PINSHIM_MODE=optimize)
    env "${env_args[@]}" "$bench" --benchmark_repetitions=10 --benchmark_min_time=0.05 \
      --benchmark_enable_random_interleaving=true \
      --benchmark_out="$work/page-optimize.$mode.$r.json" --benchmark_out_format=json \
      > "$work/$mode.$r.log" 2>&1 || { echo "page_bench: $mode round $r failed" >&2; tail "$work/$mode.$r.log" >&2; exit 1; }
  done
  echo "  round $r/$rounds done"
done
echo "$(nproc) CPUs; load average $(cut -d' ' -f1-3 /proc/loadavg)"
if [ -n "$keep" ]; then mkdir -p "$keep" && cp "$work"/*.json "$keep"/; fi
python3 bench/side_by_side.py "$work"
