#!/usr/bin/env bash
# Runs rules_test.py (Bazel's sh_test runs it from the runfiles root).
exec python3 "$1"
