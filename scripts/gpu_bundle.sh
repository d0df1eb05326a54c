#!/usr/bin/env bash
# Stages what the GPU tier needs on a machine without Bazel into .gpu/
# (ignored by git): libpinshim.so, the pinshim tool, test binaries built here
# with the shared libraries they need, and cpu_tests.txt, the tests the tier
# runs against the real driver. Then, on the GPU machine, from the checkout:
#   bash tests/gpu/run_gpu_tier.sh .gpu
set -euo pipefail
cd "$(dirname "$0")/.."
targets=(//shim:libpinshim.so //analyzer:pinshim //tests/interception:interception_test
         //tests/interception:vmm_program
         //tests/interception:interception_client //tests/interception:linked_client
         //tests/programs:copy_loop_example //shim/budget:race_test //shim/budget:budget_test
         //bench/registry:registry_bench //bench/budget:budget_bench
         //analyzer/report:pinshim-report //tests/trace:rules_driver_test
         //tests/trace:profile_test //tests/trace:optimize_report_test
         //bench/optimize:pool_bench //bench/optimize:arena_bench //bench/optimize:fork_check
         //tests/hazards:hazard_program
         //bench/trace:recorder_bench //tests/trace:python_frames_test
         //bench/page:page_call_bench //bench/copy:rewrite_probe //shim/core:phdr_test
         //tests/trace:programs/embed_python //bench/copy:handoff_probe
         //tests/trace:make_fleet_traces //tests/trace:programs/async_pageable
         //tests/trace:programs/budget_refused //tests/trace:programs/over_pinning
         //tests/trace:programs/pageable_hot //tests/trace:programs/pinned_churn
         //tests/trace:programs/pinned_unused //tests/trace:programs/small_copies
         //tests/trace:programs/sync_copy_loop)
bazel build "${targets[@]}" >/dev/null 2>&1 || bazel build "${targets[@]}"
rm -rf .gpu && mkdir -p .gpu/lib .gpu/bench
cp bazel-bin/shim/libpinshim.so bazel-bin/analyzer/pinshim .gpu/
cp bazel-bin/tests/interception/interception_test bazel-bin/tests/interception/interception_client \
   bazel-bin/tests/interception/vmm_program \
   bazel-bin/tests/interception/linked_client bazel-bin/tests/programs/copy_loop_example \
   bazel-bin/shim/budget/race_test bazel-bin/shim/budget/budget_test .gpu/
cp bazel-bin/bench/registry/registry_bench bazel-bin/bench/budget/budget_bench \
   bazel-bin/bench/optimize/pool_bench bazel-bin/bench/optimize/arena_bench \
   bazel-bin/bench/trace/recorder_bench bazel-bin/bench/page/page_call_bench \
   bazel-bin/bench/copy/handoff_probe bazel-bin/bench/copy/rewrite_probe .gpu/bench/
cp bazel-bin/shim/core/phdr_test .gpu/
cp bazel-bin/bench/optimize/fork_check .gpu/
# The hazard suite on the real driver.
mkdir -p .gpu/hazards && cp bazel-bin/tests/hazards/hazard_program tests/hazards/hazards_test.py .gpu/hazards/
mkdir -p .gpu/tests/interception && cp tests/interception/client.cc .gpu/tests/interception/
# The rule programs on the real driver, laid out as the rule test expects.
mkdir -p .gpu/rules/tests/trace/programs .gpu/rules/analyzer/report .gpu/rules/shim
cp tests/trace/rules_test.py tests/trace/profile_test.py tests/trace/optimize_report_test.py \
   tests/trace/archive_test.py .gpu/rules/tests/trace/
mkdir -p .gpu/rules/analyzer && cp bazel-bin/analyzer/pinshim .gpu/rules/analyzer/
cp tests/trace/programs/*.cc tests/trace/programs/*.py .gpu/rules/tests/trace/programs/
cp bazel-bin/tests/trace/programs/*_driver bazel-bin/tests/trace/programs/native_copier.so \
   bazel-bin/tests/trace/programs/embed_python .gpu/rules/tests/trace/programs/
# Python frames against the real driver, under the GPU machine's Python.
cp tests/trace/python_frames_test.py .gpu/rules/tests/trace/
cp bazel-bin/tests/trace/python_line_check bazel-bin/tests/trace/python_layout_dump \
   .gpu/rules/tests/trace/
cp bazel-bin/analyzer/report/pinshim-report .gpu/rules/analyzer/report/
cp bazel-bin/shim/libpinshim.so .gpu/rules/shim/
# The fleet analysis (bench/fleet_scaling.sh): its Python package beside
# pinshim, the trace generator and the recorder programs that seed it.
mkdir -p .gpu/fleet/programs && cp -r analyzer/fleet/pinshim_fleet .gpu/fleet/
cp bazel-bin/tests/trace/make_fleet_traces .gpu/fleet/
for p in async_pageable budget_refused over_pinning pageable_hot pinned_churn pinned_unused \
         small_copies sync_copy_loop; do
  cp "bazel-bin/tests/trace/programs/$p" .gpu/fleet/programs/
done
# The analyzer's own debug info is not needed there (it reads the programs'),
# and keeps the bundle small enough to travel.
strip --strip-debug .gpu/pinshim .gpu/rules/analyzer/pinshim .gpu/rules/analyzer/report/pinshim-report
# Shared libraries from this machine's packages that the GPU machine may lack.
for bin in .gpu/* .gpu/bench/* .gpu/fleet/make_fleet_traces .gpu/fleet/programs/* .gpu/hazards/hazard_program .gpu/rules/tests/trace/programs/*_driver .gpu/rules/analyzer/report/* \
           .gpu/rules/analyzer/pinshim .gpu/rules/tests/trace/python_line_check \
           .gpu/rules/tests/trace/python_layout_dump; do
  [ -f "$bin" ] || continue
  ldd "$bin" 2>/dev/null | awk '/=> \/usr\/lib|=> \/lib/ {print $3}' | while read -r lib; do
    case "$(basename "$lib")" in
      libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|ld-linux*|libstdc++.so*|libgcc_s.so*|libcuda.so*) ;;
      *) cp -n "$lib" .gpu/lib/ ;;
    esac
  done
done
cat > .gpu/cpu_tests.txt <<'TESTS'
# Run from this folder against the real driver (no simulated driver on the path).
env LD_LIBRARY_PATH=needed ./interception_test ./libpinshim.so ./interception_client ./linked_client /nonexistent ./pinshim ./copy_loop_example ./vmm_program
env LD_LIBRARY_PATH=needed ./race_test
env LD_LIBRARY_PATH=needed ./budget_test
cd rules && env LD_LIBRARY_PATH=../needed TRACE_PROGRAM_SUFFIX=_driver TRACE_PRELOAD=shim/libpinshim.so python3 tests/trace/rules_test.py
cd rules && env LD_LIBRARY_PATH=../needed python3 tests/trace/profile_test.py
cd rules && env LD_LIBRARY_PATH=../needed python3 tests/trace/optimize_report_test.py
cd hazards && env LD_LIBRARY_PATH=../needed python3 hazards_test.py ./hazard_program ../libpinshim.so ../rules/analyzer/report/pinshim-report
cd rules && env LD_LIBRARY_PATH=../needed PINSHIM_TEST_PYTHONS=/opt/torch/.venv/bin/python3 python3 tests/trace/python_frames_test.py
cd rules && env LD_LIBRARY_PATH=../needed python3 tests/trace/archive_test.py
TESTS
du -sh .gpu
