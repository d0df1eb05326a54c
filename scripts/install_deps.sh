#!/usr/bin/env bash
# Installs what pinshim's build needs from Debian 12's packages, only what is
# missing. The CUDA toolkit is expected at $CUDA_HOME or /usr/local/cuda.
set -euo pipefail

packages=(bazel-bootstrap g++ libgtest-dev libgmock-dev libbenchmark-dev libunwind-dev
          libdw-dev libelf-dev python3 python3-dev clang libclang-rt-14-dev
          clang-format-14 chromium util-linux)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "pinshim: installing ${missing[*]}" >&2
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi

cuda="${CUDA_HOME:-/usr/local/cuda}"
if [ ! -f "$cuda/include/cuda.h" ]; then
  echo "pinshim: no CUDA toolkit at $cuda (set CUDA_HOME to the toolkit's folder)" >&2
  exit 2
fi
# tests/runtime builds CUDA runtime programs with the toolkit's nvcc.
if [ ! -x "$cuda/bin/nvcc" ] || [ ! -e "$cuda/lib64/libcudart.so" ]; then
  echo "pinshim: the CUDA toolkit at $cuda has no bin/nvcc or lib64/libcudart.so (the tests need both)" >&2
  exit 2
fi
