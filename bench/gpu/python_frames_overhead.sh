#!/usr/bin/env bash
# What Python frames cost observe mode on a PyTorch DataLoader training loop
# (bench/gpu/torch_dataloader_train.py), side by side in one run: without
# pinshim, observe mode writing a trace without Python frames
# (PINSHIM_PYTHON_FRAMES=0), and the same with them (the default), the three
# interleaved for ROUNDS rounds (at least 5). Prints the median loop time of
# each, the median over rounds of each round's ratio (so drift between
# rounds cancels), the Python-frames overhead against the 2% target
# (PASS/FAIL line), and whether the trace with frames names the training
# script's lines.
#
#   bash bench/gpu/python_frames_overhead.sh LIBDIR [ROUNDS] [STEPS]
set -euo pipefail
LIBDIR="$(cd "$1" && pwd)"
ROUNDS="${2:-7}"
STEPS="${3:-120}"
HERE="$(cd "$(dirname "$0")" && pwd)"
. "$HERE/bundle_env.sh" "$LIBDIR"
PY="${PYTHON:-${GPU_TIER_PYTHON:-}}"
if [ -z "$PY" ]; then
  if [ -x /opt/torch/.venv/bin/python3 ]; then PY=/opt/torch/.venv/bin/python3; else PY=python3; fi
fi
[ "$ROUNDS" -ge 5 ] || { echo "ROUNDS must be at least 5" >&2; exit 2; }
work="$(mktemp -d)"
prog="$HERE/torch_dataloader_train.py"
echo "python: $("$PY" -c 'import sys, torch; print(sys.version.split()[0], "torch", torch.__version__)')"
run() {  # VARIANT ROUND -> prints the seconds; keeps stdout for the checksum
  local variant=$1 round=$2 out dir="$work/trace-$1-$2"
  case $variant in
    none) out=$("$PY" "$prog" "$STEPS") ;;
    frames_off) rm -rf "$dir" && mkdir "$dir"
                out=$(LD_PRELOAD="$LIBDIR/libpinshim.so" PINSHIM_TRACE_DIR="$dir" \
                      PINSHIM_PYTHON_FRAMES=0 "$PY" "$prog" "$STEPS") ;;
    frames_on) rm -rf "$dir" && mkdir "$dir"
               out=$(LD_PRELOAD="$LIBDIR/libpinshim.so" PINSHIM_TRACE_DIR="$dir" \
                     PINSHIM_PYTHON_FRAMES=1 "$PY" "$prog" "$STEPS") ;;
  esac
  echo "$out" >> "$work/$variant.out"
  sed -n 's/.*seconds=\([0-9.]*\).*/\1/p' <<<"$out"
}
for ((r = 0; r < ROUNDS; r++)); do
  run none "$r" >> "$work/none"
  run frames_off "$r" >> "$work/frames_off"
  run frames_on "$r" >> "$work/frames_on"
done
"$LIBDIR/pinshim" report --format json "$work/trace-frames_on-0" > "$work/on.json"
python3 - "$work" "$ROUNDS" "$STEPS" <<'PY'
import json, statistics, sys
w, rounds, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
vals = lambda f: [float(x) for x in open(f"{w}/{f}").read().split()]
N, OFF, ON = vals("none"), vals("frames_off"), vals("frames_on")
med = statistics.median
print(f"{'variant':<26}{'median s':>12}{'vs none':>10}")
print(f"{'no pinshim':<26}{med(N):12.4f}{'':>10}")
print(f"{'observe, frames off':<26}{med(OFF):12.4f}{100 * med(o / n - 1 for n, o in zip(N, OFF)):+9.2f}%")
print(f"{'observe, Python frames':<26}{med(ON):12.4f}{100 * med(o / n - 1 for n, o in zip(N, ON)):+9.2f}%")
over = med(on / off - 1 for off, on in zip(OFF, ON))
print(f"Python frames vs frames off: {100 * over:+.2f}% (median of {rounds} interleaved rounds; "
      f"target at most +2%): {'PASS' if over <= 0.02 else 'FAIL'}")
sums = {v: {l.split('checksum=')[1] for l in open(f"{w}/{v}.out") if 'checksum=' in l}
        for v in ("none", "frames_off", "frames_on")}
same = sums["none"] == sums["frames_off"] == sums["frames_on"] and len(sums["none"]) == 1
print(f"checksums identical in every run: {'yes' if same else 'NO: ' + str(sums)}")
data = json.load(open(f"{w}/on.json"))
py_sites = [f for f in data["findings"] if f["site"] and f["site"].get("python")]
print("findings of the run with frames: %d, at Python lines: %d" % (len(data["findings"]), len(py_sites)))
for f in data["findings"][:5]:
    s = f["site"] or {}
    print(f"  {f['rule']} at {s.get('function')} ({s.get('file')}:{s.get('line')}) "
          f"[{s.get('python_status')}] framework={f.get('framework')}")
PY
