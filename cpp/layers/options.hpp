// The schema's vocabulary: how one option of the config format is described (Spec) and bound to
// its member (LayerOption). Each layer kind lists its options in its own file (cpp/layers/*.cpp);
// the config parser, printer, equality, defaults and the `schema` JSON walk those lists.
#pragma once

#include <cstdint>
#include <variant>
#include <vector>

#include "model/config.hpp"

namespace biaslab {

enum class SpecKind { boolean, integer, number, enumeration, layers, branches, grid };

// Describes one field of the format, independent of where it is stored.
struct Spec {
  const char* name;
  SpecKind kind;
  double def;                 // bool: 0/1; enum: index into values; layers, branches: unused
  double min, max;            // int and number; layers: the least number of layers; branches:
                              // the least number of lists (each of at least one layer)
  bool min_exclusive;         // number: min itself is rejected (eps > 0)
  const char* const* values;  // enum: names in the order of the C++ enum, nullptr-terminated
  const char* unit;           // int limits: "5000 exceeds the limit of 1024 tokens"
  const char* default_note;   // the default is not a literal value (out_features: the input width)
  const char* help;           // one sentence for `biaslab schema` and the web form
  // A boolean option of the same layer that must be true for this one to be set (rotary_dim
  // needs rope); the parser refuses a non-default value without it and the form disables it.
  const char* needs_flag = nullptr;
};

// `s`, valid only when the layer's boolean option `flag` is true.
constexpr Spec needs(Spec s, const char* flag) {
  s.needs_flag = flag;
  return s;
}

constexpr Spec flag(const char* name, bool def, const char* help) {
  return {name, SpecKind::boolean, def ? 1.0 : 0.0, 0, 0, false, nullptr, nullptr, nullptr, help};
}
constexpr Spec integer(const char* name, double def, double min, double max, const char* unit,
                       const char* help, const char* default_note = nullptr) {
  return {name, SpecKind::integer, def, min, max, false, nullptr, unit, default_note, help};
}
constexpr Spec number(const char* name, double def, double min, bool min_exclusive, double max,
                      const char* help) {
  return {name, SpecKind::number, def, min, max, min_exclusive, nullptr, nullptr, nullptr, help};
}
constexpr Spec choice(const char* name, const char* const* values, int def, const char* help) {
  return {name, SpecKind::enumeration, static_cast<double>(def), 0, 0, false, values, nullptr,
          nullptr, help};
}
constexpr Spec layer_list(const char* name, const char* help) {
  return {name, SpecKind::layers, 0, 1, 0, false, nullptr, nullptr, nullptr, help};
}
// A list of layer lists (parallel's branches), at least `min` of them.
constexpr Spec layer_lists(const char* name, int min, const char* help) {
  return {name, SpecKind::branches, 0, static_cast<double>(min), 0, false, nullptr, nullptr, nullptr, help};
}

// A grid [H, W] of positive integers up to `max`, or absent (shape.grid).
constexpr Spec grid(const char* name, double max, const char* help) {
  return {name, SpecKind::grid, 0, 1, max, false, nullptr, nullptr, nullptr, help};
}

// The member of LayerConfig an option is stored in.
using LayerBinding = std::variant<bool LayerConfig::*, int LayerConfig::*, double LayerConfig::*,
                                  BatchNormMode LayerConfig::*, GeluApprox LayerConfig::*,
                                  RopeStyle LayerConfig::*, QkNorm LayerConfig::*, GluActivation LayerConfig::*,
                                  ConvPadding LayerConfig::*,
                                  std::vector<LayerConfig> LayerConfig::*,
                                  std::vector<std::vector<LayerConfig>> LayerConfig::*>;

struct LayerOption {
  Spec spec;
  LayerBinding member;
};

constexpr const char* kEpsHelp = "Added to the variance before the square root, for stability.";

}  // namespace biaslab
