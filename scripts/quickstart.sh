#!/usr/bin/env bash
# Builds pinshim and runs its main job on the bundled example: an unmodified
# program that copies pageable buffers to the GPU in a loop runs under
# `pinshim run` with a trace, and `pinshim report` says what it did wrong,
# where, and how to fix it. Without a GPU it uses the simulated driver.
# Installs only what building needs (scripts/install_deps.sh) and builds only
# the tool, its library, the example and the simulated driver; the tests and
# what they need are scripts/test.sh's.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
echo "pinshim: building the tool, its library, the example and the simulated driver"
# Bazel's progress lines, one every few seconds, without its terminal UI.
bazel build --curses=no --show_progress_rate_limit=5 --color=no \
  //analyzer:pinshim //shim:libpinshim.so //tests/programs:copy_loop_example \
  //tests/fakecuda:libcuda.so.1

if [ -e /dev/nvidiactl ] && ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1 '; then
  echo "pinshim: GPU driver found; running the example on it"
else
  echo "pinshim: no GPU on this machine; the example runs against the simulated driver (tests/fakecuda)"
  export LD_LIBRARY_PATH="$PWD/bazel-bin/tests/fakecuda${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
trace_dir="$(mktemp -d /tmp/pinshim-example.XXXXXX)"
echo "+ pinshim run --trace-dir $trace_dir --summary -- copy_loop_example"
bazel-bin/analyzer/pinshim run --trace-dir "$trace_dir" --summary -- bazel-bin/tests/programs/copy_loop_example
echo "+ pinshim report $trace_dir"
bazel-bin/analyzer/pinshim report "$trace_dir"
echo "pinshim: to put pinshim on PATH, install it (docs/install.md): scripts/package.sh makes"
echo "  the packages, or: bazel run //:install -- ~/.local   (then ~/.local/bin/pinshim)"
