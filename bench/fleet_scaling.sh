#!/usr/bin/env bash
# Fleet analysis scaling: traces per second of `pinshim fleet` on local Dask
# clusters of 1, 2, 4, 8 and 16 workers, and the memory of the reduce step
# (docs/fleet.md#sizing-a-cluster). CPU only; needs no GPU and no network.
#
#   bash bench/fleet_scaling.sh BUNDLE [OUT] [--python PY] [--wheels DIR]
#
# BUNDLE is the folder scripts/gpu_bundle.sh makes (.gpu): its pinshim, the
# fleet package beside it and fleet/ (the trace generator and the recorder
# programs whose traces seed it). OUT (default: $OUT, else a new temporary
# folder) receives the traces, each run's summary.json and
# fleet_scaling.txt. --python names the interpreter (default
# $PINSHIM_PYTHON, else python3); --wheels DIR unpacks every wheel there
# (dask, distributed, pandas and their dependencies, for that Python) into
# OUT/site and puts it on PYTHONPATH, for a machine without pip or network.
# FLEET_TRACES (default 4000) and FLEET_WORKERS (default "1 2 4 8 16")
# change the sizes.
set -euo pipefail
bundle="$(cd "${1:?usage: fleet_scaling.sh BUNDLE [OUT] [--python PY] [--wheels DIR]}" && pwd)"
shift
out="${OUT:-}"
if [ $# -gt 0 ] && [ "${1#--}" = "$1" ]; then out="$1"; shift; fi
python="${PINSHIM_PYTHON:-python3}"
wheels=""
while [ $# -gt 0 ]; do
  case "$1" in
    --python) python="$2"; shift 2 ;;
    --wheels) wheels="$(cd "$2" && pwd)"; shift 2 ;;
    *) echo "fleet_scaling.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ -n "$out" ] || out="$(mktemp -d /tmp/pinshim-fleet-bench.XXXXXX)"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
traces="${FLEET_TRACES:-4000}"
workers_list="${FLEET_WORKERS:-1 2 4 8 16}"
export LD_LIBRARY_PATH="$bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

if [ -n "$wheels" ]; then
  rm -rf "$out/site" && mkdir -p "$out/site"
  "$python" - "$wheels" "$out/site" <<'PY'
import glob, os, sys, zipfile
for wheel in sorted(glob.glob(os.path.join(sys.argv[1], "*.whl"))):
    with zipfile.ZipFile(wheel) as z:
        z.extractall(sys.argv[2])
PY
  export PYTHONPATH="$out/site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PINSHIM_PYTHON="$python"
"$python" -c "import dask, distributed, pandas, sys; print('python', sys.version.split()[0], 'dask', dask.__version__, 'distributed', distributed.__version__, 'pandas', pandas.__version__)"

# Seeds: each recorder program's trace, then the fleet made from them, with
# one symbol archive copied beside every host's traces.
seeds="$out/seeds"
rm -rf "$seeds" "$out/traces"
for p in async_pageable pageable_hot pinned_churn pinned_unused small_copies sync_copy_loop; do
  env PINSHIM_TRACE_DIR="$seeds" "$bundle/fleet/programs/$p" >/dev/null
done
env PINSHIM_TRACE_DIR="$seeds" PINSHIM_BUDGET=$((64 << 20)) "$bundle/fleet/programs/over_pinning" >/dev/null
env PINSHIM_TRACE_DIR="$seeds" PINSHIM_MODE=enforce PINSHIM_BUDGET=$((4 << 20)) PINSHIM_POLICY=deny \
  "$bundle/fleet/programs/budget_refused" >/dev/null 2>&1
"$bundle/fleet/make_fleet_traces" --out "$out/traces" --count "$traces" --hosts 200 --programs 5 \
  --rebuild-every 3 "$seeds"/*.pstrace
"$bundle/pinshim" archive "$out/traces/node-0" >/dev/null
for host in "$out"/traces/node-*; do
  [ -f "$host/pinshim-symbols.txt" ] || cp "$out/traces/node-0/pinshim-symbols.txt" "$host/"
done

report_start=$(date +%s%N)
"$bundle/pinshim" report --format json "$out"/traces/node-* >"$out/report.json"
report_ms=$(( ($(date +%s%N) - report_start) / 1000000 ))

{
  echo "# pinshim fleet on $(nproc) cores, $traces traces; $(uname -n), $(date -u +%Y-%m-%dT%H:%MZ)"
  echo "# pinshim report --format json over the same traces (threads: one per core): ${report_ms} ms"
  printf "%-8s %-8s %-10s %-12s %-10s %-16s %-16s %-16s\n" workers tasks map_s traces_per_s \
    reduce_s worker_after_map worker_peak client_peak
} >"$out/fleet_scaling.txt"
for n in $workers_list; do
  rm -rf "$out/fleet-$n"
  "$bundle/pinshim" fleet --out "$out/fleet-$n" --workers "$n" "$out/traces" 2>"$out/fleet-$n.log"
  "$python" - "$out/fleet-$n/summary.json" "$n" >>"$out/fleet_scaling.txt" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))["run"]
mib = lambda b: "%.0f MiB" % (b / 2**20)
print("%-8s %-8d %-10.1f %-12.0f %-10.2f %-16s %-16s %-16s" % (
    sys.argv[2], r["tasks"], r["seconds_map"], r["traces_per_second"], r["seconds_reduce"],
    mib(r["worker_rss_after_map_bytes"]), mib(r["worker_peak_rss_bytes"]),
    mib(r["client_peak_rss_bytes"])))
PY
done
cat "$out/fleet_scaling.txt"
