#!/usr/bin/env bash
# Times `pinshim report` on a large trace written by the real recorder.
#
#   bash bench/trace/report_big_trace.sh [MEGABYTES]     default 1024
#
# Prints the recording rate, the trace size and bytes per event, and the wall
# time and peak memory of the text, JSON and HTML reports.
set -euo pipefail
cd "$(dirname "$0")/../.."
mb="${1:-1024}"
bazel build -c opt //bench/trace:make_big_trace //analyzer/report:pinshim-report >/dev/null
bin="$(bazel info -c opt bazel-bin 2>/dev/null)"
dir="${TMPDIR:-/tmp}/pinshim_big_trace.$$"
mkdir -p "$dir"
trap 'rm -rf "$dir"' EXIT
"$bin/bench/trace/make_big_trace" "$dir" "$mb"
for fmt in text json html; do
  /usr/bin/time -f "report --format $fmt: %e s wall, %U s user, %M KiB peak RSS" \
    "$bin/analyzer/report/pinshim-report" --format "$fmt" "$dir" >"$dir/out.$fmt"
done
head -12 "$dir/out.text"
