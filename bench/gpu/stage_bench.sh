#!/usr/bin/env bash
# Staged copies on a real GPU, each side by side with its baseline in one
# run, rounds interleaved (which goes first alternates), medians of per-round
# ratios:
#  1. fresh pageable buffers (one per copy), 4 KiB to 1 GiB, both ways:
#     optimize mode / no library (bench/gpu/stage_bench.cu);
#  2. one 64 MiB buffer reused 30 times: optimize / pinned by hand (copy_loop);
#  3. fresh NumPy arrays through PyTorch and CuPy: no library / optimize;
#  4. a DataLoader training loop: optimize with pin_memory=False / no library
#     with pin_memory=True (images per second; loss checksums must agree);
#  5. every core busy with arithmetic while fresh buffers are copied: work per
#     second, optimize / no library.
#  7. fresh buffers uploaded back to back (1, 4 and 16 MiB, 64 MiB in all;
#     cudaMemcpy and cudaMemcpyAsync): optimize / no library, GB/s of the
#     whole burst.
#  6. (not in the default list) the staging ring's settings swept
#     (PINSHIM_STAGE_WORKERS, _CHUNK, _SLOTS), fresh 64 and 256 MiB buffers
#     both ways, rounds interleaved: median GB/s of each setting
#     (STAGE_SWEEP="setting;setting;..." and STAGE_SWEEP_SIZES="bytes ..."
#     choose others; "none" is the run without the library).
#   bash bench/gpu/stage_bench.sh LIBDIR [ROUNDS]   (sections: STAGE_SECTIONS="1 2 3 4 5 7")
set -uo pipefail
LIBDIR="$(cd "$1" && pwd)"
ROUNDS="${2:-5}"
SECTIONS="${STAGE_SECTIONS:-1 2 3 4 5 7}"
HERE="$(cd "$(dirname "$0")" && pwd)"
work="$(mktemp -d)"
. "$(dirname "$0")/bundle_env.sh" "$LIBDIR"
export PYTHONUNBUFFERED=1
nvcc -O2 -gencode arch=compute_90,code=sm_90 -o "$work/stage_bench" "$HERE/stage_bench.cu" -lpthread || exit 1
nvcc -O2 -gencode arch=compute_90,code=sm_90 -o "$work/copy_loop" "$HERE/copy_loop.cu" || exit 1
opt() { LD_PRELOAD="$LIBDIR/libpinshim.so" PINSHIM_MODE=optimize "$@"; }
field() { sed -n "s/.*$1=\([0-9.e+]*\).*/\1/p"; }
has() { case " $SECTIONS " in *" $1 "*) return 0 ;; esac; return 1; }
# Round R of `stage_bench ARGS...` without and with the library (which goes
# first alternates by round), each output line prefixed "WHO round=R",
# appended to FILE:  both R FILE ARGS...
both() {
  local r=$1 file=$2 order="none opt"
  shift 2
  ((r % 2)) || order="opt none"
  for who in $order; do
    if [ $who = opt ]; then opt "$work/stage_bench" "$@"; else "$work/stage_bench" "$@"; fi \
      | sed "s/^/$who round=$r /" >> "$file"
  done
}
# The table of a file `both` wrote: one row per value of the KEY fields,
# median GB/s without and with the library, the median of per-round ratios
# and each round's; then whether every run's checksum agreed with its twin
# (a checksum line counts for the row its run printed last) and how many
# runs printed one:
#   ratios FILE KEY...
ratios() {
  python3 - "$@" <<'PY'
import collections, statistics, sys
keys = sys.argv[2:]
g = collections.defaultdict(dict)
sums = collections.defaultdict(set)
last = {}
for line in open(sys.argv[1]):
    f = line.split()
    who, rnd = f[0], f[1].split("=")[1]
    if f[2] == "checksum":
        sums[(who, last[who])].add(f[3]); continue
    kv = dict(x.split("=") for x in f[3:])
    key = tuple(int(kv[k]) if kv[k].isdigit() else kv[k] for k in keys)
    last[who] = key
    g[key][(who, rnd)] = float(kv["gbps"])
print(" ".join("%10s" % k for k in keys) + " %10s %10s %8s  %s" % ("none", "optimize", "ratio", "per-round ratios"))
for k in sorted(g):
    v = g[k]
    rounds = sorted({r for _, r in v})
    ratios = [v[("opt", r)] / v[("none", r)] for r in rounds if ("opt", r) in v and ("none", r) in v]
    print(" ".join("%10s" % x for x in k) + " %10.2f %10.2f %8.3f  %s" % (
        statistics.median(v[("none", r)] for r in rounds if ("none", r) in v),
        statistics.median(v[("opt", r)] for r in rounds if ("opt", r) in v),
        statistics.median(ratios), " ".join("%.2f" % x for x in ratios)))
# Rows whose runs printed a checksum: one value each, the same both ways.
checked = {k for _, k in sums}
runs = {who: sum(1 for line in open(sys.argv[1]) if line.startswith(who + " ") and " checksum " in line)
        for who in ("none", "opt")}
agree = checked and all(len(sums[("none", k)] | sums[("opt", k)]) == 1 and
                        sums[("none", k)] == sums[("opt", k)] for k in checked)
print("checksums agree (%d runs without, %d with the library)" % (runs["none"], runs["opt"])
      if agree else "checksums DIFFER: %s" % dict(sums))
PY
}

if has 1; then
  echo "-- 1. fresh pageable buffers, GB/s of the copy call (median of 5 to 200 copies a round)"
  SIZES="4096 65536 262144 1048576 4194304 16777216 67108864 268435456 1073741824"
  for ((r = 1; r <= ROUNDS; r++)); do
    for dir in h2d d2h; do both $r "$work/fresh.txt" fresh $dir 5 $SIZES; done
  done
  ratios "$work/fresh.txt" dir bytes
  echo "   each run at 256 MiB and 1 GiB (median, slowest, fastest copy; page faults during the copies)"
  grep -E "bytes=(268435456|1073741824) " "$work/fresh.txt"
  opt env PINSHIM_SUMMARY=1 "$work/stage_bench" fresh h2d 2 67108864 2>&1 | grep 'pinshim: optimize'
fi

if has 2; then
  echo "-- 2. one 64 MiB buffer, 30 copies (the whole loop): optimize / hand-pinned"
  for dir in h2d d2h; do
    o=(); h=()
    for ((r = 1; r <= ROUNDS; r++)); do
      o+=($(opt "$work/copy_loop" 67108864 30 pageable $dir | field seconds))
      h+=($("$work/copy_loop" 67108864 30 hand-pinned $dir | field seconds))
    done
    python3 -c "
import statistics,sys
o=[float(x) for x in '${o[*]}'.split()]; h=[float(x) for x in '${h[*]}'.split()]
r=[b/a for a,b in zip(o,h)]
print('$dir optimize %.4f s hand-pinned %.4f s ratio %.3f rounds %s' % (statistics.median(o), statistics.median(h), statistics.median(r), ' '.join('%.3f'%x for x in r)))"
  done
fi

if has 3; then
  echo "-- 3. fresh 64 MiB NumPy arrays to the GPU and back: no library / optimize"
  for fw in torch cupy; do
    n=(); o=(); sums=""
    for ((r = 1; r <= ROUNDS; r++)); do
      out=$(python3 "$HERE/fresh_arrays.py" $fw 10); n+=($(field seconds_per_step <<<"$out")); sums+=" $(field checksum <<<"$out")"
      out=$(opt python3 "$HERE/fresh_arrays.py" $fw 10); o+=($(field seconds_per_step <<<"$out")); sums+=" $(field checksum <<<"$out")"
    done
    python3 -c "
import statistics
n=[float(x) for x in '${n[*]}'.split()]; o=[float(x) for x in '${o[*]}'.split()]
r=[a/b for a,b in zip(n,o)]
print('$fw none %.5f s optimize %.5f s speedup %.2fx rounds %s checksums %s' % (statistics.median(n), statistics.median(o), statistics.median(r), ' '.join('%.2f'%x for x in r), sorted(set('$sums'.split()))))"
  done
fi

if has 4; then
  echo "-- 4. DataLoader training loop: optimize + pin_memory=False / no library + pin_memory=True"
  n=(); o=(); sums=""
  for ((r = 1; r <= ROUNDS; r++)); do
    out=$(python3 "$HERE/dataloader_train.py" pin 60); n+=($(field images_per_s <<<"$out")); sums+=" $(field loss_checksum <<<"$out")"
    out=$(opt python3 "$HERE/dataloader_train.py" nopin 60); o+=($(field images_per_s <<<"$out")); sums+=" $(field loss_checksum <<<"$out")"
  done
  out=$(python3 "$HERE/dataloader_train.py" nopin 60); plain=$(field images_per_s <<<"$out"); sums+=" $(field loss_checksum <<<"$out")"
  python3 -c "
import statistics
n=[float(x) for x in '${n[*]}'.split()]; o=[float(x) for x in '${o[*]}'.split()]
r=[b/a for a,b in zip(n,o)]
print('pin_memory=True %.1f img/s; optimize pin_memory=False %.1f img/s; ratio %.3f rounds %s; pin_memory=False without the library %s img/s; loss checksums %s' % (statistics.median(n), statistics.median(o), statistics.median(r), ' '.join('%.3f'%x for x in r), '$plain', sorted(set('$sums'.split()))))"
fi

if has 5; then
  echo "-- 5. every core busy, fresh 64 MiB buffers copied every 20 ms: work per second"
  n=(); o=()
  for ((r = 1; r <= ROUNDS; r++)); do
    n+=($("$work/stage_bench" busy 4 67108864 | field work_per_s))
    o+=($(opt "$work/stage_bench" busy 4 67108864 | field work_per_s))
  done
  python3 -c "
import statistics
n=[float(x) for x in '${n[*]}'.split()]; o=[float(x) for x in '${o[*]}'.split()]
r=[b/a for a,b in zip(n,o)]
print('none %.4e optimize %.4e ratio %.4f rounds %s' % (statistics.median(n), statistics.median(o), statistics.median(r), ' '.join('%.4f'%x for x in r)))"
fi

if has 7; then
  echo "-- 7. fresh buffers uploaded back to back: GB/s of the whole burst, optimize / no library"
  for ((r = 1; r <= ROUNDS; r++)); do
    for mode in sync async; do
      for shape in "64 1048576" "16 4194304" "4 16777216"; do
        both $r "$work/burst.txt" burst $mode 5 $shape
      done
    done
  done
  ratios "$work/burst.txt" mode count bytes
fi

if has 6; then
  echo "-- 6. staging ring settings, fresh buffers (median GB/s of the rounds)"
  # [none]: no library; [rewrite ...]: one buffer rewritten before each copy,
  # staged (PINSHIM_PIN_IN_PLACE=0), against fresh buffers: whether new pages
  # cost the staged copy. WORKERS=N also turns off the load-aware count.
  settings=("" "PINSHIM_STAGE_WORKERS=4" "PINSHIM_STAGE_WORKERS=8" "PINSHIM_STAGE_WORKERS=12"
            "PINSHIM_STAGE_WORKERS=15" "PINSHIM_STAGE_CHUNK=1M PINSHIM_STAGE_SLOTS=8"
            "PINSHIM_STAGE_CHUNK=2M" "PINSHIM_STAGE_CHUNK=8M" "PINSHIM_STAGE_SLOTS=8"
            "PINSHIM_STAGE_CHUNK=2M PINSHIM_STAGE_SLOTS=8" "none" "rewrite" "rewrite none")
  # STAGE_SWEEP="A;B;..." replaces the list; STAGE_SWEEP_SIZES the sizes.
  [ -n "${STAGE_SWEEP:-}" ] && IFS=';' read -r -a settings <<<"$STAGE_SWEEP"
  sweep_sizes="${STAGE_SWEEP_SIZES:-67108864 268435456}"
  for ((r = 1; r <= ROUNDS; r++)); do
    for ((k = 0; k < ${#settings[@]}; k++)); do
      set_k="${settings[$(((k + r) % ${#settings[@]}))]}"
      mode=fresh; env_k="$set_k"
      case "$set_k" in rewrite*) mode=rewrite; env_k="PINSHIM_PIN_IN_PLACE=0${set_k#rewrite}" ;; esac
      for dir in h2d d2h; do
        case "$set_k" in
          *none) "$work/stage_bench" $mode $dir 5 $sweep_sizes ;;
          *) opt env $env_k "$work/stage_bench" $mode $dir 5 $sweep_sizes ;;
        esac | sed "s/^/[${set_k:-default}] /" >> "$work/sweep.txt"
      done
    done
  done
  python3 - "$work/sweep.txt" <<'PY'
import collections, re, statistics, sys
g = collections.defaultdict(list)
for line in open(sys.argv[1]):
    m = re.match(r"\[(.*)\] (?:fresh|rewrite) dir=(\S+) bytes=(\d+) gbps=([0-9.]+)", line)
    if m:
        g[(m.group(1), m.group(2), int(m.group(3)))].append(float(m.group(4)))
print("%-48s %-4s %10s %8s  %s" % ("setting", "dir", "bytes", "GB/s", "rounds"))
for k in sorted(g):
    print("%-48s %-4s %10d %8.2f  %s" % (k[0], k[1], k[2], statistics.median(g[k]),
                                        " ".join("%.1f" % x for x in g[k])))
PY
fi
