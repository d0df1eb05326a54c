#!/usr/bin/env bash
# The pinned host memory of the VMM API and of host memory pools on a real
# GPU, in one run of a few minutes:
#  1. what the driver answers where the documentation is open
#     (bench/gpu/vmm_host_probe.cu "facts": granularity, misuse errors,
#     pointer attributes, pool growth), without the library: what
#     tests/fakecuda/driver_behavior.h must say;
#  2. H2D and D2H speed of pageable, cuMemHostAlloc, cuMemHostRegister, VMM
#     host and host-pool memory (256 MiB, median of 7 copies each way), side
#     by side: no library, observe, optimize, in VMM_PROBE_ROUNDS (default
#     6) interleaved rounds; the table gives each variant's median and the
#     median (min..max) of the per-round ratios to no library;
#  3. tests/interception/vmm_program.cc (the CI program) built against the
#     real driver, each kind in each mode: its bytes, and pinshim's summary
#     (every copy counted as vmm-host or host-pool, none as pageable, nothing
#     staged or pinned by optimize mode), and enforce mode's return codes;
#     its unusual but legal uses (edges-vmm, edges-pool, edges-budget): the
#     driver's answers to them, and the same output under each mode.
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
timeout 60 "$work/probe" facts > "$work/facts_none.txt" 2>&1
echo "probe exit code: $?" >> "$work/facts_none.txt"
cat "$work/facts_none.txt" >> "$OUTDIR/facts.txt"
# The program must see the same answers under the library, in every mode.
for mode in observe optimize; do
  timeout 60 env LD_PRELOAD="$lib" PINSHIM_MODE=$mode "$work/probe" facts \
    > "$work/facts_$mode.txt" 2>&1
  echo "probe exit code: $?" >> "$work/facts_$mode.txt"
  if diff <(grep -v '^pinshim' "$work/facts_none.txt") <(grep -v '^pinshim' "$work/facts_$mode.txt") \
    > "$OUTDIR/facts_$mode.diff"; then
    echo "== 1b. facts under $mode: identical" >> "$OUTDIR/facts.txt"
  else
    echo "== 1b. facts under $mode: DIFFER (facts_$mode.diff)" >> "$OUTDIR/facts.txt"
  fi
done
cat "$OUTDIR/facts.txt"

rounds="${VMM_PROBE_ROUNDS:-6}"
echo "== 2. bandwidth: none / observe / optimize, $rounds interleaved rounds" | tee "$OUTDIR/bw.txt"
for r in $(seq 1 "$rounds"); do
  # The order within a round turns, so no variant always runs first.
  case $((r % 3)) in
    0) order="none observe optimize" ;;
    1) order="optimize none observe" ;;
    2) order="observe optimize none" ;;
  esac
  for who in $order; do
    if [ $who = none ]; then
      timeout 60 "$work/probe" bw
    else
      timeout 60 env LD_PRELOAD="$lib" PINSHIM_MODE=$who \
        PINSHIM_SUMMARY="$OUTDIR/bw_summary.$who.r$r.%p" "$work/probe" bw
    fi 2>&1 | grep '^bw\|^error' | sed "s/^/$who round=$r /" >> "$OUTDIR/bw.txt"
  done
done
python3 - "$OUTDIR/bw.txt" <<'PY' | tee "$OUTDIR/bw_table.txt"
# Per kind and direction: each variant's median GB/s over the rounds, and
# the median (min..max) over rounds of each round's ratio to no library.
import collections, statistics, sys
g = collections.defaultdict(dict)
errors = []
for line in open(sys.argv[1]):
    parts = line.split()
    if len(parts) < 3:
        continue
    who, rnd = parts[0], parts[1]
    if parts[2] == "error":
        errors.append(line.strip())
        continue
    f = dict(x.split("=", 1) for x in parts[3:] if "=" in x)
    if "gbps" in f:
        g[(f["kind"], f["dir"], who)][rnd] = float(f["gbps"])
def ratio(kind, d, who):
    base, got = g[(kind, d, "none")], g[(kind, d, who)]
    rs = sorted(got[r] / base[r] for r in got if r in base and base[r] > 0)
    if not rs:
        return "n/a"
    return "%.3f (%.3f..%.3f)" % (statistics.median(rs), rs[0], rs[-1])
def med(kind, d, who):
    v = list(g[(kind, d, who)].values())
    return "%.2f" % statistics.median(v) if v else "n/a"
print("%-10s %-4s %7s %7s %7s  %-22s %-22s" % ("kind", "dir", "none", "observe", "optimize",
                                               "observe/none", "optimize/none"))
for kind in ["pageable", "host_alloc", "registered", "vmm", "pool"]:
    for d in ["H2D", "D2H"]:
        print("%-10s %-4s %7s %7s %7s  %-22s %-22s" % (kind, d, med(kind, d, "none"),
              med(kind, d, "observe"), med(kind, d, "optimize"), ratio(kind, d, "observe"),
              ratio(kind, d, "optimize")))
print("GB/s: medians over rounds; ratios: median (min..max) of per-round ratios")
for e in errors:
    print("probe error:", e)
PY

echo "== 3. vmm_program under each mode" | tee "$OUTDIR/programs.txt"
for what in vmm pool import; do
  base="$(timeout 60 "$work/vmm_program" $what 3 2>&1)"
  for mode in observe optimize enforce; do
    sdir="$work/s.$what.$mode"
    mkdir -p "$sdir"
    # Enforce mode with a budget far above what the program pins: charged,
    # never refused. The library's own lines are left out of the comparison.
    got="$(timeout 60 env LD_PRELOAD="$lib" PINSHIM_MODE=$mode PINSHIM_SUMMARY="$sdir/summary.%p" \
      PINSHIM_BUDGET=64G PINSHIM_LEDGER_PATH="$work/ledger.$what.$mode" \
      "$work/vmm_program" $what 3 2>&1 | grep -v '^pinshim')"
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
  echo "-- budget policy=$policy (PINSHIM_BUDGET = 36 granules)" >> "$OUTDIR/programs.txt"
  g=$(grep -o 'location=host_numa min=[0-9]*' "$OUTDIR/facts.txt" | head -1 | sed 's/.*min=//')
  timeout 60 env LD_PRELOAD="$lib" PINSHIM_MODE=enforce PINSHIM_BUDGET=$((36 * ${g:-2097152})) \
    PINSHIM_POLICY=$policy PINSHIM_LEDGER_PATH="$work/ledger.$policy" "$work/vmm_program" budget \
    >> "$OUTDIR/programs.txt" 2>&1
done
# The unusual but legal uses (edges-vmm, edges-pool): the real driver's
# answers (a copy across two mappings side by side, cuMemRetainAllocationHandle,
# cuMemFree of a pool's allocation, a pool destroyed with allocations
# outstanding) are whatever the run without the library shows; under each
# mode the output must be the same, probes of a budget of 20 granules
# included (enforce: charged with exactly what is pinned, whole at each end).
g=$(grep -o 'location=host_numa min=[0-9]*' "$OUTDIR/facts.txt" | head -1 | sed 's/.*min=//')
g=${g:-2097152}
echo "== 3b. unusual uses (granule $g)" | tee -a "$OUTDIR/programs.txt"
for what in edges-vmm edges-pool; do
  base="$(timeout 60 "$work/vmm_program" $what 20 2>&1)"
  echo "-- $what without the library (rc $?):" >> "$OUTDIR/programs.txt"
  echo "$base" >> "$OUTDIR/programs.txt"
  for mode in observe optimize enforce; do
    sdir="$work/s.$what.$mode"
    mkdir -p "$sdir"
    got="$(timeout 60 env LD_PRELOAD="$lib" PINSHIM_MODE=$mode PINSHIM_SUMMARY="$sdir/summary.%p" \
      PINSHIM_BUDGET=$((20 * g)) PINSHIM_LEDGER_PATH="$work/ledger.$what.$mode" \
      "$work/vmm_program" $what 20 2>&1 | grep -v '^pinshim')"
    verdict=ok
    [ "$got" = "$base" ] || verdict="output differs: $(diff <(echo "$base") <(echo "$got") | tr '\n' ' ')"
    cat "$sdir"/summary.* > "$OUTDIR/summary.$what.$mode.txt" 2>/dev/null
    grep -q 'src=pageable\|dst=pageable' "$OUTDIR/summary.$what.$mode.txt" && verdict="$verdict; pageable copies counted"
    if [ $mode = optimize ]; then
      grep -q ' staged_copies=0 ' "$OUTDIR/summary.$what.$mode.txt" || verdict="$verdict; staged"
    fi
    echo "program=$what mode=$mode: $verdict" | tee -a "$OUTDIR/programs.txt"
  done
done
echo "-- edges-budget without the library:" >> "$OUTDIR/programs.txt"
timeout 60 "$work/vmm_program" edges-budget >> "$OUTDIR/programs.txt" 2>&1
echo "-- edges-budget, enforce, PINSHIM_BUDGET = 20 granules (see tests/interception/interception_test.cc EnforceChargesUnusualUsesUntilTheMemoryGoes):" >> "$OUTDIR/programs.txt"
timeout 60 env LD_PRELOAD="$lib" PINSHIM_MODE=enforce PINSHIM_BUDGET=$((20 * g)) \
  PINSHIM_LEDGER_PATH="$work/ledger.edges" "$work/vmm_program" edges-budget \
  >> "$OUTDIR/programs.txt" 2>&1
cat "$OUTDIR/programs.txt"
rm -rf "$work"
