#!/usr/bin/env bash
# Fails (and names the files) when clang-format-14 with the root .clang-format
# would change any tracked C++ file. `scripts/format_check.sh --fix` formats
# them in place instead.
set -uo pipefail
cd "$(dirname "$0")/.."
fmt="${CLANG_FORMAT:-clang-format-14}"
command -v "$fmt" >/dev/null || { echo "format check: $fmt not found" >&2; exit 2; }
mapfile -t files < <(git ls-files '*.cc' '*.h' '*.cu' | grep -v '^third_party/')
if [ "${1:-}" = "--fix" ]; then
  "$fmt" -i "${files[@]}"
  exit 0
fi
bad=0
for f in "${files[@]}"; do
  if ! "$fmt" --dry-run -Werror "$f" >/dev/null 2>&1; then
    echo "not formatted: $f (scripts/format_check.sh --fix)"
    bad=$((bad + 1))
  fi
done
echo "format check: ${#files[@]} files, $bad not formatted"
[ "$bad" -eq 0 ]
