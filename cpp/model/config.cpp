// The experiment config, format v1. Everything here is driven by two tables: the options each
// layer kind lists (cpp/layers, through the registry) and kTopFields (the top-level fields).
// Parsing, printing, defaults, equality and the schema JSON all walk those tables; no other list
// of options exists.
#include "model/config.hpp"

#include "layers/layer.hpp"
#include "layers/options.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <iterator>
#include <optional>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

namespace biaslab {
namespace {

using json = Json;

// ---------------------------------------------------------------------------------------------
// The schema tables
// ---------------------------------------------------------------------------------------------

using Kind = SpecKind;

const char* kind_name(Kind k) {
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
  }
  return "unknown";
}

constexpr const char* kDTypes[] = {"float32", "float64", nullptr};

// The top-level fields. A dotted name lives in a nested object ("shape.batch").
using TopBinding = std::variant<int ExperimentConfig::*, std::uint64_t ExperimentConfig::*,
                                DType ExperimentConfig::*,
                                std::vector<LayerConfig> ExperimentConfig::*, int Shape::*>;

struct TopField {
  Spec spec;
  TopBinding member;
};

constexpr double kMaxSeed = 9007199254740992.0;  // 2^53: every seed survives a JS number

constexpr TopField kTopFields[] = {
    {integer("version", 1, 1, 1, nullptr, "Format version; this is version 1."),
     &ExperimentConfig::version},
    {integer("seed", 0, 0, kMaxSeed, nullptr, "Seed of the random weights and inputs."),
     &ExperimentConfig::seed},
    {choice("dtype", kDTypes, 1, "Floating-point type of the computation."),
     &ExperimentConfig::dtype},
    {integer("shape.batch", 2, 1, Limits::max_batch, "sequences", "Sequences per batch."),
     &Shape::batch},
    {integer("shape.tokens", 16, 1, Limits::max_tokens, "tokens", "Tokens per sequence."),
     &Shape::tokens},
    {integer("shape.features", 64, 1, Limits::max_features, "features",
             "Width of the input, in features per token."),
     &Shape::features},
    {layer_list("layers", "The stack of layers, applied in order."), &ExperimentConfig::layers},
};

// ---------------------------------------------------------------------------------------------
// Table look-ups
// ---------------------------------------------------------------------------------------------

const LayerOption* find_option(LayerType t, const std::string& name) {
  for (const auto& o : layer_kind(t).options)
    if (name == o.spec.name) return &o;
  return nullptr;
}

const TopField* find_top_field(const std::string& name) {
  for (const auto& f : kTopFields)
    if (name == f.spec.name) return &f;
  return nullptr;
}

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (std::size_t i = 0; i < items.size(); ++i) out += (i ? ", " : "") + items[i];
  return out;
}

std::string known_types() {
  std::vector<std::string> names;
  for (const LayerKind* k : layer_kinds()) names.push_back(k->name);
  return join(names);
}

std::vector<std::string> option_names(LayerType t) {
  std::vector<std::string> names;
  for (const auto& o : layer_kind(t).options) names.push_back(o.spec.name);
  return names;
}

// The keys one JSON object of the top level may hold: prefix "" is the document itself,
// "shape" the shape object. Derived from the dotted names of kTopFields.
std::vector<std::string> top_keys(const std::string& prefix) {
  std::vector<std::string> keys;
  for (const auto& f : kTopFields) {
    std::string name = f.spec.name;
    if (!prefix.empty()) {
      if (name.compare(0, prefix.size() + 1, prefix + ".") != 0) continue;
      name = name.substr(prefix.size() + 1);
    }
    name = name.substr(0, name.find('.'));
    bool seen = false;
    for (const auto& k : keys) seen = seen || k == name;
    if (!seen) keys.push_back(name);
  }
  return keys;
}

bool is_group(const std::string& dotted_prefix) {
  for (const auto& f : kTopFields)
    if (std::string(f.spec.name).compare(0, dotted_prefix.size() + 1, dotted_prefix + ".") == 0)
      return true;
  return false;
}

int enum_count(const char* const* values) {
  int n = 0;
  while (values && values[n]) ++n;
  return n;
}

// Access to a bound member.
template <class T>
T& ref(LayerConfig& l, T LayerConfig::*m) {
  return l.*m;
}
template <class T>
const T& ref(const LayerConfig& l, T LayerConfig::*m) {
  return l.*m;
}
template <class T>
T& ref(ExperimentConfig& c, T ExperimentConfig::*m) {
  return c.*m;
}
template <class T>
const T& ref(const ExperimentConfig& c, T ExperimentConfig::*m) {
  return c.*m;
}
int& ref(ExperimentConfig& c, int Shape::*m) { return c.shape.*m; }
const int& ref(const ExperimentConfig& c, int Shape::*m) { return c.shape.*m; }

// ---------------------------------------------------------------------------------------------
// Per-kind operations, overloaded on the member's C++ type
// ---------------------------------------------------------------------------------------------

void set_default(bool& v, const Spec& s) { v = s.def != 0; }
void set_default(int& v, const Spec& s) { v = static_cast<int>(s.def); }
void set_default(std::uint64_t& v, const Spec& s) { v = static_cast<std::uint64_t>(s.def); }
void set_default(double& v, const Spec& s) { v = s.def; }
template <class E>
std::enable_if_t<std::is_enum_v<E>> set_default(E& v, const Spec& s) {
  v = static_cast<E>(static_cast<int>(s.def));
}
void set_default(std::vector<LayerConfig>& v, const Spec&) { v.clear(); }

json value_json(bool v, const Spec&) { return v; }
json value_json(int v, const Spec&) { return v; }
json value_json(std::uint64_t v, const Spec&) { return v; }
json value_json(double v, const Spec&) { return v; }
template <class E>
std::enable_if_t<std::is_enum_v<E>, json> value_json(E v, const Spec& s) {
  const int i = static_cast<int>(v);
  if (i < 0 || i >= enum_count(s.values)) return nullptr;
  return s.values[i];
}
json value_json(const std::vector<LayerConfig>& v, const Spec&) {
  json a = json::array();
  for (const auto& l : v) a.push_back(layer_to_json(l));
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
std::string quote(const std::string& s) {
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

std::string num(double d) {
  if (d == std::floor(d) && std::fabs(d) < 1e15) return std::to_string(static_cast<long long>(d));
  return json(d).dump();
}
std::string num(long long v) { return std::to_string(v); }

Error range_error(const std::string& path, const Spec& s, const std::string& shown, bool above) {
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

// One layer object at `path`; `depth` is the residual nesting of the list holding it.
template <class J>
Failure parse_layer(LayerConfig& out, const J& v, const std::string& path, int depth) {
  if (!v.is_object())
    return Error{path, "a layer must be an object with a \"type\", got " + describe(v)};
  const auto type_it = v.find("type");
  if (type_it == v.end())
    return Error{path + ".type", "is missing; every layer needs a type, one of " + known_types()};
  if (!type_it->is_string())
    return Error{path + ".type", "must be a layer type name, one of " + known_types() + ", got " +
                                     describe(*type_it)};
  const LayerKind* type = find_layer_kind(type_it->template get_ref<const std::string&>());
  if (!type)
    return Error{path + ".type", "unknown layer type " + describe(*type_it) +
                                     "; the known types are " + known_types()};
  out = make_layer(type->type);
  for (const auto& item : v.items()) {
    const std::string& key = item.key();
    if (key == "type") continue;
    const std::string key_path = path + "." + key;
    const LayerOption* opt = find_option(type->type, key);
    if (!opt) {
      const auto names = option_names(type->type);
      return Error{key_path,
                   "unknown option " + quote(key) + " for " + type->name + "; " +
                       (names.empty() ? std::string(type->name) + " takes no options"
                                      : std::string(type->name) + " takes " + join(names))};
    }
    Failure e = std::visit(
        [&](auto m) {
          return parse_value(ref(out, m), item.value(), opt->spec, key_path, depth + 1);
        },
        opt->member);
    if (e) return e;
  }
  for (const auto& opt : type->options) {
    if (opt.spec.kind == Kind::layers && v.find(opt.spec.name) == v.end())
      return Error{path + "." + opt.spec.name, std::string("is missing; a ") + type->name +
                                                   " needs a " + opt.spec.name +
                                                   " of at least one layer"};
  }
  return std::nullopt;
}

template <class J>
Failure parse_layers(std::vector<LayerConfig>& out, const J& v, const Spec& s,
                     const std::string& path, int depth) {
  if (depth > Limits::max_depth)
    return Error{path, "residual nesting depth " + std::to_string(depth) +
                           " exceeds the limit of " + std::to_string(Limits::max_depth) +
                           " levels"};
  if (!v.is_array()) return Error{path, "must be an array of layers, got " + describe(v)};
  if (v.size() < static_cast<std::size_t>(s.min))
    return Error{path, "must list at least one layer, got an empty array"};
  out.clear();
  out.reserve(v.size());
  std::size_t i = 0;
  for (const auto& item : v) {
    LayerConfig l;
    if (auto e = parse_layer(l, item, path + "[" + std::to_string(i++) + "]", depth)) return e;
    out.push_back(std::move(l));
  }
  return std::nullopt;
}

// The keys of one top-level object (prefix "" for the document, "shape" for the shape), in
// document order.
template <class J>
Failure parse_top_object(ExperimentConfig& c, const J& obj, const std::string& prefix) {
  for (const auto& item : obj.items()) {
    const std::string& key = item.key();
    const std::string path = prefix.empty() ? key : prefix + "." + key;
    if (is_group(path)) {
      if (!item.value().is_object())
        return Error{path, "must be an object with " + join(top_keys(path)) + ", got " +
                               describe(item.value())};
      if (auto e = parse_top_object(c, item.value(), path)) return e;
      continue;
    }
    const TopField* f = find_top_field(path);
    if (!f)
      return Error{
          path, "unknown field " + quote(key) + "; " +
                    (prefix.empty() ? std::string("the top-level fields are ") : prefix + " has ") +
                    join(top_keys(prefix))};
    Failure e = std::visit(
        [&](auto m) { return parse_value(ref(c, m), item.value(), f->spec, path, 0); }, f->member);
    if (e) return e;
  }
  return std::nullopt;
}

// ---------------------------------------------------------------------------------------------
// Semantic validation: widths through the stack and the limits
// ---------------------------------------------------------------------------------------------

struct Walk {
  const Shape& shape;
  long long rows = 0;        // batch * tokens
  long long layers = 0;      // counted through residual bodies
  long long parameters = 0;  // learned weights and biases
};

Failure check_activations(const Walk& w, long long width, const std::string& path,
                          const std::string& what) {
  const long long activations = w.rows * width;
  if (activations > Limits::max_activations)
    return Error{path, "batch * tokens * " + what + " = " + std::to_string(w.shape.batch) + " * " +
                           std::to_string(w.shape.tokens) + " * " + std::to_string(width) + " = " +
                           std::to_string(activations) + " exceeds the limit of " +
                           std::to_string(Limits::max_activations) + " activations"};
  return std::nullopt;
}

Failure check_stack(const std::vector<LayerConfig>& layers, const std::string& path, int& width,
                    Walk& w) {
  std::vector<ParamSpec> declared;
  for (std::size_t i = 0; i < layers.size(); ++i) {
    const LayerConfig& l = layers[i];
    const LayerKind& kind = layer_kind(l.type);
    const std::string lp = path + "[" + std::to_string(i) + "]";
    if (++w.layers > Limits::max_layers)
      return Error{lp, "the stack has more than " + std::to_string(Limits::max_layers) +
                           " layers (counted through residual bodies)"};
    const int in = width;
    const int out = kind.out_width ? kind.out_width(l, in) : in;
    if (out != in)
      if (auto e = check_activations(w, out, lp + ".out_features", "out_features")) return e;
    if (kind.check)
      if (auto e = kind.check(l, in, lp)) return e;
    // Parameters as the kind declares them (the network builds exactly these).
    declared.clear();
    if (kind.params) kind.params(l, in, out, declared);
    for (const ParamSpec& p : declared)
      if (p.role != ParamRole::buffer) w.parameters += static_cast<long long>(p.rows) * p.cols;
    if (kind.has_body) {
      int inner = width;
      if (auto e = check_stack(l.body, lp + ".body", inner, w)) return e;
      if (inner != width)
        return Error{lp + ".body", "residual body changes the width from " +
                                       std::to_string(width) + " to " + std::to_string(inner)};
    }
    width = out;
    if (w.parameters > Limits::max_parameters)
      return Error{lp, "the stack reaches " + std::to_string(w.parameters) +
                           " parameters here, over the limit of " +
                           std::to_string(Limits::max_parameters) + " parameters"};
  }
  return std::nullopt;
}

Failure check_semantics(const ExperimentConfig& c) {
  Walk w{c.shape};
  w.rows = static_cast<long long>(c.shape.batch) * c.shape.tokens;
  if (w.rows > Limits::max_tokens_total)
    return Error{"shape", "batch * tokens = " + std::to_string(c.shape.batch) + " * " +
                              std::to_string(c.shape.tokens) + " = " + std::to_string(w.rows) +
                              " exceeds the limit of " + std::to_string(Limits::max_tokens_total) +
                              " tokens in total"};
  if (auto e = check_activations(w, c.shape.features, "shape", "features")) return e;
  int width = c.shape.features;
  return check_stack(c.layers, "layers", width, w);
}

template <class J>
Result<ExperimentConfig> parse_document(const J& j) {
  try {
    if (!j.is_object()) return Error{"", "a config must be a JSON object, got " + describe(j)};
    ExperimentConfig c;
    for (const auto& f : kTopFields)
      std::visit([&](auto m) { set_default(ref(c, m), f.spec); }, f.member);
    if (auto e = parse_top_object(c, j, "")) return *e;
    for (const auto& f : kTopFields) {
      if (f.spec.kind != Kind::layers) continue;
      const std::string name = f.spec.name;  // required lists are top-level names
      if (j.find(name) == j.end())
        return Error{name, "is missing; a config needs at least one layer"};
    }
    if (auto e = check_semantics(c)) return *e;
    return c;
  } catch (const std::exception& e) {
    return Error{"", std::string("the config could not be read: ") + e.what()};
  } catch (...) {
    return Error{"", "the config could not be read"};
  }
}

// Everything of a Spec that the schema states.
json spec_json(const Spec& s, const std::string& name) {
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
    case Kind::layers:
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
  return o;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Public API
// ---------------------------------------------------------------------------------------------

const char* layer_type_name(LayerType t) { return layer_kind(t).name; }

const char* dtype_name(DType t) {
  const int i = static_cast<int>(t);
  return i >= 0 && i < enum_count(kDTypes) ? kDTypes[i] : "unknown";
}

LayerConfig make_layer(LayerType t) {
  LayerConfig l;
  l.type = t;
  for (const auto& o : layer_kind(t).options)
    std::visit([&](auto m) { set_default(ref(l, m), o.spec); }, o.member);
  return l;
}

Result<ExperimentConfig> parse_config(const Json& j) { return parse_document(j); }

// The deepest JSON nesting the parser builds. nlohmann's DOM builder copies an object's earlier
// members whenever the object grows (ordered_json keeps them in a std::vector of
// pair<const string, json>, which cannot be moved), and that copy recurses once per nesting
// level: `{"seed": [[[[...]]]], "layers": ...}` a few hundred thousand levels deep overflowed the
// stack (fuzz/fuzz_config.cpp on a crafted input). So deeper containers are dropped while
// parsing. No valid config comes near the limit (residual blocks nested 8 deep are 20 levels),
// and the checks reject any document that has one at a shallower level, with their usual message.
constexpr int kMaxNesting = 64;

Result<ExperimentConfig> parse_config_text(const std::string& text) {
  json j;
  bool too_deep = false;
  const json::parser_callback_t drop_too_deep = [&](int depth, json::parse_event_t event, json&) {
    if (depth < kMaxNesting) return true;
    const bool opens = event == json::parse_event_t::object_start ||
                       event == json::parse_event_t::array_start;
    too_deep = too_deep || opens;
    return !opens;
  };
  try {
    j = json::parse(text, drop_too_deep);
  } catch (const Json::parse_error& e) {
    // Position from the byte offset; the detail is what follows "parse error at ...: ".
    std::size_t line = 1, column = 0;
    const std::size_t end = e.byte == 0 ? 0 : std::min(e.byte - 1, text.size());
    for (std::size_t i = 0; i < end; ++i) {
      if (text[i] == '\n') {
        ++line;
        column = 0;
      } else {
        ++column;
      }
    }
    std::string detail = e.what();
    const std::size_t at = detail.find("parse error");
    const std::size_t colon = at == std::string::npos ? at : detail.find(": ", at);
    if (colon != std::string::npos) detail = detail.substr(colon + 2);
    if (detail.size() > 200) detail = detail.substr(0, 200) + "...";
    return Error{"", "invalid JSON at line " + std::to_string(line) + ", column " +
                         std::to_string(column + 1) + ": " + detail};
  } catch (const std::exception& e) {
    std::string detail = e.what();
    const std::size_t bracket = detail.find("] ");
    if (bracket != std::string::npos) detail = detail.substr(bracket + 2);
    return Error{"", "invalid JSON: " + detail};
  } catch (...) {
    return Error{"", "invalid JSON"};
  }
  Result<ExperimentConfig> c = parse_document(j);
  // Unreachable, as argued at kMaxNesting; kept so a dropped container can never pass unseen.
  if (c && too_deep)
    return Error{"", "the JSON nests deeper than " + std::to_string(kMaxNesting) + " levels"};
  return c;
}

Json layer_to_json(const LayerConfig& l) {
  json j = json::object();
  j["type"] = layer_type_name(l.type);
  for (const auto& o : layer_kind(l.type).options) {
    std::visit(
        [&](auto m) {
          const auto& v = ref(l, m);
          if (!is_default(v, o.spec)) j[o.spec.name] = value_json(v, o.spec);
        },
        o.member);
  }
  return j;
}

Json config_to_json(const ExperimentConfig& c) {
  json j = json::object();
  for (const auto& f : kTopFields) {
    const std::string name = f.spec.name;
    const std::size_t dot = name.find('.');
    json& slot = dot == std::string::npos ? j[name] : j[name.substr(0, dot)][name.substr(dot + 1)];
    std::visit([&](auto m) { slot = value_json(ref(c, m), f.spec); }, f.member);
  }
  return j;
}

Json config_schema() {
  json s = json::object();
  s["version"] = 1;
  json fields = json::array();
  for (const auto& f : kTopFields) fields.push_back(spec_json(f.spec, f.spec.name));
  s["fields"] = fields;
  json types = json::array();
  for (const LayerKind* t : layer_kinds()) {
    json options = json::array();
    for (const auto& o : t->options) options.push_back(spec_json(o.spec, o.spec.name));
    types.push_back({{"name", t->name}, {"help", t->help}, {"options", options}});
  }
  s["layer_types"] = types;
  s["limits"] = {
      {"max_batch", Limits::max_batch},
      {"max_tokens", Limits::max_tokens},
      {"max_features", Limits::max_features},
      {"max_tokens_total", Limits::max_tokens_total},
      {"max_activations", Limits::max_activations},
      {"max_layers", Limits::max_layers},
      {"max_depth", Limits::max_depth},
      {"max_parameters", Limits::max_parameters},
      {"max_num_heads", Limits::max_num_heads},
  };
  return s;
}

bool operator==(const LayerConfig& a, const LayerConfig& b) {
  if (a.type != b.type) return false;
  for (const auto& o : layer_kind(a.type).options) {
    const bool same = std::visit([&](auto m) { return ref(a, m) == ref(b, m); }, o.member);
    if (!same) return false;
  }
  return true;
}

bool operator==(const ExperimentConfig& a, const ExperimentConfig& b) {
  for (const auto& f : kTopFields) {
    const bool same = std::visit([&](auto m) { return ref(a, m) == ref(b, m); }, f.member);
    if (!same) return false;
  }
  return true;
}

}  // namespace biaslab
