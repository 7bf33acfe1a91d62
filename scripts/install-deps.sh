#!/usr/bin/env bash
# Installs what biaslab needs from Debian's packages, skipping what is already there.
# Usage: scripts/install-deps.sh [native]   (native: compiler, CMake, Eigen, doctest, nlohmann-json)
set -euo pipefail

want=(cmake g++ make libeigen3-dev doctest-dev nlohmann-json3-dev)
# The torch parity suite (tests/torch/) runs exported scripts with Debian's PyTorch.
want+=(python3-torch python3-numpy)

missing=()
for pkg in "${want[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "installing: ${missing[*]}"
sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "need root (or sudo) to install: ${missing[*]}" >&2; exit 1; }
  sudo_cmd=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
