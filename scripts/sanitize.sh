#!/usr/bin/env bash
# Runs tests under one sanitizer, against the simulated driver:
#
#   scripts/sanitize.sh asan|ubsan|tsan [TARGET...]
#
# Without targets, that sanitizer's suite: every cc_test (the unit and
# interception tests) under asan and ubsan; the concurrent ones under tsan.
# `--list` prints the suite's targets and does nothing else. Each sanitizer
# builds into its own output directory (.bazelrc, --config=NAME) and leaves
# its test logs under bazel-NAME-testlogs/. Exit status: bazel's.
#
# The runtime options and suppression files are set here rather than in
# .bazelrc because suppression files must be named by absolute path (a test
# runs in its runfiles tree, which does not hold them).
set -uo pipefail
cd "$(dirname "$0")/.."

usage() {
  echo "usage: scripts/sanitize.sh asan|ubsan|tsan [--list] [TARGET...]" >&2
  exit 2
}
[ $# -ge 1 ] || usage
san="$1"
shift
case "$san" in asan | ubsan | tsan) ;; *) usage ;; esac
list_only=0
if [ "${1:-}" = "--list" ]; then
  list_only=1
  shift
fi

# The concurrent tests: the optimize engine's structures (each looks up the
# registries from many threads), the budget and its node ledger, and the
# trace recorder. The registry's own test is not here: its concurrent case
# races seqlock readers against writers, which is all suppressed
# (tests/sanitizers/tsan.supp), and took two minutes to show nothing.
TSAN_TARGETS=(
  //shim/optimize:pinned_pool_test
  //shim/optimize:registration_cache_test
  //shim/optimize:host_arena_test
  //shim/optimize:stager_test
  //shim/optimize:optimizer_test
  //shim/optimize:page_change_test
  //shim/budget:budget_test
  //shim/budget:ledger_test
  //shim/budget:race_test
  //tests/trace:recorder_test
)

suite() {
  case "$san" in
    asan | ubsan) bazel query 'kind(cc_test, //...)' 2>/dev/null | sort ;;
    tsan) printf '%s\n' "${TSAN_TARGETS[@]}" ;;
  esac
}

if [ $# -gt 0 ]; then
  targets=("$@")
else
  mapfile -t targets < <(suite)
fi
if [ "$list_only" = 1 ]; then
  printf '%s\n' "${targets[@]}"
  exit 0
fi
[ ${#targets[@]} -gt 0 ] || { echo "sanitize.sh: no $san targets" >&2; exit 2; }

supp="$(pwd)/tests/sanitizers"
case "$san" in
  asan)
    # verify_asan_link_order=0: the interception tests preload libpinshim.so
    # ahead of the runtime (so its malloc hooks see the program's calls; see
    # .bazelrc). allocator_may_return_null=1: the clients ask for bad
    # alignments and impossible sizes on purpose, to compare error codes.
    # intercept_tls_get_addr=0: to size a dynamic TLS block, this runtime
    # takes one at page offset 16 for glibc 2.19's mmap'ed block and reads
    # a header before it; glibc 2.36 mallocs the blocks, so a block that
    # lands there by chance gets a made-up range, which LeakSanitizer then
    # scans at exit and crashes. Without it, LeakSanitizer counts what the
    # dynamic linker allocates (the TLS blocks) reachable and scans them.
    env=(--test_env="ASAN_OPTIONS=verify_asan_link_order=0:allocator_may_return_null=1:detect_leaks=1:intercept_tls_get_addr=0"
         --test_env="LSAN_OPTIONS=suppressions=$supp/lsan.supp:print_suppressions=0")
    ;;
  ubsan)
    env=(--test_env="UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1")
    ;;
  tsan)
    # history_size=7: the longest history, so both stacks of a race are
    # kept even in long tests. die_after_fork=0: the recorder's fork test
    # starts its sampling thread again in the child, as the library does.
    env=(--test_env="TSAN_OPTIONS=suppressions=$supp/tsan.supp:history_size=7:die_after_fork=0:halt_on_error=0:second_deadlock_stack=1:print_suppressions=0")
    ;;
esac

exec bazel test --config="$san" --symlink_prefix="bazel-$san-" "${env[@]}" "${targets[@]}"
