#!/usr/bin/env bash
# The pinned host memory of the VMM API and of host memory pools on a real
# GPU, in one run of a few minutes:
#  1. what the driver answers where the documentation is open
#     (bench/gpu/vmm_host_probe.cu "facts": granularity, misuse errors,
#     pointer attributes, pool growth), without the library: what
#     tests/fakecuda/driver_behavior.h must say;
#  2. H2D and D2H speed of pageable, cuMemHostAlloc, cuMemHostRegister, VMM
#     host and host-pool memory, side by side: no library, observe, optimize
#     (rounds interleaved; medians);
#  3. tests/interception/vmm_program.cc (the CI program) built against the
#     real driver, each kind in each mode: its bytes, and pinshim's summary
#     (every copy counted as vmm-host or host-pool, none as pageable, nothing
#     staged or pinned by optimize mode), and enforce mode's return codes.
#   bash bench/gpu/vmm_host_probe.sh BUNDLE [OUTDIR]   (OUTDIR defaults to $OUT)
set -uo pipefail
LIBDIR="$(cd "$1" && pwd)"
OUTDIR="${2:-${OUT:?no OUTDIR and no OUT}}"
mkdir -p "$OUTDIR"
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
work="$(mktemp -d)"
. "$HERE/bundle_env.sh" "$LIBDIR"
nvcc -O2 -gencode arch=compute_90,code=sm_90 -o "$work/probe" "$HERE/vmm_host_probe.cu" -lcuda || exit 1
g++ -O2 -I"$(dirname "$(command -v nvcc)")/../include" -o "$work/vmm_program" \
  "$ROOT/tests/interception/vmm_program.cc" -lcuda || exit 1
lib="$LIBDIR/libpinshim.so"

echo "== 1. facts (no library)" | tee "$OUTDIR/facts.txt"
timeout 60 "$work/probe" facts >> "$OUTDIR/facts.txt" 2>&1
echo "== 1b. facts under observe (the program must see the same answers)" >> "$OUTDIR/facts.txt"
timeout 60 env LD_PRELOAD="$lib" PINSHIM_MODE=observe "$work/probe" facts \
  > "$work/facts_observe.txt" 2>&1
diff <(grep -v '^pinshim' "$OUTDIR/facts.txt" | sed -n '/^granularity/,$p') \
  <(grep -v '^pinshim' "$work/facts_observe.txt") > "$OUTDIR/facts_observe.diff" &&
  echo "facts under observe: identical" >> "$OUTDIR/facts.txt"
cat "$OUTDIR/facts.txt"

echo "== 2. bandwidth: none / observe / optimize, 3 rounds" | tee "$OUTDIR/bw.txt"
for r in 1 2 3; do
  for who in none observe optimize; do
    if [ $who = none ]; then
      timeout 60 "$work/probe" bw
    else
      timeout 60 env LD_PRELOAD="$lib" PINSHIM_MODE=$who PINSHIM_SUMMARY="$OUTDIR/bw_summary.$who.%p" \
        "$work/probe" bw
    fi | grep '^bw' | sed "s/^/$who round=$r /" >> "$OUTDIR/bw.txt"
  done
done
python3 - "$OUTDIR/bw.txt" <<'PY' | tee "$OUTDIR/bw_table.txt"
import collections, statistics, sys
g = collections.defaultdict(list)
for line in open(sys.argv[1]):
    f = dict(x.split("=", 1) for x in line.split()[1:] if "=" in x)
    if "gbps" in f:
        g[(f["kind"], f["dir"], line.split()[0])].append(float(f["gbps"]))
print("%-11s %-4s %9s %9s %9s %8s" % ("kind", "dir", "none", "observe", "optimize", "opt/none"))
for kind in ["pageable", "host_alloc", "registered", "vmm", "pool"]:
    for d in ["H2D", "D2H"]:
        m = {w: statistics.median(g[(kind, d, w)]) if g[(kind, d, w)] else float("nan")
             for w in ["none", "observe", "optimize"]}
        print("%-11s %-4s %9.2f %9.2f %9.2f %8.2f" % (kind, d, m["none"], m["observe"],
              m["optimize"], m["optimize"] / m["none"]))
PY

echo "== 3. vmm_program under each mode" | tee "$OUTDIR/programs.txt"
for what in vmm pool import; do
  base="$(timeout 60 "$work/vmm_program" $what 3 2>&1)"
  for mode in observe optimize enforce; do
    sdir="$work/s.$what.$mode"
    mkdir -p "$sdir"
    got="$(timeout 60 env LD_PRELOAD="$lib" PINSHIM_MODE=$mode PINSHIM_SUMMARY="$sdir/summary.%p" \
      "$work/vmm_program" $what 3 2>&1)"
    verdict=ok
    [ "$got" = "$base" ] || verdict="output differs"
    cat "$sdir"/summary.* > "$OUTDIR/summary.$what.$mode.txt" 2>/dev/null
    grep -q 'src=pageable\|dst=pageable' "$OUTDIR/summary.$what.$mode.txt" && verdict="$verdict; pageable copies counted"
    grep -q 'dir=H2D src=\(vmm-host\|host-pool\)' "$OUTDIR/summary.$what.$mode.txt" || verdict="$verdict; no pinned H2D"
    if [ $mode = optimize ]; then
      grep -q ' staged_copies=0 ' "$OUTDIR/summary.$what.$mode.txt" || verdict="$verdict; staged"
      grep -q ' cache_registrations=0 ' "$OUTDIR/summary.$what.$mode.txt" || verdict="$verdict; registered"
    fi
    echo "program=$what mode=$mode: $verdict" | tee -a "$OUTDIR/programs.txt"
  done
done
for policy in deny fallback evict; do
  echo "-- budget policy=$policy (PINSHIM_BUDGET = 3 granules)" >> "$OUTDIR/programs.txt"
  g=$(grep -o 'location=host_numa min=[0-9]*' "$OUTDIR/facts.txt" | head -1 | sed 's/.*min=//')
  timeout 60 env LD_PRELOAD="$lib" PINSHIM_MODE=enforce PINSHIM_BUDGET=$((3 * ${g:-2097152})) \
    PINSHIM_POLICY=$policy PINSHIM_LEDGER_PATH="$work/ledger.$policy" "$work/vmm_program" budget \
    >> "$OUTDIR/programs.txt" 2>&1
done
cat "$OUTDIR/programs.txt"
rm -rf "$work"
