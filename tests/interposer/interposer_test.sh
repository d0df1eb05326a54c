#!/usr/bin/env bash
# pinshim's page hooks call through a library preloaded after pinshim that
# interposes mmap, munmap and madvise: the client's 100 rounds of page
# calls (200 mmap, 100 munmap, 100 madvise) all reach it, without pinshim
# and in optimize mode, with the same results.
#   interposer_test.sh CLIENT COUNTER_LIB PINSHIM_LIB FAKECUDA_DIR
set -u
client=$1 counter=$(realpath "$2") lib=$(realpath "$3") driver=$(realpath "$4")
export LD_LIBRARY_PATH="$driver${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
for v in $(env | sed -n 's/^\(PINSHIM_[A-Za-z0-9_]*\)=.*/\1/p'); do unset "$v"; done
export PINSHIM_CONFIG=  # not the machine's config file
want="mmap=200 munmap=100 madvise=100 failures=0"
status=0
check() {
  local name=$1 got
  shift
  got=$("$@" "$client") || { echo "FAIL $name: the client failed"; status=1; return; }
  if [ "$got" = "$want" ]; then
    echo "ok   $name: $got"
  else
    echo "FAIL $name: $got (want $want)"
    status=1
  fi
}
check without env LD_PRELOAD="$counter"
check optimize env LD_PRELOAD="$lib $counter" PINSHIM_MODE=optimize
check observe env LD_PRELOAD="$lib $counter" PINSHIM_MODE=observe
exit $status
