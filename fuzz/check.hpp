// FUZZ_CHECK: a property every input must keep. A failure prints what broke and aborts, which
// libFuzzer reports as a crash with the input saved (a finding).
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>

#define FUZZ_CHECK(cond, what)                                                           \
  do {                                                                                   \
    if (!(cond)) {                                                                       \
      std::fprintf(stderr, "FUZZ_CHECK failed at %s:%d: %s\n  %s\n", __FILE__, __LINE__, \
                   #cond, std::string(what).c_str());                                    \
      std::abort();                                                                      \
    }                                                                                    \
  } while (0)
