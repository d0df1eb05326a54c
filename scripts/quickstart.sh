#!/usr/bin/env bash
# Builds everything and runs pinshim's main job on the bundled example: an
# unmodified program that copies pageable buffers to the GPU in a loop runs
# under `pinshim run` with a trace, and `pinshim report` says what it did
# wrong, where, and how to fix it. Without a GPU it uses the simulated driver.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
bazel build //... 2>&1 | tail -n 1

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
