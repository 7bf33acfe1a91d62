// Deterministic random numbers, identical on every platform (native and wasm).
//
// std::normal_distribution is implementation-defined (libstdc++ and Emscripten's libc++ differ),
// so draws are made here from SplitMix64. Each parameter gets its own stream, keyed by the seed
// and its dotted name, so adding a layer never changes the weights of the others.
#pragma once

#include <cmath>
#include <cstdint>
#include <string_view>

namespace biaslab {

class Rng {
 public:
  explicit Rng(std::uint64_t seed) : state_(seed) {}
  // A stream keyed by (seed, name): FNV-1a of the name mixed into the seed.
  Rng(std::uint64_t seed, std::string_view name) : state_(seed ^ 0x9e3779b97f4a7c15ULL) {
    std::uint64_t h = 1469598103934665603ULL;
    for (unsigned char c : name) h = (h ^ c) * 1099511628211ULL;
    state_ ^= h;
    next();
  }

  std::uint64_t next() {
    std::uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  // Uniform in [0, 1), 53 random bits.
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }
  // Standard normal by Box-Muller (both values used).
  double normal() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    double u1 = uniform(), u2 = uniform();
    if (u1 < 1e-300) u1 = 1e-300;
    const double r = std::sqrt(-2.0 * std::log(u1));
    const double a = 6.283185307179586 * u2;
    spare_ = r * std::sin(a);
    has_spare_ = true;
    return r * std::cos(a);
  }

 private:
  std::uint64_t state_;
  double spare_ = 0.0;
  bool has_spare_ = false;
};

}  // namespace biaslab
