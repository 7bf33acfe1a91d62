#!/usr/bin/env bash
# The main job: install what is missing, build the CLI, the wasm module and the page, show the
# default preset's report in the terminal, then serve the page on localhost.
#   scripts/run.sh [PORT]        (default 8000; Ctrl-C stops the server)
set -euo pipefail
cd "$(dirname "$0")/.."
port="${1:-8000}"
scripts/install-deps.sh native web
scripts/build.sh
./build/biaslab analyze --preset default --no-sweep
scripts/build-web.sh
echo
echo "biaslab is served at http://127.0.0.1:${port}/  (Ctrl-C to stop)"
exec python3 -m http.server "$port" --bind 127.0.0.1 --directory web/dist
