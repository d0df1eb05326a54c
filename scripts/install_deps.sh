#!/usr/bin/env bash
# Installs what building and running pinshim needs from Debian 12's
# packages, only what is missing: Bazel (which brings g++, Python 3 and
# dpkg-dev), libunwind and elfutils. The CUDA toolkit's headers are expected
# at $CUDA_HOME or /usr/local/cuda. What the tests need besides is
# scripts/install_test_deps.sh.
set -euo pipefail
source "$(dirname "$0")/apt_missing.sh"

install_missing bazel-bootstrap g++ libunwind-dev libdw-dev libelf-dev

cuda="${CUDA_HOME:-/usr/local/cuda}"
if [ ! -f "$cuda/include/cuda.h" ]; then
  echo "pinshim: no CUDA toolkit at $cuda (set CUDA_HOME to the toolkit's folder)" >&2
  exit 2
fi
