#!/usr/bin/env bash
# The copy guard (PINSHIM_COPY_GUARD=1) on the real driver, in under two
# minutes:
#
#   bash tests/gpu/copy_guard_check.sh BUNDLE     BUNDLE: the folder
#                                                 scripts/gpu_bundle.sh made
#
# 1. The guard's rule programs through the rule test: copy-race caught at
#    the lines marked in copy_race_guard.cc and copy_race_guard_edges.cc
#    (the first and the last byte of a range on end pages it shares with
#    other data of a pinned block), and in copy_race_guard_malloc.cc (the
#    same in a registered malloc'd buffer glibc mapped for itself, and the
#    first byte of one glibc would have served from its heap but for the
#    guard, in observe and in optimize mode, and of a 24 KiB one with the
#    tracking threshold lowered (copy_race_guard_small.cc); a heap buffer's
#    shared page left open while a thread that blocks every signal writes
#    there), none in
#    copy_guard_neighbours.cc (threads updating that data during guarded
#    copies), each program's output the same as without pinshim.
# 2. The edge programs again, 10 times each under the guard, against their
#    output without pinshim: a crash or a changed output fails.
set -euo pipefail
bundle=$(cd "$1" && pwd)
cd "$bundle/rules"
export LD_LIBRARY_PATH="$bundle/lib:$bundle/needed"
env TRACE_PROGRAM_SUFFIX=_driver TRACE_PRELOAD=shim/libpinshim.so \
  RULE_PROGRAMS_ONLY="copy_race_guard copy_race_guard_edges copy_race_guard_malloc copy_race_guard_malloc_optimize copy_race_guard_small copy_guard_neighbours" \
  timeout 90 python3 tests/trace/rules_test.py -k copy_race_guard -k copy_guard_neighbours
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
for p in copy_race_guard_edges copy_race_guard_malloc copy_guard_neighbours; do
  bin=tests/trace/programs/${p}_driver
  want=$("$bin") || { echo "FAIL $p without pinshim"; exit 1; }
  for i in $(seq 1 10); do
    got=$(env LD_PRELOAD="$bundle/rules/shim/libpinshim.so" PINSHIM_COPY_GUARD=1 \
      PINSHIM_TRACE_DIR="$tmp/$p.$i" "$bin") && rc=0 || rc=$?
    if [ "$got" != "$want" ] || { [ "$p" != copy_race_guard_edges ] && [ "$rc" != 0 ]; }; then
      echo "FAIL $p run $i: rc $rc, output '$got' against '$want'"
      fail=1
    fi
  done
  echo "$p: 10 guarded runs checked"
done
[ "$fail" = 0 ] && echo "copy guard check: ok"
exit "$fail"
