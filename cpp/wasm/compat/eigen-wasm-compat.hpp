// wasm build only, force-included (-include) before every translation unit.
//
// clang reports itself as GCC 4.2, so Eigen 3.4.0 takes its "GCC < 6.3" branch in the SSE
// pmin/pmax and emits x86 inline assembly (minps/maxps), which cannot compile to wasm (Eigen
// issue 2514; fixed in 3.4.1). Eigen compares EIGEN_COMP_GNUC only after including Macros.h,
// so raising it here, once Macros.h has defined it, sends pmin/pmax to the _mm_min_ps intrinsic
// path, which Emscripten maps to wasm SIMD. The only other comparison outside Macros.h that
// this moves is ArithmeticSequence.h (">= 48": its C++11 path, the one real GCC takes).
#pragma once
#include <Eigen/src/Core/util/Macros.h>
#undef EIGEN_COMP_GNUC
#define EIGEN_COMP_GNUC 63
