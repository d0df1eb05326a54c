#!/usr/bin/env bash
# What pinshim adds to each call copying a small fresh buffer, on a real GPU
# (bench/RESULTS.md, "2026-12-06, third part: per-copy cost on the simulated
# driver", has the instruction counts this checks). Runs
# bench/gpu/fresh_small_cost.cu without the library, in observe mode and in
# optimize mode, interleaved for ROUNDS rounds of STEPS steps at 4 KiB and
# 64 KiB; prints each round's ns per copy call for each direction, then per
# size and direction the medians over rounds of each round's ratio to the
# run without the library (drift between rounds cancels), with their spread,
# and the median of each round's added ns per call.
#
#   bash bench/gpu/small_copy_cost.sh BUNDLE [ROUNDS] [STEPS]
# BUNDLE: the folder scripts/gpu_bundle.sh made. Results: $OUT (or /tmp).
set -euo pipefail
BUNDLE="$(cd "${1:?usage: small_copy_cost.sh BUNDLE [ROUNDS] [STEPS]}" && pwd)"
ROUNDS="${2:-10}"
STEPS="${3:-20000}"
HERE="$(cd "$(dirname "$0")" && pwd)"
. "$HERE/bundle_env.sh" "$BUNDLE"
OUTDIR="${OUT:-/tmp}/small_copy_cost"
mkdir -p "$OUTDIR"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
nvcc -O2 -gencode arch=compute_90,code=sm_90 -o "$work/fresh_small_cost" \
  "$HERE/fresh_small_cost.cu"
raw="$OUTDIR/rounds.txt"
: > "$raw"
for ((r = 0; r < ROUNDS; r++)); do
  for variant in none observe optimize; do
    case $variant in
      none) "$work/fresh_small_cost" "$STEPS" 4096 65536 ;;
      *) PINSHIM_MODE=$variant LD_PRELOAD="$BUNDLE/libpinshim.so" \
           "$work/fresh_small_cost" "$STEPS" 4096 65536 ;;
    esac | sed "s/^/round=$r variant=$variant /" | tee -a "$raw"
  done
done
python3 - "$raw" <<'PY' | tee "$OUTDIR/summary.txt"
import collections, re, statistics, sys
rows = collections.defaultdict(dict)  # (round, bytes) -> variant -> (h2d, d2h)
for line in open(sys.argv[1]):
    f = dict(re.findall(r"(\w+)=([\w.]+)", line))
    rows[(int(f["round"]), int(f["bytes"]))][f["variant"]] = (float(f["h2d_ns"]), float(f["d2h_ns"]))
sizes = sorted({b for _, b in rows})
print(f"{'size':>6} {'dir':>4} {'none ns':>9} {'observe ns':>11} {'optimize ns':>12}"
      f" {'observe/none (min-max)':>26} {'optimize/none (min-max)':>27}"
      f" {'observe +ns':>12} {'optimize +ns':>13}")
for b in sizes:
    for d, name in ((0, "h2d"), (1, "d2h")):
        runs = [v for (r, bb), v in sorted(rows.items()) if bb == b and len(v) == 3]
        med = lambda k: statistics.median(v[k][d] for v in runs)
        def ratio(k):
            rs = [v[k][d] / v["none"][d] for v in runs]
            return f"{statistics.median(rs):.3f} ({min(rs):.3f}-{max(rs):.3f})"
        added = lambda k: statistics.median(v[k][d] - v["none"][d] for v in runs)
        print(f"{b:>6} {name:>4} {med('none'):9.0f} {med('observe'):11.0f} {med('optimize'):12.0f}"
              f" {ratio('observe'):>26} {ratio('optimize'):>27}"
              f" {added('observe'):12.0f} {added('optimize'):13.0f}")
print(f"rounds={len(runs)} steps per round and size: see rounds.txt; a ratio above 1 is time added per call")
PY
