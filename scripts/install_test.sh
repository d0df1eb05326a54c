#!/bin/bash
# Installs into temporary prefixes, the way `bazel run //:install -- PREFIX`
# does and directly, and checks that the installed pinshim finds and preloads
# its own library with no environment variables.
set -u

RUNFILES="${TEST_SRCDIR}/${TEST_WORKSPACE}"
TMP="$(mktemp -d "${TEST_TMPDIR:-/tmp}/install_test.XXXXXX")"
export PINSHIM_CONFIG=
unset PINSHIM_LIBRARY LD_PRELOAD

failures=0
fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}

# check_prefix PREFIX: the installed pinshim runs commands under PREFIX's library.
check_prefix() {
  local prefix="$1" out status
  [[ -x "${prefix}/bin/pinshim" ]] || fail "${prefix}/bin/pinshim missing"
  [[ -f "${prefix}/lib/libpinshim.so" ]] || fail "${prefix}/lib/libpinshim.so missing"
  out="$(cd / && "${prefix}/bin/pinshim" run -- true 2>&1)"
  status=$?
  [[ "${status}" == 0 && -z "${out}" ]] ||
    fail "${prefix}: pinshim run -- true: status ${status}: ${out}"
  out="$("${prefix}/bin/pinshim" run -- cat /proc/self/maps 2>&1)"
  grep -q " ${prefix}/lib/libpinshim.so$" <<<"${out}" ||
    fail "${prefix}: the command did not map ${prefix}/lib/libpinshim.so"
  out="$("${prefix}/bin/pinshim" run -- env 2>&1)"
  grep -qx "LD_PRELOAD=${prefix}/lib/libpinshim.so" <<<"${out}" ||
    fail "${prefix}: LD_PRELOAD is not the installed library"
}

# As bazel run does it: in the runfiles directory, with the arguments of the
# //:install target and the caller's directory in BUILD_WORKING_DIRECTORY.
(cd "${RUNFILES}" && BUILD_WORKING_DIRECTORY="${TMP}" ./install \
  --pinshim analyzer/pinshim --library shim/libpinshim.so relative/prefix)
[[ $? == 0 ]] || fail "install as bazel run does: nonzero status"
check_prefix "${TMP}/relative/prefix"

# Directly, finding the built files in the runfiles.
"${RUNFILES}/install" "${TMP}/direct"
[[ $? == 0 ]] || fail "direct install: nonzero status"
check_prefix "${TMP}/direct"

# Installing again over an existing installation.
"${RUNFILES}/install" "${TMP}/direct" || fail "reinstall: nonzero status"
check_prefix "${TMP}/direct"

# The installed pinshim reached through a symbolic link still finds its library.
mkdir -p "${TMP}/elsewhere"
ln -s "${TMP}/direct/bin/pinshim" "${TMP}/elsewhere/pinshim"
out="$("${TMP}/elsewhere/pinshim" run -- env 2>&1)"
grep -qx "LD_PRELOAD=${TMP}/direct/lib/libpinshim.so" <<<"${out}" ||
  fail "through a symlink: ${out}"

# Usage errors.
"${RUNFILES}/install" 2>/dev/null
[[ $? == 2 ]] || fail "install without a prefix should exit 2"
"${RUNFILES}/install" --library "${TMP}/none.so" "${TMP}/x" 2>/dev/null
[[ $? == 2 ]] || fail "install with a missing library should exit 2"

if [[ "${failures}" != 0 ]]; then
  echo "${failures} check(s) failed" >&2
  exit 1
fi
echo "all checks passed"
