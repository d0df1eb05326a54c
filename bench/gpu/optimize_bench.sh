#!/usr/bin/env bash
# Optimize mode on a real GPU, side by side in one run:
#  1. copy_loop: one reused pageable buffer, run without the library, with
#     PINSHIM_MODE=optimize, and pinned by hand (cudaHostRegister: the upper
#     bound), H2D and D2H at 1, 16 and 256 MiB; ratio = optimize / hand-pinned.
#  2. alloc_loop: cudaHostAlloc + cudaFreeHost pairs, 4 KiB to 16 MiB, without
#     the library and with optimize mode; speedup = without / with. Pairs
#     alone, and with an async copy from each block before its free; and the
#     pairs with a copy as the trace times the calls (pinshim report).
#  2b. fresh_loop: a new buffer per step from one site (the arena's case).
#  3. PyTorch: a reused 64 MiB pageable tensor to the GPU and back; NumPy
#     through CuPy, the same; and what `pinshim report` says optimize mode
#     did for those buffers.
#  4. used-once buffers: a new buffer per copy (no reuse), without and with.
#   bash bench/gpu/optimize_bench.sh LIBDIR
set -uo pipefail
LIBDIR="$(cd "$1" && pwd)"
HERE="$(cd "$(dirname "$0")" && pwd)"
. "$HERE/bundle_env.sh" "$LIBDIR"
work="$(mktemp -d)"
nvcc -O2 -gencode arch=compute_90,code=sm_90 -o "$work/copy_loop" "$HERE/copy_loop.cu" || exit 1
nvcc -O2 -gencode arch=compute_90,code=sm_90 -o "$work/alloc_loop" "$HERE/alloc_loop.cu" || exit 1
nvcc -O2 -gencode arch=compute_90,code=sm_90 -o "$work/fresh_loop" "$HERE/fresh_loop.cu" || exit 1
opt() { LD_PRELOAD="$LIBDIR/libpinshim.so" PINSHIM_MODE=optimize "$@"; }
field() { sed -n "s/.*$1=\([0-9.]*\).*/\1/p"; }
med3() { python3 -c 'import sys,statistics; print(statistics.median(float(x) for x in sys.argv[1:]))' "$@"; }

echo "-- copy_loop (GB/s, median of 3 runs; checksums must agree)"
printf '%-10s %-4s %10s %10s %12s %8s %s\n' bytes dir none optimize hand-pinned ratio checksums
for bytes in 1048576 16777216 268435456; do
  iters=$(( bytes >= 268435456 ? 20 : (bytes >= 16777216 ? 100 : 1000) ))
  for dir in h2d d2h; do
    n=(); o=(); h=(); sums=""
    for r in 1 2 3; do
      out=$("$work/copy_loop" $bytes $iters pageable $dir); n+=($(field GBps <<<"$out")); sums+=" $(field checksum <<<"$out")"
      out=$(opt "$work/copy_loop" $bytes $iters pageable $dir); o+=($(field GBps <<<"$out")); sums+=" $(field checksum <<<"$out")"
      out=$("$work/copy_loop" $bytes $iters hand-pinned $dir); h+=($(field GBps <<<"$out"))
    done
    N=$(med3 "${n[@]}"); O=$(med3 "${o[@]}"); H=$(med3 "${h[@]}")
    printf '%-10s %-4s %10.2f %10.2f %12.2f %8.3f %s\n' $bytes $dir $N $O $H "$(python3 -c "print($O/$H)")" "$(tr ' ' '\n' <<<"$sums" | sort -u | tr '\n' ' ')"
  done
done

echo "-- alloc_loop (us per cudaHostAlloc+cudaFreeHost pair, median of 3; without the library"
echo "   8 untimed pairs first, with it 4000: the pool grows to its steady size once)"
printf '%-10s %-5s %12s %12s %10s\n' bytes copy none optimize speedup
for bytes in 4096 65536 1048576 16777216; do
  pairs=$(( bytes >= 16777216 ? 40 : 200 ))
  for mode in pair copy; do
    # Pairs alone take microseconds with the library: 500 times as many, so
    # the timed loop lasts long enough (100 ms) for scheduling noise to average out.
    mult=$([ $mode = pair ] && echo 500 || echo 50)
    n=(); o=()
    for r in 1 2 3; do
      n+=($("$work/alloc_loop" $bytes $pairs $mode 8 | field us_per_pair))
      o+=($(opt "$work/alloc_loop" $bytes $((pairs * mult)) $mode 4000 | field us_per_pair))
    done
    N=$(med3 "${n[@]}"); O=$(med3 "${o[@]}")
    printf '%-10s %-5s %12.3f %12.3f %10.0f\n' $bytes $([ $mode = copy ] && echo yes || echo no) $N $O "$(python3 -c "print($N/$O)")"
  done
done

echo "-- alloc_loop with a copy from each block, as the trace times the program's calls"
echo "   (pinshim report: the allocation's and the free's durations per pair, us; mean = per pair over the run)"
printf '%-10s %10s %10s %10s %10s %8s\n' bytes pair-mean alloc-mean free-mean median pairs
for bytes in 4096 1048576 16777216; do
  rm -rf "$work/trace_pairs"
  opt env PINSHIM_TRACE_DIR="$work/trace_pairs" "$work/alloc_loop" $bytes 2000 copy 4000 >/dev/null
  "$LIBDIR/pinshim" report --format json "$work/trace_pairs" 2>/dev/null | python3 -c '
import json, sys
pool = json.load(sys.stdin)["processes"][0]["optimize"]["pool"]
print("%-10s %10.3f %10.3f %10.3f %10.3f %8d" % (sys.argv[1], pool["pair_us"]["mean"], pool["alloc_us"]["mean"],
      pool["free_us"]["mean"], pool["pair_us"]["median"], pool["pairs"]))' $bytes
done

echo "-- fresh_loop: a new 16 MiB buffer per step from one site, 4 copies each (ms per step, median of 3)"
printf '%-8s %10s %10s %12s %8s %s\n' copies none optimize pinned-reused ratio checksums
for copies in 4; do
  n=(); o=(); h=(); sums=""
  for r in 1 2 3; do
    out=$("$work/fresh_loop" 16777216 40 $copies pageable); n+=($(field ms_per_step <<<"$out")); sums+=" $(field checksum <<<"$out")"
    out=$(opt "$work/fresh_loop" 16777216 40 $copies pageable); o+=($(field ms_per_step <<<"$out")); sums+=" $(field checksum <<<"$out")"
    out=$("$work/fresh_loop" 16777216 40 $copies pinned); h+=($(field ms_per_step <<<"$out")); sums+=" $(field checksum <<<"$out")"
  done
  N=$(med3 "${n[@]}"); O=$(med3 "${o[@]}"); H=$(med3 "${h[@]}")
  printf '%-8s %10.3f %10.3f %12.3f %8.3f %s\n' $copies $N $O $H "$(python3 -c "print($H/$O)")" "$(tr ' ' '\n' <<<"$sums" | sort -u | tr '\n' ' ')"
done
opt env PINSHIM_SUMMARY=1 "$work/fresh_loop" 16777216 10 4 pageable 2>&1 | grep 'pinshim: optimize'

echo "-- PyTorch, reused 64 MiB pageable tensor to the GPU and back (median of 3)"
n=(); o=()
for r in 1 2 3; do
  n+=($(python3 "$HERE/torch_copy_loop.py" 30 | field seconds))
  o+=($(opt python3 "$HERE/torch_copy_loop.py" 30 | field seconds))
done
N=$(med3 "${n[@]}"); O=$(med3 "${o[@]}")
printf 'none %.4f s, optimize %.4f s, speedup %.2f\n' $N $O "$(python3 -c "print($N/$O)")"

echo "-- NumPy through CuPy, reused 64 MiB array to the GPU and back (median of 3)"
n=(); o=()
for r in 1 2 3; do
  n+=($(python3 "$HERE/numpy_cupy_loop.py" 30 | field seconds))
  o+=($(opt python3 "$HERE/numpy_cupy_loop.py" 30 | field seconds))
done
N=$(med3 "${n[@]}"); O=$(med3 "${o[@]}")
printf 'none %.4f s, optimize %.4f s, speedup %.2f\n' $N $O "$(python3 -c "print($N/$O)")"
python3 "$HERE/numpy_cupy_loop.py" 3 | sed 's/.*checksum/without: checksum/'
opt python3 "$HERE/numpy_cupy_loop.py" 3 | sed 's/.*checksum/optimize: checksum/'

echo "-- what optimize mode did for PyTorch and NumPy buffers (pinshim report, own pinning)"
for prog in torch_copy_loop numpy_cupy_loop; do
  rm -rf "$work/trace_$prog"
  opt env PINSHIM_TRACE_DIR="$work/trace_$prog" python3 "$HERE/$prog.py" 5 > /dev/null
  echo "$prog:"
  "$LIBDIR/pinshim" report "$work/trace_$prog" > "$work/report_$prog.txt" 2>&1
  if grep -q "own pinning" "$work/report_$prog.txt"; then
    sed -n "/own pinning/,/^    trace /p" "$work/report_$prog.txt"
  else
    ls -la "$work/trace_$prog"; head -20 "$work/report_$prog.txt"
  fi
done

echo "-- used-once buffers: a new 16 MiB buffer per copy (median of 9, runs alternating)"
cat > "$work/once.cu" <<'CU'
#include <cuda_runtime.h>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
int main() {
  const size_t n = 16 << 20; void* dev; cudaMalloc(&dev, n);
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 60; ++i) {
    char* b = static_cast<char*>(malloc(n + i * 4096)); memset(b, i, n);
    cudaMemcpy(dev, b, n, cudaMemcpyHostToDevice); free(b);
  }
  printf("seconds=%.6f\n", std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}
CU
nvcc -O2 -o "$work/once" "$work/once.cu"
n=(); o=()
for r in 1 2 3 4 5 6 7 8 9; do n+=($("$work/once" | field seconds)); o+=($(opt "$work/once" | field seconds)); done
N=$(med3 "${n[@]}"); O=$(med3 "${o[@]}")
printf 'none %.4f s, optimize %.4f s, optimize/none %.3f\n' $N $O "$(python3 -c "print($O/$N)")"
