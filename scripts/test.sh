#!/usr/bin/env bash
# All tests: install what is missing, build, run the doctest suite and the CLI checks (ctest).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
ctest --test-dir build --output-on-failure -j"$(nproc)"
