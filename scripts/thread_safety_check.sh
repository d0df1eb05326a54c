#!/usr/bin/env bash
# Compiles every source of the library (shim/) and the tool (analyzer/),
# tests aside, whose locking is annotated (shim/core/thread_annotations.h),
# with clang's -Wthread-safety as errors, syntax only, and fails (naming the file and the access) where a
# guarded member is used or a REQUIRES function called without its lock.
# First it proves it can fail: each file of tests/thread_safety must be
# refused for both of its faults. Then it checks the naming convention the
# annotations replace: every function declared with a name ending in
# "Locked" says REQUIRES. Needs clang++ (scripts/install_test_deps.sh),
# python3 and the CUDA headers ($CUDA_HOME, else /usr/local/cuda). Prints
# one line at the end.
set -uo pipefail
cd "$(dirname "$0")/.."
cxx="${CLANG:-clang++-14}"
command -v "$cxx" >/dev/null || cxx=clang++
command -v "$cxx" >/dev/null || { echo "thread-safety check: no clang++" >&2; exit 2; }
cuda="${CUDA_HOME:-/usr/local/cuda}/include"
flags=(-fsyntax-only -std=c++17 -Wthread-safety -Wthread-safety-beta -Werror=thread-safety
       -Werror=thread-safety-beta -I. -I"$cuda")

# The negative files: each holds two faults that the check must report.
for negative in tests/thread_safety/unlocked_access.cc tests/thread_safety/ledger_unlocked.cc; do
  out="$("$cxx" "${flags[@]}" "$negative" 2>&1)"
  if [ "$(grep -c -e "requires holding mutex" <<<"$out")" -lt 2 ]; then
    echo "$out"
    echo "thread-safety check: $negative was not refused twice: the check checks nothing"
    exit 1
  fi
done

mapfile -t files < <(git ls-files 'shim/*.cc' 'analyzer/*.cc' | grep -v -e '_test\.cc$' -e '_testlib\.cc$')
# One compiler per core; a refused file's diagnostics are kept and printed.
logs="$(mktemp -d)"
trap 'rm -rf "$logs"' EXIT
printf '%s\n' "${files[@]}" | xargs -P "$(nproc)" -I{} bash -c \
  'out="$("${@:3}" "$2" 2>&1)" || printf "%s\n" "$out" > "$1/$(tr / _ <<<"$2").log"' \
  _ "$logs" {} "$cxx" "${flags[@]}"
bad=0
for log in "$logs"/*.log; do
  [ -e "$log" ] || continue
  cat "$log"
  bad=$((bad + 1))
done

# Declarations (not out-of-class definitions, which repeat no attribute) of
# functions named *Locked, up to their ';' or '{', without REQUIRES. A name
# ending in PageLocked speaks of page-locked memory, not of a lock.
mapfile -t sources < <(git ls-files 'shim/*.h' 'shim/*.cc' 'analyzer/*.h' 'analyzer/*.cc' |
  grep -v -e '_test\.cc$' -e '_testlib\.cc$')
unannotated="$(python3 - "${sources[@]}" <<'PY'
import re, sys
decl = re.compile(r"^(?![ \t]*return\b)[ \t]*(?:(?:static|inline|virtual|constexpr)\s+)*[\w:<>,*& ]*?[\w>*&]\s+[*&]*(\w+Locked)\(", re.M)
for path in sys.argv[1:]:
    text = open(path, encoding="utf-8").read()
    for m in decl.finditer(text):
        name = m.group(1)
        if name.endswith("PageLocked"):
            continue
        end = len(text)
        for stop in (";", "{"):
            i = text.find(stop, m.end())
            if i != -1:
                end = min(end, i)
        if "REQUIRES" not in text[m.start():end]:
            print(f"{path}:{text.count(chr(10), 0, m.start()) + 1}: {name} has no REQUIRES")
PY
)"
if [ -n "$unannotated" ]; then
  echo "$unannotated"
  bad=$((bad + $(wc -l <<<"$unannotated")))
fi
echo "thread-safety check: ${#files[@]} files, $bad refused"
[ "$bad" -eq 0 ]
