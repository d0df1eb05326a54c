#!/usr/bin/env bash
# Capped traces on a real GPU (PINSHIM_TRACE_MAX): a process making
# COPIES small copies (default 20 million 4 KiB cudaMemcpyAsync from pinned
# memory) writes its trace under an 8 MiB cap; the script prints the trace's
# size, the loop's time and the copies the report counts. Observe overhead
# is measured on OVERHEAD (default 1 million) copies of each kind (4 KiB
# synchronous pageable, 4 KiB asynchronous pinned): no library, an uncapped
# trace and a capped trace, one after the other. About 2 minutes on the H200.
#
#   bash bench/gpu/trace_cap.sh BUNDLE [OUTDIR] [COPIES] [OVERHEAD]
# BUNDLE is scripts/gpu_bundle.sh's .gpu; results go to OUTDIR (default
# $OUT) as trace_cap.txt.
set -euo pipefail
BUNDLE="$(cd "$1" && pwd)"
OUTDIR="${2:-${OUT:?no OUTDIR and no OUT}}"
COPIES="${3:-20000000}"
OVERHEAD="${4:-1000000}"
CAP=8M
HERE="$(cd "$(dirname "$0")" && pwd)"
. "$HERE/bundle_env.sh" "$BUNDLE"
mkdir -p "$OUTDIR"
work="$(mktemp -d)"
nvcc -O2 -gencode arch=compute_90,code=sm_90 -o "$work/loop" "$HERE/small_copy_loop.cu"
lib="$BUNDLE/libpinshim.so"
secs() { sed -n 's/.*seconds=\([0-9.]*\).*/\1/p'; }
traced() {  # traced NAME MAX COPIES KIND -> seconds; the trace in $work/NAME
  rm -rf "$work/$1" && mkdir "$work/$1"
  LD_PRELOAD="$lib" PINSHIM_TRACE_DIR="$work/$1" PINSHIM_TRACE_MAX="$2" "$work/loop" "$3" "$4" | secs
}
size() { stat -c %s "$work/$1"/*.pstrace; }
{
  echo "# trace_cap.sh on $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
  echo "## overhead: $OVERHEAD copies each"
  printf '%-13s %10s %12s %12s %10s %10s %14s %14s\n' kind none_s uncapped_s capped_s \
    uncapped% capped% uncapped_B capped_B
  for kind in pageable pinned-async; do
    n=$("$work/loop" "$OVERHEAD" "$kind" | secs)
    u=$(traced full 0 "$OVERHEAD" "$kind")
    c=$(traced capped "$CAP" "$OVERHEAD" "$kind")
    python3 -c "import sys; n,u,c=map(float,sys.argv[1:4]); print(f'{sys.argv[4]:<13} {n:10.3f} {u:12.3f} {c:12.3f} {100*(u/n-1):+9.2f}% {100*(c/n-1):+9.2f}% {sys.argv[5]:>14} {sys.argv[6]:>14}')" \
      "$n" "$u" "$c" "$kind" "$(size full)" "$(size capped)"
  done
  echo "## $COPIES pinned-async copies under a $CAP cap"
  c=$(traced big "$CAP" "$COPIES" pinned-async)
  echo "capped_s=$c trace_bytes=$(size big) cap_bytes=$((8 << 20))"
  "$BUNDLE/pinshim" report --format json "$work"/big/*.pstrace > "$work/big.json"
  python3 - "$work/big.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))["processes"][0]
d = p["detail_end"] or {}
print(f"report_copies={p['copies']} copies_after_detail={d.get('copies_after')} "
      f"spilled={d.get('spilled_copies')} detail_ended_at_s={d.get('time_s')}")
PY
} | tee "$OUTDIR/trace_cap.txt"
rm -rf "$work"
