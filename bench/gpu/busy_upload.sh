#!/usr/bin/env bash
# bench/gpu/busy_upload.cc at 3.4 and 12 MiB (a DataLoader batch of 32 and
# of 112 images of 3x96x96 floats) behind a 1 GiB device-to-device copy, 60
# steps, ROUNDS rounds (default 3), each variant in turn: no library,
# optimize (its summary in /tmp), optimize with 2 staging workers, without
# staging, without the self-check, and observe.
#   bash bench/gpu/busy_upload.sh BUNDLE [ROUNDS]
set -u
here="$(cd "$(dirname "$0")" && pwd)"
. "$here/bundle_env.sh" "$1"
L="$(cd "$1" && pwd)/libpinshim.so"
nvcc -O2 -o /tmp/busy_upload "$here/busy_upload.cc" -lcuda -ldl || exit 1
run() { /tmp/busy_upload "$n" 60 $((1 << 30)); }
for ((r = 1; r <= ${2:-3}; r++)); do
  for n in 3538944 12386304; do
    echo "r$r none $n: $(run)"
    echo "r$r optimize $n: $(LD_PRELOAD=$L PINSHIM_MODE=optimize PINSHIM_SUMMARY=/tmp/busy_upload_sum.$n.txt run)"
    echo "r$r workers2 $n: $(LD_PRELOAD=$L PINSHIM_MODE=optimize PINSHIM_STAGE_WORKERS=2 run)"
    echo "r$r stage0 $n: $(LD_PRELOAD=$L PINSHIM_MODE=optimize PINSHIM_STAGE=0 run)"
    echo "r$r nocheck $n: $(LD_PRELOAD=$L PINSHIM_MODE=optimize PINSHIM_SELF_CHECK=0 run)"
    echo "r$r observe $n: $(LD_PRELOAD=$L PINSHIM_MODE=observe run)"
  done
done
tail -n 2 /tmp/busy_upload_sum.*.txt
