// How one value of the config format is read, printed and defaulted, by the C++ type of the
// member it is bound to (bool, int, integer seeds, numbers, enums, layer lists), and what the
// schema states of it. Internal to model/config.cpp; the tables that use it are there and in
// cpp/layers.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "core/json.hpp"
#include "core/status.hpp"
#include "layers/options.hpp"
#include "model/config.hpp"

namespace biaslab::config_detail {

using json = Json;
using Kind = SpecKind;

inline std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (std::size_t i = 0; i < items.size(); ++i) out += (i ? ", " : "") + items[i];
  return out;
}

inline const char* kind_name(Kind k) {
  switch (k) {
    case Kind::boolean:
      return "bool";
    case Kind::integer:
      return "int";
    case Kind::number:
      return "number";
    case Kind::enumeration:
      return "enum";
    case Kind::layers:
      return "layers";
    case Kind::branches:
      return "layer_lists";
    case Kind::grid:
      return "grid";
  }
  return "unknown";
}

inline int enum_count(const char* const* values) {
  int n = 0;
  while (values && values[n]) ++n;
  return n;
}


// ---------------------------------------------------------------------------------------------
// Per-kind operations, overloaded on the member's C++ type
// ---------------------------------------------------------------------------------------------

inline void set_default(bool& v, const Spec& s) { v = s.def != 0; }
inline void set_default(int& v, const Spec& s) { v = static_cast<int>(s.def); }
inline void set_default(std::uint64_t& v, const Spec& s) { v = static_cast<std::uint64_t>(s.def); }
inline void set_default(double& v, const Spec& s) { v = s.def; }
template <class E>
std::enable_if_t<std::is_enum_v<E>> set_default(E& v, const Spec& s) {
  v = static_cast<E>(static_cast<int>(s.def));
}
inline void set_default(std::vector<LayerConfig>& v, const Spec&) { v.clear(); }
inline void set_default(std::vector<std::vector<LayerConfig>>& v, const Spec&) { v.clear(); }
inline void set_default(std::vector<int>& v, const Spec&) { v.clear(); }

inline json value_json(bool v, const Spec&) { return v; }
inline json value_json(int v, const Spec&) { return v; }
inline json value_json(std::uint64_t v, const Spec&) { return v; }
inline json value_json(double v, const Spec&) { return v; }
template <class E>
std::enable_if_t<std::is_enum_v<E>, json> value_json(E v, const Spec& s) {
  const int i = static_cast<int>(v);
  if (i < 0 || i >= enum_count(s.values)) return nullptr;
  return s.values[i];
}
inline json value_json(const std::vector<LayerConfig>& v, const Spec&) {
  json a = json::array();
  for (const auto& l : v) a.push_back(layer_to_json(l));
  return a;
}
inline json value_json(const std::vector<std::vector<LayerConfig>>& v, const Spec& s) {
  json a = json::array();
  for (const auto& list : v) a.push_back(value_json(list, s));
  return a;
}

inline json value_json(const std::vector<int>& v, const Spec&) {
  if (v.empty()) return nullptr;
  json a = json::array();
  for (int x : v) a.push_back(x);
  return a;
}

template <class T>
bool is_default(const T& v, const Spec& s) {
  T d{};
  set_default(d, s);
  return v == d;
}

// ---------------------------------------------------------------------------------------------
// Parsing
// ---------------------------------------------------------------------------------------------

using Failure = std::optional<Error>;

// A short rendering of a JSON value for messages; never dumps containers (they may be huge or
// deeply nested) and never throws on invalid UTF-8.
inline std::string quote(const std::string& s) {
  constexpr std::size_t kMax = 40;
  std::string shown = s.size() > kMax ? s.substr(0, kMax) : s;
  std::string q = json(shown).dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > kMax) q.insert(q.size() - 1, "...");
  return q;
}

template <class J>
std::string describe(const J& v) {
  if (v.is_null()) return "null";
  if (v.is_boolean()) return v.template get<bool>() ? "true" : "false";
  if (v.is_number_float()) {
    const double d = v.template get<double>();
    if (std::isnan(d)) return "NaN";
    if (std::isinf(d)) return d > 0 ? "Infinity" : "-Infinity";
  }
  if (v.is_number()) return v.dump();
  if (v.is_string()) return quote(v.template get_ref<const std::string&>());
  if (v.is_array()) return "an array";
  if (v.is_object()) return "an object";
  return "an unsupported value";
}

inline std::string num(double d) {
  if (d == std::floor(d) && std::fabs(d) < 1e15) return std::to_string(static_cast<long long>(d));
  return json(d).dump();
}
inline std::string num(long long v) { return std::to_string(v); }

inline Error range_error(const std::string& path, const Spec& s, const std::string& shown, bool above) {
  if (s.min == s.max)
    return {path, "must be " + num(static_cast<long long>(s.min)) + ", got " + shown};
  if (!above)
    return {path, "must be at least " + num(static_cast<long long>(s.min)) + ", got " + shown};
  if (s.unit)
    return {path,
            shown + " exceeds the limit of " + num(static_cast<long long>(s.max)) + " " + s.unit};
  return {path, "must be at most " + num(static_cast<long long>(s.max)) + ", got " + shown};
}

// Reads an integral JSON number (2 and 2.0; not 2.5, true or "2") within [min, max].
template <class J>
Failure read_integer(const J& v, const Spec& s, const std::string& path, long long& out) {
  constexpr double kBig = 4611686018427387904.0;  // 2^62: beyond every range, safe to convert
  if (!v.is_number()) return Error{path, "must be an integer, got " + describe(v)};
  if (v.is_number_unsigned()) {
    const std::uint64_t u = v.template get<std::uint64_t>();
    if (static_cast<double>(u) >= kBig) return range_error(path, s, describe(v), true);
    out = static_cast<long long>(u);
  } else if (v.is_number_integer()) {
    out = v.template get<std::int64_t>();
  } else {
    const double d = v.template get<double>();
    if (!std::isfinite(d) || d != std::floor(d))
      return Error{path, "must be an integer, got " + describe(v)};
    if (std::fabs(d) >= kBig) return range_error(path, s, describe(v), d > 0);
    out = static_cast<long long>(d);
  }
  // Compare as integers: 2^53 + 1 would round to the limit as a double.
  if (out < static_cast<long long>(s.min)) return range_error(path, s, describe(v), false);
  if (out > static_cast<long long>(s.max)) return range_error(path, s, describe(v), true);
  return std::nullopt;
}

template <class J>
Failure parse_layers(std::vector<LayerConfig>& out, const J& v, const Spec& s,
                     const std::string& path, int depth);

template <class J>
Failure parse_value(bool& out, const J& v, const Spec&, const std::string& path, int) {
  if (!v.is_boolean()) return Error{path, "must be true or false, got " + describe(v)};
  out = v.template get<bool>();
  return std::nullopt;
}

template <class J>
Failure parse_value(int& out, const J& v, const Spec& s, const std::string& path, int) {
  long long x = 0;
  if (auto e = read_integer(v, s, path, x)) return e;
  out = static_cast<int>(x);
  return std::nullopt;
}

template <class J>
Failure parse_value(std::uint64_t& out, const J& v, const Spec& s, const std::string& path, int) {
  long long x = 0;
  if (auto e = read_integer(v, s, path, x)) return e;
  out = static_cast<std::uint64_t>(x);
  return std::nullopt;
}

template <class J>
Failure parse_value(double& out, const J& v, const Spec& s, const std::string& path, int) {
  if (!v.is_number()) return Error{path, "must be a number, got " + describe(v)};
  const double d = v.template get<double>();
  if (!std::isfinite(d)) return Error{path, "must be a finite number, got " + describe(v)};
  if (s.min_exclusive ? !(d > s.min) : d < s.min)
    return Error{path, std::string("must be ") + (s.min_exclusive ? "greater than " : "at least ") +
                           num(s.min) + ", got " + describe(v)};
  if (d > s.max) return Error{path, "must be at most " + num(s.max) + ", got " + describe(v)};
  out = d;
  return std::nullopt;
}

template <class J, class E>
std::enable_if_t<std::is_enum_v<E>, Failure> parse_value(E& out, const J& v, const Spec& s,
                                                         const std::string& path, int) {
  std::vector<std::string> names;
  for (int i = 0; i < enum_count(s.values); ++i) names.push_back(quote(s.values[i]));
  if (v.is_string()) {
    const auto& str = v.template get_ref<const std::string&>();
    for (int i = 0; i < enum_count(s.values); ++i) {
      if (str == s.values[i]) {
        out = static_cast<E>(i);
        return std::nullopt;
      }
    }
  }
  return Error{path, "must be one of " + join(names) + ", got " + describe(v)};
}

template <class J>
Failure parse_value(std::vector<LayerConfig>& out, const J& v, const Spec& s,
                    const std::string& path, int depth) {
  return parse_layers(out, v, s, path, depth);
}

// A list of layer lists: [[layer, ...], [layer, ...]], each list of at least one layer.
template <class J>
Failure parse_value(std::vector<std::vector<LayerConfig>>& out, const J& v, const Spec& s,
                    const std::string& path, int depth) {
  if (!v.is_array())
    return Error{path, "must be an array of layer lists, e.g. [[{\"type\": \"linear\"}], "
                       "[{\"type\": \"gelu\"}]], got " + describe(v)};
  if (v.size() < static_cast<std::size_t>(s.min))
    return Error{path, "must list at least " + std::to_string(static_cast<int>(s.min)) +
                           " layer list" + (s.min == 1 ? "" : "s") + ", got " +
                           std::to_string(v.size())};
  const Spec one = layer_list(s.name, s.help);  // each list: at least one layer
  out.clear();
  out.reserve(v.size());
  std::size_t i = 0;
  for (const auto& item : v) {
    std::vector<LayerConfig> list;
    if (auto e = parse_layers(list, item, one, path + "[" + std::to_string(i++) + "]", depth)) return e;
    out.push_back(std::move(list));
  }
  return std::nullopt;
}

// A grid: [H, W], two integers in [min, max], or null for none.
template <class J>
Failure parse_value(std::vector<int>& out, const J& v, const Spec& s, const std::string& path, int) {
  out.clear();
  if (v.is_null()) return std::nullopt;  // no grid, as when absent
  if (!v.is_array() || v.size() != 2) return Error{path, "must be [H, W], two positive integers, got " + describe(v)};
  std::size_t i = 0;
  for (const auto& item : v) {
    long long x = 0;
    if (auto e = read_integer(item, s, path + "[" + std::to_string(i++) + "]", x)) return e;
    out.push_back(static_cast<int>(x));
  }
  return std::nullopt;
}

// Everything of a Spec that the schema states.
inline json spec_json(const Spec& s, const std::string& name) {
  json o = json::object();
  o["name"] = name;
  o["type"] = kind_name(s.kind);
  switch (s.kind) {
    case Kind::boolean:
      o["default"] = s.def != 0;
      break;
    case Kind::integer:
      o["default"] = static_cast<long long>(s.def);
      o["min"] = static_cast<long long>(s.min);
      o["max"] = static_cast<long long>(s.max);
      break;
    case Kind::number:
      o["default"] = s.def;
      o[s.min_exclusive ? "exclusive_min" : "min"] = s.min;
      o["max"] = s.max;
      break;
    case Kind::enumeration: {
      json values = json::array();
      for (int i = 0; i < enum_count(s.values); ++i) values.push_back(s.values[i]);
      o["values"] = values;
      o["default"] = s.values[static_cast<int>(s.def)];
      break;
    }
    case Kind::grid:
      o["default"] = nullptr;
      o["min"] = static_cast<long long>(s.min);
      o["max"] = static_cast<long long>(s.max);
      break;
    case Kind::layers:
    case Kind::branches:
      o["required"] = true;
      o["min_items"] = static_cast<long long>(s.min);
      break;
  }
  if (s.unit) o["unit"] = s.unit;
  if (s.default_note) {
    o["default"] = nullptr;
    o["default_note"] = s.default_note;
  }
  o["help"] = s.help;
  if (s.needs_flag) o["requires"] = s.needs_flag;
  return o;
}

}  // namespace biaslab::config_detail
