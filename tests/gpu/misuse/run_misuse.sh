#!/usr/bin/env bash
# The misuse programs on a real GPU: an nvcc-built program (static runtime)
# and a PyTorch script, each traced under libpinshim.so and reported on.
#   bash tests/gpu/misuse/run_misuse.sh LIBDIR
set -uo pipefail
LIBDIR="$(cd "$1" && pwd)"
HERE="$(cd "$(dirname "$0")" && pwd)"
work="$(mktemp -d)"
fail=0
nvcc -O2 -g -lineinfo -gencode arch=compute_90,code=sm_90 -o "$work/misuse_program" "$HERE/misuse_program.cu" || exit 1
check() {  # NAME SOURCE CMD... (flags for the checker in CHECK_FLAGS)
  local name=$1 source=$2
  shift 2
  local dir="$work/trace-$name"
  rm -rf "$dir" && mkdir "$dir"
  if ! PINSHIM_TRACE_DIR="$dir" LD_PRELOAD="$LIBDIR/libpinshim.so" timeout 300 "$@"; then
    echo "FAIL $name: the program failed"; fail=1; return
  fi
  "$LIBDIR/pinshim" report "$dir" | head -60
  "$LIBDIR/pinshim" report --format json "$dir" > "$work/$name.json"
  python3 "$HERE/check_findings.py" "$source" "$work/$name.json" ${CHECK_FLAGS:-} || fail=1
}
check misuse_program "$HERE/misuse_program.cu" "$work/misuse_program"
CHECK_FLAGS=--native-ok check torch_misuse "$HERE/torch_misuse.py" python3 "$HERE/torch_misuse.py"
exit $fail
