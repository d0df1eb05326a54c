#!/usr/bin/env bash
# What PINSHIM_VERIFY_PAGES costs per copy on a real GPU: copy_loop on one
# reused pageable buffer (pinned in place by optimize mode), optimize mode
# with and without page verification, alternating, median of 5 each.
#   bash bench/gpu/verify_cost.sh LIBDIR
set -uo pipefail
LIBDIR="$(cd "$1" && pwd)"
HERE="$(cd "$(dirname "$0")" && pwd)"
work="$(mktemp -d)"
. "$(dirname "$0")/bundle_env.sh" "$LIBDIR"
nvcc -O2 -gencode arch=compute_90,code=sm_90 -o "$work/copy_loop" "$HERE/copy_loop.cu" || exit 1
field() { sed -n "s/.*$1=\([0-9.]*\).*/\1/p"; }
printf '%-10s %-4s %12s %12s %14s\n' bytes dir optimize_s verify_s added_us_per_copy
for bytes in 1048576 16777216 67108864 268435456; do
  iters=$(( bytes >= 268435456 ? 20 : (bytes >= 16777216 ? 100 : 1000) ))
  for dir in h2d d2h; do
    o=(); v=()
    for r in 1 2 3 4 5; do
      o+=($(LD_PRELOAD="$LIBDIR/libpinshim.so" PINSHIM_MODE=optimize "$work/copy_loop" $bytes $iters pageable $dir | field seconds))
      v+=($(LD_PRELOAD="$LIBDIR/libpinshim.so" PINSHIM_MODE=optimize PINSHIM_VERIFY_PAGES=1 "$work/copy_loop" $bytes $iters pageable $dir | field seconds))
    done
    python3 - "$bytes" "$dir" "$iters" "${o[*]}" "${v[*]}" <<'PY'
import statistics, sys
b, d, it = sys.argv[1], sys.argv[2], int(sys.argv[3])
o = statistics.median(float(x) for x in sys.argv[4].split())
v = statistics.median(float(x) for x in sys.argv[5].split())
print("%-10s %-4s %12.4f %12.4f %14.1f" % (b, d, o, v, (v - o) / it * 1e6))
PY
  done
done
