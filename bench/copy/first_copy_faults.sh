#!/usr/bin/env bash
# The page faults and CPU time of a program's first copy calls, on the
# simulated driver (no GPU): bench/copy/first_copies --faults in N processes
# per variant (no library, observe, optimize, and optimize with each
# setting given), in turn; medians per copy call over the processes. What
# the simulated driver does itself shows in the row without the library.
#
#   bazel build //bench/copy:first_copies //tests/fakecuda:libcuda.so.1 //shim:libpinshim.so
#   [LIB=libpinshim.so] bash bench/copy/first_copy_faults.sh [BYTES] [PROCESSES] ["SETTING=VALUE ..."...]
#        (default: 1048576, 10, and PINSHIM_PIN_IN_PLACE=0)
set -euo pipefail
cd "$(dirname "$0")/../.."
bytes="${1:-1048576}"
procs="${2:-10}"
shift 2 || shift $#
settings=("$@")
[ ${#settings[@]} -eq 0 ] && settings=("PINSHIM_PIN_IN_PLACE=0")
prog=bazel-bin/bench/copy/first_copies
lib="${LIB:-$PWD/bazel-bin/shim/libpinshim.so}"
export LD_LIBRARY_PATH="$PWD/bazel-bin/tests/fakecuda${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
variants=("none" "observe" "optimize")
for s in "${settings[@]}"; do variants+=("optimize $s"); done
for r in $(seq "$procs"); do
  for i in "${!variants[@]}"; do
    read -r mode env <<< "${variants[$i]} "
    if [ "$mode" = none ]; then
      "$prog" "$bytes" --faults
    else
      # shellcheck disable=SC2086
      env $env PINSHIM_MODE="$mode" PINSHIM_TRACE_DIR="$tmp/traces" LD_PRELOAD="$lib" \
        "$prog" "$bytes" --faults
    fi | grep -E '^(h2d|d2h) ' | sed "s/^/$i /" >> "$tmp/all.txt"
  done
done
python3 - "$tmp/all.txt" "${variants[@]}" <<'PY'
import collections, statistics, sys
rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    v, d, n, minor, major, cpu = line.split()
    step = "1" if n == "1" else "2-8"
    rows[(int(v), d, step, n)].append((int(minor.split("=")[1]), float(cpu.split("=")[1])))
print("%-50s %-8s %12s %12s" % ("variant", "call", "minor faults", "cpu us"))
for v, name in enumerate(sys.argv[2:]):
    for d in ("h2d", "d2h"):
        for step in ("1", "2-8"):
            # per process: the call's figures (the sum over calls 2 to 8)
            per = collections.defaultdict(lambda: [0, 0.0])
            keys = [k for k in rows if k[0] == v and k[1] == d and k[2] == step]
            for k in keys:
                for p, (m, c) in enumerate(rows[k]):
                    per[p][0] += m
                    per[p][1] += c
            m = statistics.median(x[0] for x in per.values())
            c = statistics.median(x[1] for x in per.values())
            print("%-50s %-8s %12g %12.1f" % (name, d + " " + step, m, c))
PY
