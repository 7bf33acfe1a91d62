#!/usr/bin/env bash
# All tests: install what is missing, build, then run the C++ suites, the CLI checks, the torch
# suites and the Python lint (ctest), the golden reports again on the page's wasm engine, the Node
# tests of the wasm module and the browser tests in headless Chromium (web/: npm test),
# then a short fuzzing run of the core (scripts/fuzz.sh: 20 s per target, fails on any finding).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
ctest --test-dir build --output-on-failure -j"$(nproc)"
scripts/build-web.sh wasm
# The page's engine against the golden reports the CLI is checked against (tests/golden).
BIASLAB_WASM_DIR="$PWD/build-wasm/cpp/wasm" python3 tests/golden/golden.py check web/test/support/engine-cli.mjs --page-engine
(cd web && { [ -d node_modules ] || npm ci --no-audit --no-fund; } && BIASLAB_WASM_DIR="$PWD/../build-wasm/cpp/wasm" npm test)
scripts/fuzz.sh 20
