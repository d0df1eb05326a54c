#!/usr/bin/env bash
# pinshim's overhead on the CPU benchmarks, side by side with and without the
# library preloaded (observe mode, the default):
#   bench/copy:copy_call_bench   64-byte cuMemcpyHtoD / cuMemcpyHtoDAsync
#                                through cuGetProcAddress, on the simulated
#                                driver (target: at most 50 ns added)
#   bench/malloc:malloc_bench    malloc+free pairs (target for 64 bytes: at
#                                most 5 ns added)
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

TARGETS=(//bench/copy:copy_call_bench //bench/malloc:malloc_bench
         //shim:libpinshim.so //tests/fakecuda:libcuda.so.1)
if [ "${1:-}" != "--no-build" ]; then
  bazel build "${TARGETS[@]}" || { echo "bench: build failed" >&2; exit 1; }
fi

BIN="$(cd bazel-bin && pwd -P)"
LIB="$BIN/shim/libpinshim.so"
FAKE_DIR="$BIN/tests/fakecuda"
BENCHES=("$BIN/bench/copy/copy_call_bench" "$BIN/bench/malloc/malloc_bench")
for f in "$LIB" "$FAKE_DIR/libcuda.so.1" "${BENCHES[@]}"; do
  [ -e "$f" ] || { echo "bench: missing $f (build first)" >&2; exit 1; }
done

# Defaults only: no pinshim settings from the caller's environment.
for v in $(env | sed -n 's/^\(PINSHIM_[A-Za-z0-9_]*\)=.*/\1/p'); do unset "$v"; done

WORK="$(mktemp -d "${TMPDIR:-/tmp}/pinshim-bench.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT

run_one() {  # binary mode round
  local bin="$1" mode="$2" round="$3" name
  name="$(basename "$bin")"
  local out="$WORK/$name.$mode.$round.json"
  local preload=()
  [ "$mode" = with ] && preload=(LD_PRELOAD="$LIB")
  if ! env LD_LIBRARY_PATH="$FAKE_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "${preload[@]}" \
      "$bin" --benchmark_repetitions="$REPS" --benchmark_min_time="$MIN_TIME" \
      --benchmark_filter="$FILTER" --benchmark_out="$out" --benchmark_out_format=json \
      > "$WORK/$name.$mode.$round.log" 2>&1; then
    echo "bench: $name ($mode pinshim, round $round) failed:" >&2
    tail -n 20 "$WORK/$name.$mode.$round.log" >&2
    return 1
  fi
}

echo "pinshim CPU benchmarks: $ROUNDS rounds x $REPS repetitions, min_time ${MIN_TIME}s"
status=0
for ((r = 1; r <= ROUNDS; r++)); do
  for bin in "${BENCHES[@]}"; do
    if ((r % 2)); then order=(without with); else order=(with without); fi
    for mode in "${order[@]}"; do run_one "$bin" "$mode" "$r" || status=1; done
  done
  echo "  round $r/$ROUNDS done"
done
[ "$status" -eq 0 ] || { echo "bench: some runs failed; no table" >&2; exit 1; }

commit="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
dirty=""
git diff --quiet HEAD -- shim bench tests/fakecuda 2>/dev/null || dirty=" (shim/bench/fakecuda differ from it)"
echo "commit $commit$dirty; $(nproc) CPUs; load average $(cut -d' ' -f1-3 /proc/loadavg)"

python3 - "$WORK" <<'EOF'
import glob, json, os, statistics, sys

work = sys.argv[1]
# Added nanoseconds allowed, by benchmark name prefix.
targets = {"BM_MemcpyHtoD/": 50.0, "BM_MemcpyHtoDAsync/": 50.0, "BM_MallocFree/64": 5.0}
scale = {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}

rounds = {}  # (name, mode) -> [round medians in ns]
order = []
for path in sorted(glob.glob(os.path.join(work, "*.json"))):
    mode = path.split(".")[-3]
    with open(path) as f:
        data = json.load(f)
    for b in data.get("benchmarks", []):
        if b.get("run_type") != "aggregate" or b.get("aggregate_name") != "median":
            continue
        name = b["run_name"]
        if name not in order:
            order.append(name)
        rounds.setdefault((name, mode), []).append(b["cpu_time"] * scale[b.get("time_unit", "ns")])

def target_for(name):
    for prefix, t in targets.items():
        if name == prefix or name.startswith(prefix):
            return t
    return None

rows = [("benchmark", "without ns", "with ns", "added ns", "spread ns", "target", "verdict")]
missed = 0
for name in order:
    wo, wi = rounds.get((name, "without"), []), rounds.get((name, "with"), [])
    if not wo or not wi:
        continue
    m_wo, m_wi = statistics.median(wo), statistics.median(wi)
    added = m_wi - m_wo
    # How far apart the rounds were: added figures smaller than this are noise.
    spread = max(max(wo) - min(wo), max(wi) - min(wi))
    t = target_for(name)
    verdict = "-" if t is None else ("met" if added <= t else "NOT MET")
    missed += verdict == "NOT MET"
    rows.append((name, "%.1f" % m_wo, "%.1f" % m_wi, "%+.1f" % added, "%.1f" % spread,
                 "-" if t is None else "<= %g" % t, verdict))
widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
for r in rows:
    print("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))))
print("CPU time per iteration: Google Benchmark's median over the repetitions of a run, then "
      "the median over rounds; spread: widest range of one side's round figures. "
      "BM_MallocFreeBatch64 is per 64 pairs.")
print("targets: %d not met" % missed)
EOF
