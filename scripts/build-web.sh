#!/bin/sh
# Builds the browser version: the wasm module (build-wasm/) and the static page (web/dist/).
#   scripts/build-web.sh            both
#   scripts/build-web.sh wasm       only the module
#   scripts/build-web.sh page       only the page (needs build-wasm/ from an earlier run)
# web/dist/ is one self-contained folder: serve it as-is from any static host.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
what=${1:-all}

# Debian's em++ needs its node-acorn for -O2 and above (toolchain.md).
export NODE_PATH="${NODE_PATH:-/usr/share/nodejs}"

build_wasm() {
  # Emscripten's toolchain file hides the host's package configs: name Eigen's explicitly, and
  # use our own nlohmann_json config (Debian's would add /usr/include to the wasm include path).
  eigen_dir=${EIGEN3_DIR:-$(dirname "$(find /usr/share /usr/lib /usr/local -name Eigen3Config.cmake 2>/dev/null | head -n 1)")}
  emcmake cmake -S "$root" -B "$root/build-wasm" -DCMAKE_BUILD_TYPE=Release \
    -DEigen3_DIR="$eigen_dir" -Dnlohmann_json_DIR="$root/cpp/wasm/cmake"
  cmake --build "$root/build-wasm" -j"$(nproc)"
}

build_page() {
  cd "$root/web"
  if [ ! -d node_modules ]; then
    npm ci --no-audit --no-fund
  fi
  BIASLAB_WASM_DIR="$root/build-wasm/cpp/wasm" npm run build
}

case "$what" in
  wasm) build_wasm ;;
  page) build_page ;;
  all) build_wasm; build_page ;;
  *) echo "usage: $0 [all|wasm|page]" >&2; exit 2 ;;
esac
