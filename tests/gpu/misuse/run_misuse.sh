#!/usr/bin/env bash
# The misuse programs on a real GPU: an nvcc-built program (static runtime)
# and PyTorch, CuPy and JAX scripts, each traced under libpinshim.so and
# reported on; the scripts' findings must sit at their marked Python lines.
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
  "$LIBDIR/pinshim" report "$dir" | head -80
  "$LIBDIR/pinshim" report --format json "$dir" > "$work/$name.json"
  python3 "$HERE/check_findings.py" "$source" "$work/$name.json" ${CHECK_FLAGS:-} || fail=1
}
check misuse_program "$HERE/misuse_program.cu" "$work/misuse_program"
# Python programs: reported at their own lines (Python frames), with the
# framework's fix. The interpreter: PYTHON, else GPU_TIER_PYTHON, else
# /opt/torch/.venv/bin/python3 where it exists, else python3.
py="${PYTHON:-${GPU_TIER_PYTHON:-}}"
if [ -z "$py" ]; then
  if [ -x /opt/torch/.venv/bin/python3 ]; then py=/opt/torch/.venv/bin/python3; else py=python3; fi
fi
"$py" -c 'import sys; print("python for the misuse programs:", sys.version.split()[0], sys.executable)'
for fw in torch cupy jax; do
  if ! "$py" -c "import $fw" > /dev/null 2>&1; then
    echo "SKIP    ${fw}_misuse: $py cannot import $fw"
    continue
  fi
  case $fw in
    torch) flags="--framework pytorch" ;;
    cupy) flags="--framework cupy" ;;
    jax) flags="--framework jax --worker-thread-ok" ;;
  esac
  CHECK_FLAGS="$flags" check "${fw}_misuse" "$HERE/${fw}_misuse.py" "$py" "$HERE/${fw}_misuse.py"
done
exit $fail
