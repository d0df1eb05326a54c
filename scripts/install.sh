#!/bin/bash
# Installs pinshim under a prefix: PREFIX/bin/pinshim and
# PREFIX/lib/libpinshim.so, the layout in which the installed pinshim finds
# its library with no environment variables.
#
#   bazel run //:install -- PREFIX
#   install.sh [--pinshim FILE] [--library FILE] PREFIX
#
# Without --pinshim/--library the built files are taken from the runfiles of
# this script. A relative PREFIX is taken relative to the directory bazel run
# was started from. Files are replaced by rename, so programs already running
# with the old library keep it intact.
set -euo pipefail

usage() {
  echo "usage: install.sh [--pinshim FILE] [--library FILE] PREFIX" >&2
  exit 2
}

pinshim=""
library=""
prefix=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --pinshim) [[ $# -ge 2 ]] || usage; pinshim="$2"; shift 2 ;;
    --library) [[ $# -ge 2 ]] || usage; library="$2"; shift 2 ;;
    -h|--help)
      echo "usage: install.sh [--pinshim FILE] [--library FILE] PREFIX"
      echo "Installs PREFIX/bin/pinshim and PREFIX/lib/libpinshim.so."
      exit 0 ;;
    --) shift; [[ $# -eq 1 ]] || usage; prefix="$1"; shift ;;
    -*) echo "install.sh: unknown option \"$1\"" >&2; usage ;;
    *) [[ -z "${prefix}" ]] || usage; prefix="$1"; shift ;;
  esac
done
[[ -n "${prefix}" ]] || usage

# Runfiles of this script, for the built files when they are not named.
find_built() {
  local rel="$1" dir
  for dir in "${RUNFILES_DIR:-}" "${TEST_SRCDIR:-}" "$0.runfiles"; do
    if [[ -n "${dir}" && -f "${dir}/pinshim/${rel}" ]]; then
      echo "${dir}/pinshim/${rel}"
      return 0
    fi
  done
  echo "install.sh: cannot find ${rel} in the runfiles; pass its path with" \
    "--pinshim or --library" >&2
  return 1
}
[[ -n "${pinshim}" ]] || pinshim="$(find_built analyzer/pinshim)" || exit 2
[[ -n "${library}" ]] || library="$(find_built shim/libpinshim.so)" || exit 2
for file in "${pinshim}" "${library}"; do
  if [[ ! -f "${file}" ]]; then
    echo "install.sh: ${file}: no such file" >&2
    exit 2
  fi
done

if [[ "${prefix}" != /* ]]; then
  prefix="${BUILD_WORKING_DIRECTORY:-${PWD}}/${prefix}"
fi

# copy SOURCE DEST: copies through a temporary file and a rename.
copy() {
  local tmp
  tmp="$(mktemp "$2.tmp.XXXXXX")"
  cp -L "$1" "${tmp}"
  chmod 755 "${tmp}"
  mv -f "${tmp}" "$2"
}

mkdir -p "${prefix}/bin" "${prefix}/lib"
copy "${library}" "${prefix}/lib/libpinshim.so"
copy "${pinshim}" "${prefix}/bin/pinshim"
