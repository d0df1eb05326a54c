#!/usr/bin/env bash
# Replays the kept fuzzer inputs and freshly made seeds through both fuzz
# targets, the whole reader's and the resynchronisation's (built with the
# ordinary toolchain, no libFuzzer).
set -euo pipefail
seeds="${TEST_TMPDIR:-/tmp}/fuzz_seeds"
mkdir -p "$seeds"
tests/trace/fuzz/make_seeds "$seeds"
tests/trace/fuzz/regression_runner "$seeds" tests/trace/fuzz/regressions
tests/trace/fuzz/resync_regression_runner "$seeds" tests/trace/fuzz/regressions
