#!/usr/bin/env bash
# Everything pinshim measures or checks on a GPU, in one command, from the
# repository root of a checkout on the GPU machine, with .gpu/ staged by
# scripts/gpu_bundle.sh:
#   bash bench/gpu/run_all.sh .gpu
# Logs and tables go to $OUT (or ./gpu-out); the last lines printed are the
# summary tables. GPU_SKIP (space-separated: bandwidth observe python_frames
# fork_check optimize dataloader_bisect page_facts, or a benchmark binary's name) leaves out benchmarks whose code did not change, to fit a
# run into a shorter slot; the tier and the misuse programs always run.
set -uo pipefail
LIBDIR="$(cd "${1:-.gpu}" && pwd)"
OUT="${OUT:-$PWD/gpu-out}"
mkdir -p "$OUT"
. "$(dirname "$0")/bundle_env.sh" "$LIBDIR"
ls "$LIBDIR/needed" > "$OUT/carried_libs.txt"
export PYTHONUNBUFFERED=1
skipped() { case " ${GPU_SKIP:-} " in *" $1 "*) return 0 ;; esac; return 1; }
{
  date -u
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  nproc
} > "$OUT/machine.txt" 2>&1

# 1. The GPU tier: programs of every kind under the library, counts and results.
timeout 1500 bash tests/gpu/run_gpu_tier.sh "$LIBDIR" > "$OUT/tier.txt" 2>&1
tier_rc=$?

# 2. Misuse programs on the real driver: nvcc static runtime and PyTorch.
timeout 600 bash tests/gpu/misuse/run_misuse.sh "$LIBDIR" > "$OUT/misuse.txt" 2>&1
misuse_rc=$?

# 3. Benchmarks, side by side in one run.
{
  if ! skipped bandwidth; then
    echo "== copy bandwidth by size (GB/s, median)"
    nvcc -O2 -gencode arch=compute_90,code=sm_90 -o /tmp/copy_bandwidth bench/gpu/copy_bandwidth.cu &&
      timeout 200 /tmp/copy_bandwidth 268435456
  fi
  if ! skipped observe; then
    echo "== observe-mode overhead"
    timeout 400 bash bench/gpu/observe_overhead.sh "$LIBDIR" 11
  fi
  if ! skipped python_frames; then
    echo "== Python frames in observe mode (PyTorch DataLoader training loop)"
    timeout 900 bash bench/gpu/python_frames_overhead.sh "$LIBDIR" 7
  fi
  for b in "$LIBDIR"/bench/*; do
    [ -x "$b" ] || continue
    skipped "$(basename "$b")" && continue
    echo "== $(basename "$b")"
    timeout 300 "$b" --benchmark_repetitions=5 --benchmark_report_aggregates_only=true 2>&1 | grep -E "median|Run on|^--|Benchmark"
  done
  if ! skipped fork_check; then
    echo "== registered memory across fork (real driver)"
    timeout 120 "$LIBDIR/fork_check" 2>&1 | tail -20
  fi
  if ! skipped optimize; then
    echo "== optimize mode"
    timeout 600 bash bench/gpu/optimize_bench.sh "$LIBDIR"
  fi
  if ! skipped dataloader_bisect; then
    echo "== optimize mode in a DataLoader loop, part by part"
    timeout 600 bash bench/gpu/dataloader_bisect.sh "$LIBDIR" 3
  fi
  if ! skipped page_facts; then
    # What the driver synchronizes (bench/RESULTS.md, "driver synchronization facts").
    echo "== driver facts (page_facts)"
    nvcc -O2 -o /tmp/page_facts bench/gpu/page_facts.cu && timeout 300 /tmp/page_facts
  fi
} > "$OUT/bench.txt" 2>&1

sed -n '/^program /,$p' "$OUT/tier.txt"
grep -E "^(ok|MISSING|WRONG|XFAIL|SKIP|FAIL)" "$OUT/misuse.txt"
cat "$OUT/bench.txt"
[ $tier_rc -eq 0 ] && [ $misuse_rc -eq 0 ]
