#!/usr/bin/env bash
# Installs what pinshim's tests need beyond the build
# (scripts/install_deps.sh), only what is missing: GoogleTest and GoogleMock,
# Google Benchmark, clang with its runtime (the trace reader's fuzzer) and
# clang-format 14, python3-dev (CPython's headers, for the Python frame
# layouts), chromium (the HTML report is checked in headless Chromium), and
# what the package test uses: python3-venv (a virtual environment for the
# wheel), patchelf (the wheel's run paths) and dpkg-dev (dpkg-shlibdeps);
# util-linux's setpriv (the attack suite acts as another user); Dask and
# pandas for Debian's /usr/bin/python3 (pinshim fleet's test); and prometheus
# for promtool (every metrics file the tests write must pass `promtool check
# metrics`).
set -euo pipefail
source "$(dirname "$0")/apt_missing.sh"

install_missing libgtest-dev libgmock-dev libbenchmark-dev python3-dev clang \
  libclang-rt-14-dev clang-format-14 chromium python3-venv patchelf dpkg-dev util-linux \
  python3-dask python3-distributed python3-pandas prometheus
