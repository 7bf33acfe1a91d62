#!/usr/bin/env bash
# The main job: install what is missing, build, and run the CLI on the default preset.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
./build/biaslab analyze --preset "${1:-default}"
