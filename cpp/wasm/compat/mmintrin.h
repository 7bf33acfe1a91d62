// wasm build only. Eigen 3.4.0 includes the x86 MMX header <mmintrin.h> when it sees __SSE2__
// (Eigen issue 2514); Emscripten's SSE emulation has no MMX, and Eigen uses no MMX intrinsic.
// This stub shadows clang's x86-only header so Eigen's SSE path compiles with -msimd128 -msse3.
#pragma once
#include <xmmintrin.h>
