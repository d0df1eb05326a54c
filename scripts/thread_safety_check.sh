#!/usr/bin/env bash
# Compiles the sources whose locking is annotated (shim/core/
# thread_annotations.h) with clang's -Wthread-safety as errors, syntax only,
# and fails (naming the file and the access) where a guarded member is used
# or a REQUIRES function called without its lock. First it proves it can
# fail: tests/thread_safety/unlocked_access.cc must be refused for both of
# its faults. Needs clang++ (scripts/install_test_deps.sh) and the CUDA
# headers ($CUDA_HOME, else /usr/local/cuda). Prints one line at the end.
set -uo pipefail
cd "$(dirname "$0")/.."
cxx="${CLANG:-clang++-14}"
command -v "$cxx" >/dev/null || cxx=clang++
command -v "$cxx" >/dev/null || { echo "thread-safety check: no clang++" >&2; exit 2; }
cuda="${CUDA_HOME:-/usr/local/cuda}/include"
flags=(-fsyntax-only -std=c++17 -Wthread-safety -Wthread-safety-beta -Werror=thread-safety
       -Werror=thread-safety-beta -I. -I"$cuda")

negative="tests/thread_safety/unlocked_access.cc"
out="$("$cxx" "${flags[@]}" "$negative" 2>&1)"
if [ "$(grep -c "requires holding mutex 'mu_'" <<<"$out")" -lt 2 ]; then
  echo "$out"
  echo "thread-safety check: $negative was not refused twice: the check checks nothing"
  exit 1
fi

# The annotated components: the optimize engine (every lock of it is an
# optimize::Mutex, lock.h).
mapfile -t files < <(git ls-files 'shim/optimize/*.cc' | grep -v -e '_test\.cc$' -e '_testlib\.cc$')
bad=0
for f in "${files[@]}"; do
  if ! "$cxx" "${flags[@]}" "$f"; then
    bad=$((bad + 1))
  fi
done
echo "thread-safety check: ${#files[@]} files, $bad refused"
[ "$bad" -eq 0 ]
