# Sourced by the scripts that run libraries side by side in rounds
# (page_paired.sh, pool_loop.sh), with the script's name, its default
# PAIRS and its arguments "BUNDLE [ROUNDS [PAIRS [LIB ...]]]":
#   . bench/gpu/side_args.sh NAME DEFAULT_PAIRS "$@"
# Sets bundle (an absolute path), rounds (default 3), pairs and libs (an
# array; default BUNDLE/libpinshim.so), and clears every PINSHIM_ setting
# from the environment, so each run gets only the settings the script gives.
side_name="$1"
side_default_pairs="$2"
shift 2
bundle="$(cd "${1:?usage: $side_name BUNDLE [ROUNDS [PAIRS [LIB ...]]]}" && pwd)" || exit 2
rounds="${2:-3}"
pairs="${3:-$side_default_pairs}"
shift $(($# < 3 ? $# : 3))
libs=("$@")
((${#libs[@]})) || libs=("$bundle/libpinshim.so")
for side_v in $(env | sed -n 's/^\(PINSHIM_[A-Za-z0-9_]*\)=.*/\1/p'); do unset "$side_v"; done
unset side_name side_default_pairs side_v
