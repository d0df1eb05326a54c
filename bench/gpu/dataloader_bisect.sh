#!/usr/bin/env bash
# Where optimize mode's time goes in the DataLoader training loop
# (dataloader_train.py, pin_memory=False): the loop run without the library
# and under each mode and setting that turns one part of optimize mode off,
# rounds interleaved (the order rotates each round). Prints images per second,
# median of the rounds, and each variant's ratio to pin_memory=False without
# the library (median of per-round ratios); loss checksums must agree. Then
# the exit summary of one optimize run (staged copies, declined ones).
#   bash bench/gpu/dataloader_bisect.sh LIBDIR [ROUNDS] [BATCHES]
# BISECT_VARIANTS="name|pin or nopin|environment;..." runs those instead
# (an LD_PRELOAD in the environment replaces LIBDIR's library: two builds
# side by side).
set -uo pipefail
LIBDIR="$(cd "$1" && pwd)"
ROUNDS="${2:-3}"
BATCHES="${3:-60}"
HERE="$(cd "$(dirname "$0")" && pwd)"
. "$HERE/bundle_env.sh" "$LIBDIR"
export PYTHONUNBUFFERED=1
work="$(mktemp -d)"
# name|pin or nopin|environment (empty: no library)
variants=(
  "none-pin|pin|"
  "none|nopin|"
  "observe|nopin|PINSHIM_MODE=observe"
  "optimize|nopin|PINSHIM_MODE=optimize"
  "optimize-no-stage|nopin|PINSHIM_MODE=optimize PINSHIM_STAGE=0"
  "optimize-no-in-place|nopin|PINSHIM_MODE=optimize PINSHIM_PIN_IN_PLACE=0"
  "optimize-4-workers|nopin|PINSHIM_MODE=optimize PINSHIM_STAGE_WORKERS=4"
)
if [ -n "${BISECT_VARIANTS:-}" ]; then
  IFS=';' read -r -a variants <<<"$BISECT_VARIANTS"
fi
run() {  # variant round
  IFS='|' read -r name pin envs <<<"$1"
  local pre=()
  [ -n "$envs" ] && pre=(env LD_PRELOAD="$LIBDIR/libpinshim.so" $envs)
  out=$("${pre[@]}" python3 "$HERE/dataloader_train.py" "$pin" "$BATCHES" 2>/dev/null)
  echo "$name round=$2 $out" | tee -a "$work/runs.txt"  # as it goes: a cut run keeps its lines
}
n=${#variants[@]}
for ((r = 0; r < ROUNDS; r++)); do
  for ((k = 0; k < n; k++)); do run "${variants[$(((k + r) % n))]}" $r; done
done
python3 - "$work/runs.txt" <<'PY'
import re, statistics, sys
runs = {}
sums = set()
for line in open(sys.argv[1]):
    name, rnd = line.split()[0], int(re.search(r"round=(\d+)", line).group(1))
    m = re.search(r"images_per_s=([0-9.]+)", line)
    c = re.search(r"loss_checksum=([-0-9.]+)", line)
    if m:
        runs.setdefault(name, {})[rnd] = float(m.group(1))
    if c:
        sums.add(c.group(1))
base = runs.get("none", {})
print("%-22s %10s %8s  %s" % ("variant", "img/s", "ratio", "per-round ratios to none"))
for name, by_round in runs.items():
    ratios = [v / base[r] for r, v in sorted(by_round.items()) if r in base]
    print("%-22s %10.1f %8.3f  %s" % (name, statistics.median(by_round.values()),
          statistics.median(ratios) if ratios else float("nan"),
          " ".join("%.3f" % x for x in ratios)))
print("loss checksums:", sorted(sums))
PY
echo "-- one optimize run's exit summary"
env LD_PRELOAD="$LIBDIR/libpinshim.so" PINSHIM_MODE=optimize PINSHIM_SUMMARY=1 \
  python3 "$HERE/dataloader_train.py" nopin "$BATCHES" 2>&1 | grep -E '^pinshim: (optimize|summary)|dataloader_train'
