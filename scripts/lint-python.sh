#!/usr/bin/env bash
# Checks the repository's Python without running it: `python3 -m py_compile` and pyflakes3 (Debian
# pyflakes3; scripts/install-deps.sh torch) over the exported script's modules
# (python/biaslab_torch/), the torch test suite (tests/torch/), tests/golden/ and
# fuzz/make_corpus.py.
# ctest runs it as python_lint. Exit status 77 (skipped) without pyflakes3.
#   PYTHON=/usr/bin/python3 scripts/lint-python.sh
set -euo pipefail
cd "$(dirname "$0")/.."
python="${PYTHON:-python3}"
command -v pyflakes3 >/dev/null || { echo "skipped: pyflakes3 is not installed (Debian: apt-get install pyflakes3)"; exit 77; }
files=(python/biaslab_torch/*.py tests/torch/*.py tests/golden/golden.py tests/golden/test_compare.py fuzz/make_corpus.py)
cache="$(mktemp -d "${TMPDIR:-/tmp}/biaslab-pycache.XXXXXX")"
trap 'rm -rf "$cache"' EXIT
# The bytecode goes to a temporary directory, not into __pycache__/ beside the sources.
PYTHONPYCACHEPREFIX="$cache" "$python" -m py_compile "${files[@]}"
pyflakes3 "${files[@]}"
echo "python lint: ${#files[@]} files compile ($("$python" --version 2>&1)) and pass pyflakes3"
