#!/usr/bin/env bash
# Builds pinshim's packages into dist/ from this source tree: the Debian
# package, the Python wheel, the release archive and its debug symbols, and
# SHA256SUMS (docs/install.md). Installs what building and packaging need
# when it is missing, builds only pinshim and libpinshim.so, and assembles
# them with packaging/make_packages.py (no compiling, no network there).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
source scripts/apt_missing.sh
install_missing dpkg-dev patchelf binutils

bazel build //analyzer:pinshim //shim:libpinshim.so
# File dates are the last commit's, so one commit gives the same packages.
if [ -z "${SOURCE_DATE_EPOCH:-}" ] && git rev-parse --git-dir >/dev/null 2>&1; then
  SOURCE_DATE_EPOCH="$(git log -1 --format=%ct)"
  export SOURCE_DATE_EPOCH
fi
rm -rf dist
python3 packaging/make_packages.py --pinshim bazel-bin/analyzer/pinshim \
  --library bazel-bin/shim/libpinshim.so --source . --out dist
