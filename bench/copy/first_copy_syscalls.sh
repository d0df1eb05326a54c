#!/usr/bin/env bash
# The system calls pinshim makes inside a program's first copy calls, on the
# simulated driver (no GPU): bench/copy/first_copies under strace, without
# the library and with each library given, in optimize mode; for each copy
# call, the calling thread's system calls between its two marks (less the
# marks), by name, and the threads created. What the simulated driver does
# itself shows in the column without the library.
#
#   bazel build //bench/copy:first_copies //tests/fakecuda:libcuda.so.1 //shim:libpinshim.so
#   bash bench/copy/first_copy_syscalls.sh [BYTES] [LIBPINSHIM...]
#        (default: 1048576 and bazel-bin/shim/libpinshim.so)
set -euo pipefail
cd "$(dirname "$0")/../.."
bytes="${1:-1048576}"
shift || true
libs=("$@")
[ ${#libs[@]} -eq 0 ] && libs=(bazel-bin/shim/libpinshim.so)
prog=bazel-bin/bench/copy/first_copies
export LD_LIBRARY_PATH="$PWD/bazel-bin/tests/fakecuda${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
count() {  # strace log -> one line per copy call: "h2d|d2h N: name=count ..."
  python3 - "$1" <<'PY'
import collections, re, sys
main = None
inside, calls, n = False, [], 0
for line in open(sys.argv[1]):
    m = re.match(r"(\d+)\s+(\w+)\(", line)
    if not m:
        continue
    tid, name = m.group(1), m.group(2)
    if name == "write" and line.split("(", 1)[1].startswith("-1,"):
        main = main or tid
        if tid != main:
            continue
        inside = not inside
        if inside:
            calls.append(collections.Counter())
        continue
    if inside and tid == main:
        calls[-1][name] += 1
for i, c in enumerate(calls):
    what = ("h2d" if i % 2 == 0 else "d2h") + " %d" % (i // 2 + 1)
    print("%-6s %3d calls  %s" % (what, sum(c.values()),
          " ".join("%s=%d" % kv for kv in sorted(c.items())) or "-"))
PY
}
echo "== no library"
strace -f -o "$tmp/none.txt" "$prog" "$bytes" > /dev/null
count "$tmp/none.txt"
for lib in "${libs[@]}"; do
  echo "== $lib, optimize mode"
  LD_PRELOAD="$lib" PINSHIM_MODE=optimize strace -f -o "$tmp/lib.txt" "$prog" "$bytes" > /dev/null
  count "$tmp/lib.txt"
done
