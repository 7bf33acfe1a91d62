#!/usr/bin/env bash
# Installs what biaslab needs from Debian's packages, skipping what is already there.
#   scripts/install-deps.sh [native] [web] [torch] [fuzz]    (no argument: all four)
#   native: compiler, CMake, Eigen, doctest, nlohmann-json   (the core, CLI and C++ tests)
#   web:    Emscripten, Node.js + npm, Chromium             (the wasm module, the page, its tests)
#   torch:  PyTorch, NumPy and pyflakes3                   (the parity suite against torch, the
#                                                          exported script's Python: tests and lint)
#   fuzz:   clang 14 and its runtime (libFuzzer, ASan, UBSan)  (scripts/fuzz.sh, fuzz/)
set -euo pipefail

groups=("$@")
[ ${#groups[@]} -eq 0 ] && groups=(native web torch fuzz)

want=()
for g in "${groups[@]}"; do
  case "$g" in
    native) want+=(cmake g++ make libeigen3-dev doctest-dev nlohmann-json3-dev) ;;
    web)
      # hugo: the embed test builds a small site; a CJK font: the articles' titles in screenshots
      want+=(emscripten chromium hugo fonts-wqy-microhei)
      # Node 20 may come from the machine image; only fall back to Debian's when it is absent.
      command -v node >/dev/null || want+=(nodejs)
      command -v npm >/dev/null || want+=(npm)
      ;;
    torch) want+=(python3-torch python3-numpy python3-torchvision pyflakes3) ;;
    fuzz) want+=(clang-14 libclang-rt-14-dev cmake make libeigen3-dev nlohmann-json3-dev) ;;
    *) echo "unknown group '$g' (native, web, torch, fuzz)" >&2; exit 2 ;;
  esac
done

missing=()
for pkg in "${want[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "installing: ${missing[*]}"
sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "need root (or sudo) to install: ${missing[*]}" >&2; exit 1; }
  sudo_cmd=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
