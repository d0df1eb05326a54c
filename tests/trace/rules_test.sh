#!/usr/bin/env bash
# Runs a Python test script (Bazel runs sh_tests from the runfiles root).
exec python3 "$@"
