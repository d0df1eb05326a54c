#!/usr/bin/env bash
# One DataLoader cell of bench/gpu/py_matrix.py (default
# dataloader:32:0:nopinnb) for ROUNDS rounds in one process each: without
# the library, and under optimize mode with each PINSHIM setting given (one
# run per word, settings joined by commas; "-" for none), each with its
# summary. Shows where optimize mode's time in that loop goes.
#   bash bench/gpu/dataloader_probe.sh BUNDLE OUTFILE [CELL] [ROUNDS] [SETTINGS...]
set -uo pipefail
BUNDLE="$(cd "$1" && pwd)"
OUTFILE="$2"
CELL="${3:-dataloader:32:0:nopinnb}"
ROUNDS="${4:-2}"
shift 4 2>/dev/null || shift $#
SETTINGS=("$@")
[ ${#SETTINGS[@]} -eq 0 ] && SETTINGS=(-)
here="$(cd "$(dirname "$0")" && pwd)"
. "$here/bundle_env.sh" "$BUNDLE"
w="$(mktemp -d)"
one() {  # label, then env(1) arguments
  local label="$1"
  shift
  rm -f "$w/go" "$w/done"
  mkfifo "$w/go" "$w/done"
  env "$@" PYTHONUNBUFFERED=1 python3 "$here/py_matrix.py" "$ROUNDS" "$w/go" "$w/done" "$CELL" \
    > "$w/out" 2>&1 &
  local pid=$!
  exec 7> "$w/go" 8< "$w/done"
  for ((r = 0; r <= ROUNDS; r++)); do
    echo go >&7
    read -r _ <&8 || break
  done
  exec 7>&- 8<&-
  wait $pid
  sed "s/^/$label: /" "$w/out" >> "$OUTFILE"
}
one none
for s in "${SETTINGS[@]}"; do
  extra=()
  [ "$s" != - ] && IFS=, read -ra extra <<< "$s"
  one "optimize ${s}" LD_PRELOAD="$BUNDLE/libpinshim.so" PINSHIM_MODE=optimize \
    PINSHIM_SUMMARY=1 "${extra[@]}"
done
rm -rf "$w"
