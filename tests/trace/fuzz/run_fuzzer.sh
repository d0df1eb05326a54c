#!/usr/bin/env bash
# Fuzzes the trace reader (and the analysis and reports behind it) with
# libFuzzer for a bounded time, then its resynchronisation over damaged bytes
# (analyzer/report/fuzz/resync_fuzzer.cc) for as long again. Needs clang;
# builds outside Bazel (whose toolchain is gcc).
#
#   tests/trace/fuzz/run_fuzzer.sh [SECONDS]     default 60, per target
#
# Crashes found are copied into tests/trace/fuzz/regressions/, which
# //tests/trace:fuzz_regression_test replays on every test run: fix the
# crash, keep the input. Exit status 1 when the fuzzer found a crash.
set -euo pipefail
cd "$(dirname "$0")/../../.."
seconds="${1:-60}"
command -v clang++ >/dev/null || { echo "run_fuzzer.sh: clang++ is not installed" >&2; exit 2; }
cuda="${CUDA_HOME:-/usr/local/cuda}"
work="${FUZZ_WORK_DIR:-/tmp/pinshim-fuzz}"
mkdir -p "$work/corpus" "$work/artifacts"

sources=(analyzer/report/*.cc analyzer/report/rules/*.cc shim/trace/crc32c.cc shim/trace/site_totals.cc shim/core/events.cc
         shim/core/safe_file.cc)
filtered=()
for s in "${sources[@]}"; do
  case "$s" in *_test.cc|*/report_main.cc) ;; *) filtered+=("$s") ;; esac
done
flags=(-std=c++17 -O1 -g -I. -I"$cuda/include")
echo "building the fuzzer in $work"
clang++ "${flags[@]}" -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  "${filtered[@]}" analyzer/report/fuzz/trace_reader_fuzzer.cc -ldw -lelf -lpthread \
  -o "$work/trace_reader_fuzzer"
clang++ "${flags[@]}" -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  analyzer/report/trace_reader.cc analyzer/report/range_crc.cc analyzer/report/format.cc \
  shim/trace/crc32c.cc shim/trace/site_totals.cc shim/core/safe_file.cc analyzer/report/fuzz/resync_fuzzer.cc \
  -o "$work/resync_fuzzer"
clang++ "${flags[@]}" tests/trace/fuzz/make_seeds.cc tests/trace/trace_builder.cc \
  shim/trace/frame_writer.cc shim/trace/crc32c.cc shim/trace/site_totals.cc shim/core/safe_file.cc -o "$work/make_seeds"
"$work/make_seeds" "$work/corpus"
cp tests/trace/fuzz/regressions/* "$work/corpus/" 2>/dev/null || true
mkdir -p "$work/resync_corpus"
cp "$work/corpus"/* "$work/resync_corpus/"

status=0
"$work/trace_reader_fuzzer" -max_total_time="$seconds" -max_len=65536 -timeout=10 \
  -artifact_prefix="$work/artifacts/" -print_final_stats=1 "$work/corpus" || status=$?
# Inputs up to 256 KiB: the time limit catches a scan that is not linear.
"$work/resync_fuzzer" -max_total_time="$seconds" -max_len=262144 -timeout=10 \
  -artifact_prefix="$work/artifacts/" -print_final_stats=1 "$work/resync_corpus" || status=$?
found=0
for a in "$work"/artifacts/crash-* "$work"/artifacts/leak-* "$work"/artifacts/timeout-* \
         "$work"/artifacts/oom-*; do
  [ -e "$a" ] || continue
  cp "$a" tests/trace/fuzz/regressions/
  echo "kept $(basename "$a") in tests/trace/fuzz/regressions/"
  found=1
done
if [ "$found" = 1 ] || [ "$status" != 0 ]; then
  echo "run_fuzzer.sh: the fuzzer found a problem (status $status)" >&2
  exit 1
fi
echo "run_fuzzer.sh: no crash in ${seconds}s"
