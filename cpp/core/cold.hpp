// BIASLAB_COLD marks code that runs a few times per analysis and mostly builds the report
// (JSON, text), not numbers: the wasm build compiles it for size (clang's minsize), which keeps
// the page's download small at no measurable cost. Never on numerical kernels: Eigen code
// compiled for size leaves its small functions un-inlined (about 40x slower). Native builds
// are unaffected.
#pragma once

#if defined(__EMSCRIPTEN__) && defined(__clang__)
#define BIASLAB_COLD __attribute__((minsize))
#else
#define BIASLAB_COLD
#endif
