// The experiment config, format v1. Everything here is driven by two tables: the options each
// layer kind lists (cpp/layers, through the registry) and kTopFields (the top-level fields).
// Parsing, printing, defaults, equality and the schema JSON all walk those tables; no other list
// of options exists.
#include "model/config.hpp"

#include "core/cold.hpp"

#include "layers/attention.hpp"
#include "layers/layer.hpp"
#include "layers/options.hpp"
#include "model/config_values.hpp"

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

using namespace config_detail;

// ---------------------------------------------------------------------------------------------
// The schema tables
// ---------------------------------------------------------------------------------------------


constexpr const char* kDTypes[] = {"float32", "float64", nullptr};

// The top-level fields. A dotted name lives in a nested object ("shape.batch").
using TopBinding = std::variant<int ExperimentConfig::*, std::uint64_t ExperimentConfig::*,
                                DType ExperimentConfig::*,
                                std::vector<LayerConfig> ExperimentConfig::*, int Shape::*,
                                std::vector<int> Shape::*>;

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
    {grid("shape.grid", Limits::max_tokens,
          "An image grid [H, W] for conv2d: the tokens (H * W, the default) are its positions row by row, "
          "x.flatten(2).transpose(1, 2) of (B, C, H, W); batchnorm then acts as BatchNorm2d, "
          "instancenorm as InstanceNorm2d."),
     &Shape::grid},
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
template <class T>
T& ref(ExperimentConfig& c, T Shape::*m) {
  return c.shape.*m;
}
template <class T>
const T& ref(const ExperimentConfig& c, T Shape::*m) {
  return c.shape.*m;
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
  // Options set without the flag they need (rotary_dim without rope): named at the option.
  for (const auto& opt : type->options) {
    if (!opt.spec.needs_flag) continue;
    const bool set = std::visit([&](auto m) { return !is_default(ref(out, m), opt.spec); }, opt.member);
    const LayerOption* flag = find_option(type->type, opt.spec.needs_flag);
    const bool on = flag && std::visit(
                                [&](auto m) {
                                  const auto& value = ref(out, m);
                                  if constexpr (std::is_same_v<std::decay_t<decltype(value)>, bool>) return value;
                                  else return false;
                                },
                                flag->member);
    if (set && !on)
      return Error{path + "." + opt.spec.name,
                   std::string(opt.spec.name) + " needs " + opt.spec.needs_flag + ": true"};
  }
  for (const auto& opt : type->options) {
    if (opt.spec.kind == Kind::layers && v.find(opt.spec.name) == v.end())
      return Error{path + "." + opt.spec.name, std::string("is missing; a ") + type->name +
                                                   " needs a " + opt.spec.name +
                                                   " of at least one layer"};
    if (opt.spec.kind == Kind::branches && v.find(opt.spec.name) == v.end())
      return Error{path + "." + opt.spec.name, std::string("is missing; a ") + type->name +
                                                   " needs " + opt.spec.name + ", at least " +
                                                   std::to_string(static_cast<int>(opt.spec.min)) +
                                                   " lists of layers"};
  }
  return std::nullopt;
}

}  // namespace

// Declared in config_values.hpp, where a layer list is one kind of value.
namespace config_detail {

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

}  // namespace config_detail

namespace {

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
  int context_tokens = 0;    // the cross-attention context's length (0: none yet)
  std::string context_path;  // the layer that set it
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

// Cross-attention layers read one context (an encoder's output: batch x context_tokens x
// features), drawn with the input, so they must agree on its length; it counts towards the
// limits like the input.
// `in`: the layer's input width (its keys and values are kv_heads * in / num_heads wide).
Failure check_context(const LayerConfig& l, int in, const std::string& path, Walk& w) {
  if (l.context_tokens <= 0) return std::nullopt;
  const std::string at = path + ".context_tokens";
  if (w.context_tokens > 0 && l.context_tokens != w.context_tokens)
    return Error{at, "every cross-attention layer reads the same context, of " + std::to_string(w.context_tokens) +
                         " tokens (" + w.context_path + ".context_tokens), got " + std::to_string(l.context_tokens)};
  if (w.context_tokens == 0) {
    w.context_tokens = l.context_tokens;
    w.context_path = path;
  }
  const long long rows = static_cast<long long>(w.shape.batch) * l.context_tokens;
  if (rows > Limits::max_tokens_total)
    return Error{at, "batch * context_tokens = " + std::to_string(w.shape.batch) + " * " + std::to_string(l.context_tokens) +
                         " = " + std::to_string(rows) + " exceeds the limit of " +
                         std::to_string(Limits::max_tokens_total) + " tokens in total"};
  // The context itself, and its keys and values.
  const long long kv = static_cast<long long>(attention_kv_heads(l)) * (in / l.num_heads);
  const long long wide = std::max<long long>(w.shape.features, kv);
  if (rows * wide > Limits::max_activations)
    return Error{at, "batch * context_tokens * " + std::string(kv > w.shape.features ? "the key width" : "features") +
                         " = " + std::to_string(rows) + " * " + std::to_string(wide) + " exceeds the limit of " +
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
    if (kind.needs_grid && w.shape.grid.empty())
      return Error{lp + ".type", std::string(kind.name) + " needs an image grid: set shape.grid to [H, W] with H * W = tokens"};
    if (kind.check)
      if (auto e = kind.check(l, in, lp)) return e;
    if (auto e = check_context(l, in, lp, w)) return e;
    if (kind.inner_width)
      if (auto e = check_activations(w, kind.inner_width(l, in), lp + "." + kind.inner_option, kind.inner_option))
        return e;
    // Parameters as the kind declares them (the network builds exactly these).
    declared.clear();
    if (kind.params) {  // (kinds with parameters have no body: the copy is shallow)
      LayerConfig with_positions = l;
      with_positions.positions = w.shape.tokens;
      with_positions.context_features = w.shape.features;
      kind.params(with_positions, in, out, declared);
    }
    for (const ParamSpec& p : declared)
      if (p.role != ParamRole::buffer) w.parameters += static_cast<long long>(p.rows) * p.cols;
    if (kind.has_body) {
      int inner = width;
      if (auto e = check_stack(l.body, lp + ".body", inner, w)) return e;
      if (inner != width)
        return Error{lp + ".body", "residual body changes the width from " +
                                       std::to_string(width) + " to " + std::to_string(inner)};
    }
    for (std::size_t b = 0; b < l.branches.size(); ++b) {
      int inner = width;
      const std::string bp = lp + ".branches[" + std::to_string(b) + "]";
      if (auto e = check_stack(l.branches[b], bp, inner, w)) return e;
      if (inner != width)
        return Error{bp, "parallel branch changes the width from " + std::to_string(width) +
                             " to " + std::to_string(inner) + "; every branch must end at the input width"};
    }
    width = out;
    if (w.parameters > Limits::max_parameters)
      return Error{lp, "the stack reaches " + std::to_string(w.parameters) +
                           " parameters here, over the limit of " +
                           std::to_string(Limits::max_parameters) + " parameters"};
  }
  return std::nullopt;
}

Failure check_semantics(ExperimentConfig& c) {
  Walk w{c.shape, 0, 0, 0, 0, {}};
  w.rows = static_cast<long long>(c.shape.batch) * c.shape.tokens;
  if (w.rows > Limits::max_tokens_total)
    return Error{"shape", "batch * tokens = " + std::to_string(c.shape.batch) + " * " +
                              std::to_string(c.shape.tokens) + " = " + std::to_string(w.rows) +
                              " exceeds the limit of " + std::to_string(Limits::max_tokens_total) +
                              " tokens in total"};
  if (auto e = check_activations(w, c.shape.features, "shape", "features")) return e;
  int width = c.shape.features;
  if (auto e = check_stack(c.layers, "layers", width, w)) return e;
  c.parameters = w.parameters;
  return std::nullopt;
}

// A grid sets the tokens (H * W) unless they are given, and must then agree with them.
BIASLAB_COLD Failure settle_grid(ExperimentConfig& c, bool tokens_given) {
  const std::vector<int>& g = c.shape.grid;
  if (g.empty()) return std::nullopt;
  const long long cells = static_cast<long long>(g[0]) * g[1];
  const bool too_many = cells > Limits::max_tokens;
  if (too_many || (tokens_given && c.shape.tokens != cells))
    return Error{"shape.grid", "H * W = " + std::to_string(cells) +
                                   (too_many ? " exceeds the limit of " + std::to_string(Limits::max_tokens) + " tokens"
                                             : " positions, but shape.tokens is " + std::to_string(c.shape.tokens) +
                                                   "; omit tokens or make them equal")};
  c.shape.tokens = static_cast<int>(cells);
  return std::nullopt;
}

template <class J>
Result<ExperimentConfig> parse_document(const J& j) {
  try {
    if (!j.is_object()) return Error{"", "a config must be a JSON object, got " + describe(j)};
    ExperimentConfig c;
    for (const auto& f : kTopFields)
      std::visit([&](auto m) { set_default(ref(c, m), f.spec); }, f.member);
    if (auto e = parse_top_object(c, j, "")) return *e;
    const auto shape = j.find("shape");
    if (auto e = settle_grid(c, shape != j.end() && shape->is_object() && shape->contains("tokens"))) return *e;
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

// The parser's message quotes what it last read: a byte that is not UTF-8, or part of a
// character cut where it stopped. A report carries the message as JSON text, which must be
// UTF-8 (dumping it would throw), so each byte outside a well-formed sequence is written \xHH.
static std::string utf8_or_escaped(const std::string& s) {
  std::string out;
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const std::size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 0;
    bool whole = n > 0 && i + n <= s.size();
    for (std::size_t k = 1; whole && k < n; ++k) whole = (static_cast<unsigned char>(s[i + k]) >> 6) == 0x2;
    if (whole) {
      out.append(s, i, n);
      i += n;
    } else {
      static const char* const kHex = "0123456789ABCDEF";
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 0xf];
      ++i;
    }
  }
  return out;
}

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
                         std::to_string(column + 1) + ": " + utf8_or_escaped(detail)};
  } catch (const std::exception& e) {
    std::string detail = e.what();
    const std::size_t bracket = detail.find("] ");
    if (bracket != std::string::npos) detail = detail.substr(bracket + 2);
    return Error{"", "invalid JSON: " + utf8_or_escaped(detail)};
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
    if (f.spec.kind == Kind::grid && c.shape.grid.empty()) continue;  // printed only when set
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
