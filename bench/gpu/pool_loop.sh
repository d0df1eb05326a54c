#!/usr/bin/env bash
# The pool in the loop a naive data pipeline writes (alloc_loop BYTES PAIRS
# copy WARMUP: cudaHostAlloc, a 4 KiB cudaMemcpyAsync from the block,
# cudaFreeHost), under optimize mode with a trace, as `pinshim report` times
# the allocation + free pairs: every pair of the run, the first (the
# driver's own allocation of the first slab) included. For each library
# given, ROUNDS rounds, the libraries of a round in rotating order; each
# run also prints the summary's optimize line (the pool_ counters among
# them) and the timed pairs' allocation and free as alloc_loop's host
# clock saw them.
#
#   bash bench/gpu/pool_loop.sh BUNDLE [ROUNDS [PAIRS [LIB ...]]]
#   (BUNDLE: scripts/gpu_bundle.sh's .gpu; PAIRS: timed pairs after 2 x
#   PAIRS untimed, default 2000; LIB default BUNDLE/libpinshim.so;
#   POOL_SIZES: bytes, default "4096 1048576 16777216")
#
# Columns: bytes, pairs, mean / median of a pair (us), the pairs that grew
# the pool (the first among them) and their milliseconds, the pairs served
# from what the pool held (count, mean, median us).
set -u -o pipefail
. "$(dirname "$0")/side_args.sh" pool_loop.sh 2000 "$@"
. "$(dirname "$0")/bundle_env.sh" "$bundle"
loop=/tmp/pool_loop_alloc_loop
nvcc -O2 -gencode arch=compute_90,code=sm_90 -o "$loop" "$(dirname "$0")/alloc_loop.cu" || exit 1
for ((r = 1; r <= rounds; r++)); do
  for ((k = 0; k < ${#libs[@]}; k++)); do
    lib=${libs[$(((k + r) % ${#libs[@]}))]}
    for n in ${POOL_SIZES:-4096 1048576 16777216}; do
      tr="$(mktemp -d)"
      summary=$(LD_PRELOAD="$lib" PINSHIM_MODE=optimize PINSHIM_TRACE_DIR="$tr" PINSHIM_SUMMARY=1 \
        timeout 120 "$loop" "$n" "$pairs" copy $((2 * pairs)) detail 2>&1 >"$tr.out") ||
        { echo "pool_loop: $n under ${lib##*/} failed: $summary" >&2; exit 1; }
      "$bundle/pinshim" report --format json "$tr" | python3 -c '
import json, sys
p = json.load(sys.stdin)["processes"][0]["optimize"]["pool"]
h = p["held_pair_us"] or {"mean": 0, "median": 0}
print("round %s %-22s %9s %6d mean %.3f median %.3f; grew %d %.1f ms; held %d %.3f %.3f" % (
    sys.argv[1], sys.argv[2], sys.argv[3], p["pairs"], p["pair_us"]["mean"], p["pair_us"]["median"],
    p["growth_pairs"], p["growth_ms"], p["held_pairs"], h["mean"], h["median"]))' \
        "$r" "${lib##*/}" "$n"
      echo "$summary" | grep "^pinshim: optimize" | sed 's/^/    /'
      grep -E "^  (alloc|free)" "$tr.out" | sed 's/^/  timed pairs, host clock: /'
      rm -rf "$tr" "$tr.out"
    done
  done
done
