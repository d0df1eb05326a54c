#!/usr/bin/env bash
# The instructions the calling thread runs inside each of a program's first
# copy calls, on the simulated driver (no GPU; needs valgrind):
# bench/copy/first_copies under callgrind, its profile cut at each mark
# (--dump-after), without the library and in each mode given. What the
# simulated driver runs itself shows in the column without the library.
# Instructions only: no page faults, no time in the kernel.
#
#   bazel build //bench/copy:first_copies //tests/fakecuda:libcuda.so.1 //shim:libpinshim.so
#   [LIB=libpinshim.so] bash bench/copy/first_copy_instructions.sh [BYTES] [MODE...]
#        (default: 1048576, observe and optimize)
set -euo pipefail
cd "$(dirname "$0")/../.."
bytes="${1:-1048576}"
shift || true
modes=("$@")
[ ${#modes[@]} -eq 0 ] && modes=(observe optimize)
prog=bazel-bin/bench/copy/first_copies
lib="${LIB:-$PWD/bazel-bin/shim/libpinshim.so}"
export LD_LIBRARY_PATH="$PWD/bazel-bin/tests/fakecuda${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
profile() {  # name, then env assignments
  local name=$1
  shift
  mkdir -p "$tmp/$name"
  env "$@" valgrind --tool=callgrind --separate-threads=yes --dump-after='*MarkCopyCall*' \
    --callgrind-out-file="$tmp/$name/cg.out" "$prog" "$bytes" > /dev/null 2> "$tmp/$name/log" ||
    { cat "$tmp/$name/log" >&2; exit 1; }
}
profile none
for m in "${modes[@]}"; do
  profile "$m" PINSHIM_MODE="$m" PINSHIM_TRACE_DIR="$tmp/traces" LD_PRELOAD="$lib"
done
python3 - "$tmp" none "${modes[@]}" <<'PY'
import glob, os, re, sys
root, names = sys.argv[1], sys.argv[2:]
def calls(name):
    # The main thread's dumps, in order: dump 2k is copy call k (the dump
    # before it ends at the call's first mark).
    dumps = {}
    for path in glob.glob(os.path.join(root, name, "cg.out.*-01")):
        part = int(re.search(r"cg\.out\.(\d+)-01$", path).group(1))
        with open(path) as f:
            m = re.search(r"^summary: (\d+)", f.read(), re.M)
        dumps[part] = int(m.group(1)) if m else 0
    missing = [2 * k for k in range(1, 17) if 2 * k not in dumps]
    if missing:
        sys.exit("first_copy_instructions: %s: no profile for dumps %s" % (name, missing))
    return [dumps[2 * k] for k in range(1, 17)]
cols = {n: calls(n) for n in names}
print("%-8s" % "call" + "".join("%14s" % n for n in names) +
      "".join("%14s" % (n + "-none") for n in names[1:]))
for k in range(16):
    label = ("h2d" if k % 2 == 0 else "d2h") + " %d" % (k // 2 + 1)
    row = [cols[n][k] for n in names]
    print("%-8s" % label + "".join("%14d" % v for v in row) +
          "".join("%14d" % (v - row[0]) for v in row[1:]))
PY
