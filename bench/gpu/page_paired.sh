#!/usr/bin/env bash
# The page hooks' cost with the kernel's drift paired away: page_call_bench
# --paired=PAIRS (each call through the hooks and straight into libc, back
# to back, order alternating, timed with the time-stamp counter; median of
# the differences), without the library (the method's own offset) and with
# each library given (optimize mode), ROUNDS rounds, the runs of a round in
# rotating order. Also prints what decides a mapping call's TLB cost (page
# table isolation, PCID).
#
#   bash bench/gpu/page_paired.sh BUNDLE [ROUNDS [PAIRS [LIB ...]]]
#   (BUNDLE: scripts/gpu_bundle.sh's .gpu; LIB default BUNDLE/libpinshim.so)
set -u -o pipefail
. "$(dirname "$0")/side_args.sh" page_paired.sh 200000 "$@"
bench="$bundle/bench/page_call_bench"
[ -x "$bench" ] || { echo "page_paired: no $bench (run scripts/gpu_bundle.sh)" >&2; exit 2; }
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-)"
echo "meltdown: $(cat /sys/devices/system/cpu/vulnerabilities/meltdown 2>/dev/null || echo unknown)"
echo "flags: $(grep -m1 -o -w -E 'pcid|invpcid|pti|hypervisor' /proc/cpuinfo | sort -u | tr '\n' ' ')"
runs=(none "${libs[@]}")
for ((r = 1; r <= rounds; r++)); do
  for ((k = 0; k < ${#runs[@]}; k++)); do
    run=${runs[$(((k + r) % ${#runs[@]}))]}
    echo "== round $r: $run"
    if [ "$run" = none ]; then
      env LD_LIBRARY_PATH="$bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$bench" --paired="$pairs"
    else
      env LD_LIBRARY_PATH="$bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" LD_PRELOAD="$run" PINSHIM_MODE=optimize "$bench" --paired="$pairs"
    fi || { echo "page_paired: run failed" >&2; exit 1; }
  done
done
