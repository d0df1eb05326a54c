#!/usr/bin/env bash
# The access-pattern matrix: copies as programs written elsewhere make them,
# each run without pinshim and under optimize mode in interleaved rounds, and
# reduced to medians of per-round ratios with their spread. From the
# repository root of a checkout on the GPU machine, with the bundle staged by
# scripts/gpu_bundle.sh:
#
#   bash bench/gpu/matrix.sh .gpu [ROUNDS]
#
# ROUNDS (default 8) rounds of the C++ cells (bench/gpu/pattern_matrix.cu:
# fresh buffers 4 KiB to 1 GiB both ways, synchronous and asynchronous;
# buffers reused 2 to 200 times; a bandwidthTest-style loop; threads; busy
# cores) and of a program's first copies (cold cells, one process each); at
# least 10 rounds of the Python cells (bench/gpu/py_matrix.py: DataLoader
# training at 0.5, 3.4 and 12 MiB batches, 0, 2 and 4 workers, pin_memory on
# and off; NumPy arrays through PyTorch and CuPy). Raw lines go to
# $OUT/matrix/raw.txt, the table (bench/gpu/matrix_table.py) to
# $OUT/matrix/table.txt and the end of the output.
#
# MATRIX_PARTS: any of "cpp cold py" (default all). MATRIX_COLD_SIZES: the
# cold cells' sizes in bytes (default 1, 4, 64 and 256 MiB). MATRIX_CPP_CELLS,
# MATRIX_PY_CELLS: the C++ or Python cells to run, in place of all of them. MATRIX_PY_ROUNDS: the
# Python cells' rounds. MATRIX_FIRST_ROUND (default 1): the number of the
# first C++ round, so that rounds run in several calls add up; raw lines are
# appended to $OUT/matrix/raw.txt. MATRIX_COMPARE_LIB: a second libpinshim.so, run as
# variant "compare" in optimize mode beside the bundle's (side by side
# against another build), with MATRIX_COMPARE_ENV's settings added.
# MATRIX_SUMMARY=1: the variants under pinshim print their summaries (to
# $OUT/matrix/stderr.txt for the Python cells); every other PINSHIM_
# variable of the environment is cleared.
set -uo pipefail
BUNDLE="$(cd "${1:-.gpu}" && pwd)"
ROUNDS="${2:-8}"
PY_ROUNDS="${MATRIX_PY_ROUNDS:-$((ROUNDS < 10 ? 10 : ROUNDS))}"
OUT="${OUT:-$PWD/gpu-out}"
W="$OUT/matrix"
PARTS="${MATRIX_PARTS:-cpp cold py}"
here="$(cd "$(dirname "$0")" && pwd)"
mkdir -p "$W"
. "$here/bundle_env.sh" "$BUNDLE"
for v in $(env | grep -o '^PINSHIM_[A-Z_]*'); do unset "$v"; done
export PYTHONUNBUFFERED=1

summary=""
[ "${MATRIX_SUMMARY:-0}" = 1 ] && summary="PINSHIM_SUMMARY=1"
variants=(none optimize)
[ -n "${MATRIX_COMPARE_LIB:-}" ] && variants+=(compare)
# The environment of a variant, as arguments to env(1).
variant_env() {
  case "$1" in
    none) ;;
    optimize) echo "LD_PRELOAD=$BUNDLE/libpinshim.so PINSHIM_MODE=optimize $summary" ;;
    compare) echo "LD_PRELOAD=$MATRIX_COMPARE_LIB PINSHIM_MODE=optimize $summary ${MATRIX_COMPARE_ENV:-}" ;;
  esac
}
# The variants in round r's order: rotated by one each round.
order() {
  local r=$1 n=${#variants[@]} i
  for ((i = 0; i < n; i++)); do echo "${variants[$(((i + r) % n))]}"; done
}
has() { case " $PARTS " in *" $1 "*) return 0 ;; esac; return 1; }

KIB=1024 MIB=1048576
CPP_CELLS=""
for s in 4096 65536 $MIB $((4 * MIB)) $((16 * MIB)) $((64 * MIB)) $((256 * MIB)); do
  CPP_CELLS+=" fresh:$s:sync fresh:$s:async"
done
CPP_CELLS+=" fresh:$((1024 * MIB)):sync"
CPP_CELLS+=" reuse:$((64 * MIB)):2 reuse:$((64 * MIB)):5 reuse:$((64 * MIB)):30"
CPP_CELLS+=" reuse:$((16 * MIB)):200 reuse:$MIB:200 pinned:$((64 * MIB)):30"
CPP_CELLS+=" bw:$((32 * MIB)) bwpinned:$((32 * MIB))"
CPP_CELLS+=" threads:$((4 * MIB)):4 threads:$((16 * MIB)):4"
CPP_CELLS+=" busy:12 fresh:$((4 * MIB)):sync fresh:$((64 * MIB)):sync busy:0"
CPP_CELLS="${MATRIX_CPP_CELLS:-$CPP_CELLS}"
COLD_SIZES="${MATRIX_COLD_SIZES:-$MIB $((4 * MIB)) $((64 * MIB)) $((256 * MIB))}"
PY_CELLS=""
for b in 5 32 112; do
  for w in 0 2 4; do
    PY_CELLS+=" dataloader:$b:$w:pin dataloader:$b:$w:nopin dataloader:$b:$w:nopinnb"
  done
done
# Without copies at all (with nopin's waits, and without): what the loops
# could reach with copies free.
for bw in 5:2 5:4 32:2 32:4; do PY_CELLS+=" dataloader:$bw:nocopy dataloader:$bw:syncnocopy"; done
for f in torch cupy; do PY_CELLS+=" numpy:$f:4:fresh numpy:$f:64:fresh numpy:$f:64:reuse"; done
PY_CELLS="${MATRIX_PY_CELLS:-$PY_CELLS}"

raw="$W/raw.txt"
FIRST=${MATRIX_FIRST_ROUND:-1}
LAST=$((FIRST + ROUNDS - 1))
{
  date -u
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  echo "cores $(nproc); rounds $ROUNDS (python $PY_ROUNDS); variants ${variants[*]}"
} > "$W/machine.txt" 2>&1
cat "$W/machine.txt"
nvcc -O2 -gencode arch=compute_90,code=sm_90 -o "$W/pattern_matrix" "$here/pattern_matrix.cu" || exit 1

# One C++ run: its lines tagged with the round and the variant.
cpp_run() {
  local r=$1 v=$2
  shift 2
  env $(variant_env "$v") "$W/pattern_matrix" "$@" 2>> "$W/stderr.txt" |
    sed "s/^/round=$r variant=$v /" >> "$raw"
}

if has cpp; then
  for ((r = FIRST; r <= LAST; r++)); do
    for v in $(order $r); do cpp_run $r "$v" $CPP_CELLS; done
    echo "cpp round $r of $FIRST..$LAST done ($(date -u +%T))"
  done
fi
if has cold; then
  for ((r = FIRST; r <= LAST; r++)); do
    for s in $COLD_SIZES; do
      for v in $(order $r); do cpp_run $r "$v" "cold:$s"; done
    done
  done
  echo "cold cells done ($(date -u +%T))"
fi
if has py; then
  pids=()
  for v in "${variants[@]}"; do
    mkfifo "$W/go.$v" "$W/done.$v"
    env $(variant_env "$v") python3 "$here/py_matrix.py" "$PY_ROUNDS" "$W/go.$v" "$W/done.$v" \
      $PY_CELLS 2>> "$W/stderr.txt" | sed -u "s/^/variant=$v /" > "$W/py.$v.txt" &
    pids+=($!)
  done
  declare -A go_fd done_fd
  for v in "${variants[@]}"; do
    exec {fd}> "$W/go.$v"
    go_fd[$v]=$fd
    exec {fd}< "$W/done.$v"
    done_fd[$v]=$fd
  done
  for ((r = 0; r <= PY_ROUNDS; r++)); do
    for v in $(order $r); do
      echo go >&"${go_fd[$v]}"
      read -r _ <&"${done_fd[$v]}" || echo "py_matrix ($v) ended early: see $W/stderr.txt"
    done
    echo "python round $r of $PY_ROUNDS done ($(date -u +%T))"
  done
  for v in "${variants[@]}"; do eval "exec ${go_fd[$v]}>&- ${done_fd[$v]}<&-"; done
  wait "${pids[@]}"
  rm -f "$W"/go.* "$W"/done.*
  cat "$W"/py.*.txt >> "$raw"
fi
python3 "$here/matrix_table.py" "$raw" | tee "$W/table.txt"
