// Tests of the v1 experiment config: defaults, parsing, printing, errors, limits and the schema.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <iterator>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "layers/layer.hpp"
#include "model/config.hpp"

using namespace biaslab;
using json = biaslab::Json;

namespace {

// Uses every option of every layer type with a non-default value, and non-default top-level
// fields; valid (widths 48 -> 32, groupnorm 8 | 32, attention 2 heads of 16, residual 32 -> 32).
const char* const kFullConfig = R"({
  "version": 1, "seed": 9007199254740992, "dtype": "float32",
  "shape": {"batch": 3, "tokens": 6, "features": 48, "grid": [2, 3]},
  "layers": [
    {"type": "linear", "out_features": 32, "bias": false},
    {"type": "layernorm", "elementwise_affine": false, "bias": false, "eps": 0.001},
    {"type": "rmsnorm", "elementwise_affine": false, "eps": 0.0001},
    {"type": "batchnorm", "mode": "eval", "affine": false, "eps": 0.01},
    {"type": "groupnorm", "num_groups": 8, "affine": false, "eps": 0.5},
    {"type": "instancenorm", "affine": true, "eps": 1},
    {"type": "attention", "num_heads": 2, "num_kv_heads": 1, "q_bias": false, "k_bias": false, "v_bias": false,
     "o_bias": false, "causal": true, "sinks": true, "rope": true, "rotary_dim": 8, "rope_style": "interleaved",
     "rope_base": 500000, "qk_norm": "rmsnorm"},
    {"type": "glu", "hidden": 12, "activation": "gelu_tanh", "bias": true},
    {"type": "relu"},
    {"type": "gelu", "approximate": "tanh"},
    {"type": "softmax"},
    {"type": "residual", "body": [
      {"type": "linear", "out_features": 16},
      {"type": "relu"},
      {"type": "residual", "body": [{"type": "layernorm", "eps": 0.25}]},
      {"type": "linear", "out_features": 32}]},
    {"type": "parallel", "branches": [[{"type": "relu"}], [{"type": "linear", "bias": false}, {"type": "silu"}]]},
    {"type": "conv1d", "out_channels": 16, "kernel_size": 4, "padding": "causal", "groups": 4, "bias": false},
    {"type": "conv2d", "out_channels": 24, "kernel_size": 5, "padding": "causal", "groups": 8, "bias": false},
    {"type": "attention", "num_heads": 2, "context_tokens": 5}
  ]})";

const char* const kExample = R"({"version": 1, "seed": 7, "dtype": "float64",
 "shape": {"batch": 2, "tokens": 16, "features": 64},
 "layers": [
   {"type": "residual", "body": [
      {"type": "layernorm"},
      {"type": "attention", "num_heads": 4, "q_bias": true, "k_bias": true, "v_bias": true, "o_bias": true, "causal": false, "rope": false}]},
   {"type": "linear", "out_features": 64, "bias": true}]})";

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// A config with the given layers (JSON text) and otherwise defaults.
json with_layers(const std::string& layers) { return json::parse(R"({"layers": )" + layers + "}"); }

// Every registered kind (cpp/layers/kinds.def), so a new kind is checked here without an edit.
const std::vector<LayerType> kAllTypes = [] {
  std::vector<LayerType> types;
  for (const LayerKind* k : layer_kinds()) types.push_back(k->type);
  return types;
}();

struct BadInput {
  const char* text;
  const char* path;
  const char* fact;  // the message must mention this
};

void check_errors(const std::vector<BadInput>& cases) {
  for (const auto& c : cases) {
    INFO("input: " << std::string(c.text));
    Result<ExperimentConfig> r = Result<ExperimentConfig>(Error{});
    CHECK_NOTHROW(r = parse_config_text(c.text));
    CHECK_FALSE(r.ok());
    if (r.ok()) continue;
    INFO("error: " << r.error().what());
    CHECK(r.error().path == c.path);
    CHECK(contains(r.error().message, c.fact));
  }
}

}  // namespace

TEST_CASE("config: make_layer applies each type's PyTorch defaults") {
  const LayerConfig linear = make_layer(LayerType::linear);
  CHECK(linear.type == LayerType::linear);
  CHECK(linear.out_features == 0);
  CHECK(linear.bias);

  const LayerConfig ln = make_layer(LayerType::layernorm);
  CHECK(ln.elementwise_affine);
  CHECK(ln.bias);
  CHECK(ln.eps == 1e-5);

  const LayerConfig rms = make_layer(LayerType::rmsnorm);
  CHECK(rms.elementwise_affine);
  CHECK(rms.eps == 1e-6);

  const LayerConfig bn = make_layer(LayerType::batchnorm);
  CHECK(bn.mode == BatchNormMode::train);
  CHECK(bn.affine);
  CHECK(bn.eps == 1e-5);

  const LayerConfig gn = make_layer(LayerType::groupnorm);
  CHECK(gn.num_groups == 4);
  CHECK(gn.affine);
  CHECK(gn.eps == 1e-5);

  const LayerConfig in = make_layer(LayerType::instancenorm);
  CHECK_FALSE(in.affine);
  CHECK(in.eps == 1e-5);

  const LayerConfig att = make_layer(LayerType::attention);
  CHECK(att.num_heads == 4);
  CHECK((att.q_bias && att.k_bias && att.v_bias && att.o_bias));
  CHECK_FALSE(att.causal);
  CHECK_FALSE(att.rope);

  CHECK(make_layer(LayerType::gelu).approximate == GeluApprox::none);
  CHECK(make_layer(LayerType::residual).body.empty());
  for (LayerType t : kAllTypes) CHECK(make_layer(t).type == t);
}

TEST_CASE("config: type and dtype names are the JSON spellings") {
  CHECK(std::string(layer_type_name(LayerType::instancenorm)) == "instancenorm");
  CHECK(std::string(layer_type_name(LayerType::residual)) == "residual");
  CHECK(std::string(dtype_name(DType::float32)) == "float32");
  CHECK(std::string(dtype_name(DType::float64)) == "float64");
}

TEST_CASE("config: the documented example parses into the expected stack") {
  const auto r = parse_config_text(kExample);
  INFO(r.error().what());
  REQUIRE(r.ok());
  const ExperimentConfig& c = r.value();
  CHECK(c.version == 1);
  CHECK(c.seed == 7);
  CHECK(c.dtype == DType::float64);
  CHECK(c.shape.batch == 2);
  CHECK(c.shape.tokens == 16);
  CHECK(c.shape.features == 64);
  REQUIRE(c.layers.size() == 2);
  CHECK(c.layers[0].type == LayerType::residual);
  REQUIRE(c.layers[0].body.size() == 2);
  CHECK(c.layers[0].body[0] == make_layer(LayerType::layernorm));
  CHECK(c.layers[0].body[1] == make_layer(LayerType::attention));
  CHECK(c.layers[1].type == LayerType::linear);
  CHECK(c.layers[1].out_features == 64);
  CHECK(c.layers[1].bias);
}

TEST_CASE("config: omitted top-level fields take their defaults") {
  const auto r = parse_config(with_layers(R"([{"type": "relu"}])"));
  REQUIRE(r.ok());
  CHECK(r->version == 1);
  CHECK(r->seed == 0);
  CHECK(r->dtype == DType::float64);
  CHECK(r->shape.batch == 2);
  CHECK(r->shape.tokens == 16);
  CHECK(r->shape.features == 64);
}

TEST_CASE("config: every option with a non-default value survives parse, print, parse") {
  const auto first = parse_config_text(kFullConfig);
  INFO(first.error().what());
  REQUIRE(first.ok());
  const ExperimentConfig& c = first.value();
  CHECK(c.seed == (std::uint64_t{1} << 53));
  CHECK(c.dtype == DType::float32);
  CHECK(c.layers[3].mode == BatchNormMode::eval);
  CHECK(c.layers[9].approximate == GeluApprox::tanh);
  CHECK(c.layers[7].activation == GluActivation::gelu_tanh);
  CHECK(c.layers[7].hidden == 12);
  CHECK(c.layers[5].affine);

  const json printed = config_to_json(c);
  const auto second = parse_config(printed);
  INFO(second.error().what());
  REQUIRE(second.ok());
  CHECK(second.value() == c);
  CHECK(config_to_json(second.value()).dump() == printed.dump());
  // Printing keeps every non-default value, so the printed JSON equals the input.
  CHECK(printed == json::parse(kFullConfig));
}

TEST_CASE("config: the full test config exercises every option the schema lists") {
  // Ties kFullConfig to the schema: a new option without a round-trip test fails here.
  const json full = json::parse(kFullConfig);
  std::vector<json> layers;
  std::vector<json> todo(full["layers"].begin(), full["layers"].end());
  while (!todo.empty()) {
    json l = todo.back();
    todo.pop_back();
    if (l.contains("body")) todo.insert(todo.end(), l["body"].begin(), l["body"].end());
    if (l.contains("branches"))
      for (const auto& branch : l["branches"]) todo.insert(todo.end(), branch.begin(), branch.end());
    layers.push_back(l);
  }
  const json schema = config_schema();  // a range-for over a temporary's member would dangle
  for (const auto& type : schema["layer_types"]) {
    for (const auto& opt : type["options"]) {
      bool seen = false;
      for (const auto& l : layers)
        seen = seen || (l["type"] == type["name"] && l.contains(opt["name"]));
      INFO(type["name"].get<std::string>() << "." << opt["name"].get<std::string>());
      CHECK(seen);
    }
  }
}

TEST_CASE("config: printed JSON omits options equal to the type's defaults") {
  for (LayerType t : kAllTypes)
    CHECK(layer_to_json(make_layer(t)) == json{{"type", layer_type_name(t)}});

  const auto r = parse_config_text(
      R"({"layers": [{"type": "linear", "bias": true, "out_features": 64},
                     {"type": "instancenorm", "affine": false, "eps": 1e-5},
                     {"type": "rmsnorm", "eps": 1e-6}]})");
  REQUIRE(r.ok());
  const json printed = config_to_json(r.value());
  const json expected = json::parse(R"({"version": 1, "seed": 0, "dtype": "float64",
      "shape": {"batch": 2, "tokens": 16, "features": 64},
      "layers": [{"type": "linear", "out_features": 64}, {"type": "instancenorm"},
                 {"type": "rmsnorm"}]})");
  CHECK(printed == expected);
}

TEST_CASE("config: out_features 0 means the input width and is never printed") {
  ExperimentConfig c;
  c.layers = {make_layer(LayerType::linear)};
  CHECK_FALSE(config_to_json(c)["layers"][0].contains("out_features"));
  c.layers[0].out_features = 64;
  CHECK(config_to_json(c)["layers"][0]["out_features"] == 64);
}

TEST_CASE("config: equality compares only the options of the layer's type") {
  LayerConfig a = make_layer(LayerType::linear), b = make_layer(LayerType::linear);
  b.num_heads = 7;  // not a linear option
  b.eps = 0.5;
  CHECK(a == b);
  b.bias = false;
  CHECK(a != b);

  LayerConfig r1 = make_layer(LayerType::residual), r2 = make_layer(LayerType::residual);
  r1.body = {make_layer(LayerType::relu)};
  r2.body = {make_layer(LayerType::relu)};
  CHECK(r1 == r2);
  r2.body[0] = make_layer(LayerType::gelu);
  CHECK(r1 != r2);
  CHECK(make_layer(LayerType::relu) != make_layer(LayerType::gelu));

  ExperimentConfig x, y;
  x.layers = y.layers = {r1};
  CHECK(x == y);
  y.seed = 1;
  CHECK_FALSE(x == y);
  y.seed = 0;
  y.shape.tokens = 3;
  CHECK_FALSE(x == y);
}

TEST_CASE("config: integers accept integral floats and seeds up to 2^53") {
  const auto r = parse_config_text(R"({"seed": 7.0, "shape": {"batch": 2.0},
      "layers": [{"type": "attention", "num_heads": 2.0}]})");
  INFO(r.error().what());
  REQUIRE(r.ok());
  CHECK(r->seed == 7);
  CHECK(r->shape.batch == 2);
  CHECK(r->layers[0].num_heads == 2);
  CHECK(parse_config_text(R"({"seed": 9007199254740992, "layers": [{"type": "relu"}]})").ok());
  CHECK(parse_config_text(R"({"eps": 1, "layers": [{"type": "relu"}]})").error().path == "eps");
  // eps accepts integer JSON numbers too.
  CHECK(parse_config_text(R"({"layers": [{"type": "layernorm", "eps": 1}]})").ok());
}

TEST_CASE("config: malformed JSON text gives one error with line and column") {
  check_errors({
      {"", "", "line 1"},
      {"{\"layers\": [}", "", "line 1, column 13"},
      {"{\n  \"layers\": [\n    {\"type\": \"relu\",}\n  ]\n}", "", "line 3"},
      {"{\"layers\": [{\"type\": \"relu\"}]} trailing", "", "line 1"},
      {"{\"layers\": [{\"type\": \"layernorm\", \"eps\": NaN}]}", "", "line 1"},
      {"{\"layers\": [{\"type\": \"layernorm\", \"eps\": 1e999}]}", "", "overflow"},
  });
}

// Whether every byte sequence of s is well-formed UTF-8.
bool valid_utf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k)
      if ((static_cast<unsigned char>(s[i + k]) >> 6) != 0x2) return false;
    i += n;
  }
  return true;
}

TEST_CASE("config: a syntax error at a byte that is not UTF-8 gives a message that is") {
  // The parser quotes what it last read, a byte or a part of a character; a report carries the
  // message as JSON text, which must be UTF-8 (nlohmann's dump throws otherwise).
  for (const std::string text : {std::string("\xc3\xa9"), std::string("{\"layers\": [{\"type\": \"relu\"}], \"x\": \"\xff\"}"),
                                 std::string("{\"a\": \xe2\x82}"), std::string("\xf0\x9f\x98")}) {
    const auto r = parse_config_text(text);
    REQUIRE_FALSE(r.ok());
    const std::string message = r.error().message;
    INFO("message: " << message);
    CHECK(message.rfind("invalid JSON", 0) == 0);
    CHECK(valid_utf8(message));
  }
  // A character that is whole stays as it is.
  const auto r = parse_config_text("{\"caf\xc3\xa9\": }");
  REQUIRE_FALSE(r.ok());
  CHECK(valid_utf8(r.error().message));
}

TEST_CASE("config: wrong top-level structure and fields give one error each") {
  check_errors({
      {"[1, 2]", "", "object"},
      {"7", "", "object"},
      {R"({"layers": [{"type": "relu"}], "colour": 1})", "colour",
       "version, seed, dtype, shape, layers"},
      {R"({"layers": [{"type": "relu"}], "shape": {"depth": 3}})", "shape.depth",
       "batch, tokens, features"},
      {R"({"layers": [{"type": "relu"}], "shape": [2, 16, 64]})", "shape", "object"},
      {R"({"version": 2, "layers": [{"type": "relu"}]})", "version", "must be 1"},
      {R"({"version": "1", "layers": [{"type": "relu"}]})", "version", "integer"},
      {R"({"seed": -1, "layers": [{"type": "relu"}]})", "seed", "at least 0"},
      {R"({"seed": 9007199254740993, "layers": [{"type": "relu"}]})", "seed", "9007199254740992"},
      {R"({"seed": 1.5, "layers": [{"type": "relu"}]})", "seed", "integer"},
      {R"({"seed": "7", "layers": [{"type": "relu"}]})", "seed", "integer"},
      {R"({"dtype": "float16", "layers": [{"type": "relu"}]})", "dtype",
       "\"float32\", \"float64\""},
      {R"({"dtype": 64, "layers": [{"type": "relu"}]})", "dtype", "float64"},
      {R"({})", "layers", "at least one layer"},
      {R"({"seed": 3})", "layers", "missing"},
      {R"({"layers": []})", "layers", "at least one layer"},
      {R"({"layers": {"type": "relu"}})", "layers", "array"},
      {R"({"layers": null})", "layers", "array"},
      {R"({"layers": [{"type": "relu"}], "shape": {"features": 0}})", "shape.features",
       "at least 1"},
      {R"({"layers": [{"type": "relu"}], "shape": {"batch": -2}})", "shape.batch", "at least 1"},
      {R"({"layers": [{"type": "relu"}], "shape": {"tokens": true}})", "shape.tokens", "integer"},
      {R"({"layers": [{"type": "relu"}], "shape": {"grid": [4]}})", "shape.grid", "[H, W]"},
      {R"({"layers": [{"type": "relu"}], "shape": {"grid": "4x4"}})", "shape.grid", "[H, W]"},
      {R"({"layers": [{"type": "relu"}], "shape": {"grid": [4, 0]}})", "shape.grid[1]", "at least 1"},
      {R"({"layers": [{"type": "relu"}], "shape": {"grid": [4, 2.5]}})", "shape.grid[1]", "integer"},
      {R"({"layers": [{"type": "relu"}], "shape": {"grid": [64, 64]}})", "shape.grid", "exceeds the limit of 1024 tokens"},
      {R"({"layers": [{"type": "relu"}], "shape": {"grid": [3, 5], "tokens": 16}})", "shape.grid",
       "shape.tokens is 16"},
      {R"({"layers": [{"type": "conv2d"}]})", "layers[0].type", "needs an image grid"},
  });
}

TEST_CASE("config: bad layers and options give one error with the exact path") {
  check_errors({
      {R"({"layers": [3]})", "layers[0]", "object"},
      {R"({"layers": [{"type": "relu"}, {"num_heads": 4}]})", "layers[1].type", "missing"},
      {R"({"layers": [{"type": 4}]})", "layers[0].type", "linear"},
      {R"({"layers": [{"type": "conv"}]})", "layers[0].type", "\"conv\""},
      {R"({"layers": [{"type": "Linear"}]})", "layers[0].type",
       "; the known types are linear, layernorm, rmsnorm, batchnorm, groupnorm"},
      {R"({"layers": [{"type": "linear", "num_groups": 2}]})", "layers[0].num_groups",
       "linear takes out_features, bias"},
      {R"({"layers": [{"type": "relu", "eps": 0.1}]})", "layers[0].eps", "relu takes no options"},
      {R"({"layers": [{"type": "instancenorm", "elementwise_affine": true}]})",
       "layers[0].elementwise_affine", "affine, eps"},
      {R"({"layers": [{"type": "linear", "bias": "yes"}]})", "layers[0].bias", "true or false"},
      {R"({"layers": [{"type": "linear", "bias": 1}]})", "layers[0].bias", "true or false"},
      {R"({"layers": [{"type": "attention", "causal": null}]})", "layers[0].causal", "got null"},
      {R"({"layers": [{"type": "attention", "num_heads": 1.5}]})", "layers[0].num_heads",
       "integer, got 1.5"},
      {R"({"layers": [{"type": "attention", "num_heads": true}]})", "layers[0].num_heads",
       "integer, got true"},
      {R"({"layers": [{"type": "attention", "num_heads": null}]})", "layers[0].num_heads",
       "integer, got null"},
      {R"({"layers": [{"type": "attention", "num_heads": "4"}]})", "layers[0].num_heads",
       "integer"},
      {R"({"layers": [{"type": "attention", "num_heads": [4]}]})", "layers[0].num_heads",
       "an array"},
      {R"({"layers": [{"type": "attention", "num_heads": 0}]})", "layers[0].num_heads",
       "at least 1"},
      {R"({"layers": [{"type": "attention", "num_heads": 512}]})", "layers[0].num_heads",
       "512 exceeds the limit of 256 heads"},
      {R"({"layers": [{"type": "linear", "out_features": 0}]})", "layers[0].out_features",
       "at least 1"},
      {R"({"layers": [{"type": "linear", "out_features": 1e300}]})", "layers[0].out_features",
       "8192"},
      {R"({"layers": [{"type": "linear", "out_features": -1e300}]})", "layers[0].out_features",
       "at least 1"},
      {R"({"layers": [{"type": "linear", "out_features": 18446744073709551615}]})",
       "layers[0].out_features", "8192"},
      {R"({"layers": [{"type": "linear", "out_features": 123456789012345678901234567890}]})",
       "layers[0].out_features", "8192"},
      {R"({"layers": [{"type": "groupnorm", "num_groups": -3}]})", "layers[0].num_groups",
       "at least 1"},
      {R"({"layers": [{"type": "layernorm", "eps": 0}]})", "layers[0].eps", "greater than 0"},
      {R"({"layers": [{"type": "layernorm", "eps": -1e-9}]})", "layers[0].eps", "greater than 0"},
      {R"({"layers": [{"type": "batchnorm", "eps": 2}]})", "layers[0].eps", "at most 1"},
      {R"({"layers": [{"type": "rmsnorm", "eps": "small"}]})", "layers[0].eps", "number"},
      {R"({"layers": [{"type": "batchnorm", "mode": "test"}]})", "layers[0].mode",
       "\"train\", \"eval\""},
      {R"({"layers": [{"type": "gelu", "approximate": true}]})", "layers[0].approximate",
       "\"none\", \"tanh\""},
      {R"({"layers": [{"type": "conv1d", "groups": 3}]})", "layers[0].groups", "divide the input width 64"},
      {R"({"layers": [{"type": "conv1d", "groups": 4, "out_channels": 6}]})", "layers[0].groups", "divide out_channels 6"},
      {R"({"layers": [{"type": "conv1d", "padding": "valid"}]})", "layers[0].padding", "\"same\", \"causal\""},
      {R"({"layers": [{"type": "conv1d", "kernel_size": 0}]})", "layers[0].kernel_size", "at least 1"},
      {R"({"layers": [{"type": "conv2d", "kernel_size": 16}], "shape": {"grid": [4, 4]}})", "layers[0].kernel_size", "at most 15"},
      {R"({"layers": [{"type": "residual", "body": []}]})", "layers[0].body", "at least one layer"},
      {R"({"layers": [{"type": "residual"}]})", "layers[0].body", "missing"},
      {R"({"layers": [{"type": "residual", "body": {"type": "relu"}}]})", "layers[0].body",
       "array"},
      {R"({"layers": [{"type": "residual", "body": [{"type": "relu"}, {"type": "layernorm", "eps": 5}]}]})",
       "layers[0].body[1].eps", "at most 1"},
      {R"({"layers": [{"type": "relu"}, {"type": "residual", "body": [{"type": "residual", "body": [{"type": "nope"}]}]}]})",
       "layers[1].body[0].body[0].type", "\"nope\""},
  });
}

TEST_CASE("config: non-finite numbers in a JSON value are rejected") {
  for (double bad : {std::nan(""), std::numeric_limits<double>::infinity(),
                     -std::numeric_limits<double>::infinity()}) {
    json j = with_layers(R"([{"type": "layernorm"}, {"type": "attention"}])");
    j["layers"][0]["eps"] = bad;
    auto r = parse_config(j);
    REQUIRE_FALSE(r.ok());
    INFO(r.error().what());
    CHECK(r.error().path == "layers[0].eps");
    CHECK(contains(r.error().message, "finite"));

    j["layers"][0]["eps"] = 0.5;
    j["layers"][1]["num_heads"] = bad;
    r = parse_config(j);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().path == "layers[1].num_heads");
    CHECK(contains(r.error().message, "integer"));
  }
}

TEST_CASE("config: the first error in document order is reported") {
  // Text is read in document order.
  auto r = parse_config_text(R"({"layers": [{"type": "relu", "eps": 1}], "colour": 1})");
  CHECK(r.error().path == "layers[0].eps");
  r = parse_config_text(R"({"colour": 1, "layers": [{"type": "relu", "eps": 1}]})");
  CHECK(r.error().path == "colour");
  r = parse_config_text(R"({"layers": [{"type": "linear", "bias": 1, "out_features": 0}]})");
  CHECK(r.error().path == "layers[0].bias");
  r = parse_config_text(R"({"layers": [{"type": "linear", "out_features": 0, "bias": 1}]})");
  CHECK(r.error().path == "layers[0].out_features");
  // Schema errors come before semantic ones.
  r = parse_config_text(
      R"({"layers": [{"type": "attention", "num_heads": 5}, {"type": "relu", "x": 1}]})");
  CHECK(r.error().path == "layers[1].x");
}

TEST_CASE("config: attention heads, rope and groups must fit the width at that layer") {
  auto r = parse_config_text(
      R"({"layers": [{"type": "relu"}, {"type": "layernorm"}, {"type": "attention", "num_heads": 5}]})");
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().what() == "layers[2].num_heads: 5 does not divide features 64");

  // The width is tracked through linear layers.
  r = parse_config_text(
      R"({"layers": [{"type": "linear", "out_features": 60}, {"type": "attention", "num_heads": 8}]})");
  CHECK(r.error().what() == "layers[1].num_heads: 8 does not divide features 60");

  r = parse_config_text(R"({"shape": {"features": 72},
      "layers": [{"type": "attention", "num_heads": 8, "rope": true}]})");
  REQUIRE_FALSE(r.ok());
  INFO(r.error().what());
  CHECK(r.error().path == "layers[0].rope");
  CHECK(contains(r.error().message, "rope needs an even head dimension, got 9"));
  CHECK(parse_config_text(R"({"shape": {"features": 72},
      "layers": [{"type": "attention", "num_heads": 8}]})")
            .ok());

  // Partial RoPE: an even rotary_dim up to the head dimension, and the RoPE options need rope.
  r = parse_config_text(R"({"layers": [{"type": "attention", "num_heads": 4, "rope": true, "rotary_dim": 6}]})");
  CHECK(r.ok());
  r = parse_config_text(R"({"layers": [{"type": "attention", "num_heads": 4, "rope": true, "rotary_dim": 18}]})");
  CHECK(r.error().what() ==
        "layers[0].rotary_dim: must be even and at most the head dimension 16 (features 64 / 4 heads), got 18");
  r = parse_config_text(R"({"layers": [{"type": "attention", "num_heads": 4, "rope": true, "rotary_dim": 5}]})");
  CHECK(r.error().path == "layers[0].rotary_dim");
  r = parse_config_text(R"({"shape": {"features": 72}, "layers": [{"type": "attention", "num_heads": 8, "rope": true, "rotary_dim": 4}]})");
  CHECK(r.ok());  // an odd head dimension (9) is fine when only 4 of its dimensions rotate
  r = parse_config_text(R"({"layers": [{"type": "attention", "rotary_dim": 4}]})");
  CHECK(r.error().what() == "layers[0].rotary_dim: rotary_dim needs rope: true");
  r = parse_config_text(R"({"layers": [{"type": "attention", "rope_style": "interleaved"}]})");
  CHECK(r.error().what() == "layers[0].rope_style: rope_style needs rope: true");
  r = parse_config_text(R"({"layers": [{"type": "attention", "rope_base": 1000000}]})");
  CHECK(r.error().what() == "layers[0].rope_base: rope_base needs rope: true");
  r = parse_config_text(R"({"layers": [{"type": "attention", "rope": true, "rope_base": 1}]})");
  CHECK(r.error().path == "layers[0].rope_base");

  r = parse_config_text(R"({"layers": [{"type": "groupnorm", "num_groups": 5}]})");
  CHECK(r.error().what() == "layers[0].num_groups: 5 does not divide features 64");
  r = parse_config_text(R"({"layers": [{"type": "residual", "body": [
      {"type": "linear", "out_features": 48}, {"type": "groupnorm", "num_groups": 32},
      {"type": "linear", "out_features": 64}]}]})");
  CHECK(r.error().what() == "layers[0].body[1].num_groups: 32 does not divide features 48");
}

TEST_CASE("config: a residual body must end at the width it started with") {
  auto r = parse_config_text(R"({"layers": [{"type": "relu"},
      {"type": "residual", "body": [{"type": "linear", "out_features": 32}]}]})");
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().what() == "layers[1].body: residual body changes the width from 64 to 32");
  // After a valid residual the width is unchanged; after a linear it is the new width.
  r = parse_config_text(R"({"layers": [
      {"type": "residual", "body": [{"type": "linear", "out_features": 32}, {"type": "linear"},
                                     {"type": "linear", "out_features": 64}]},
      {"type": "linear", "out_features": 30}, {"type": "attention", "num_heads": 4}]})");
  CHECK(r.error().what() == "layers[2].num_heads: 4 does not divide features 30");
}

TEST_CASE("config: shape limits state the limit") {
  auto r = parse_config_text(R"({"shape": {"tokens": 5000}, "layers": [{"type": "relu"}]})");
  CHECK(r.error().what() == "shape.tokens: 5000 exceeds the limit of 1024 tokens");
  r = parse_config_text(R"({"shape": {"batch": 300}, "layers": [{"type": "relu"}]})");
  CHECK(r.error().what() == "shape.batch: 300 exceeds the limit of 256 sequences");
  r = parse_config_text(R"({"shape": {"features": 9000}, "layers": [{"type": "relu"}]})");
  CHECK(r.error().what() == "shape.features: 9000 exceeds the limit of 8192 features");
  r = parse_config_text(R"({"layers": [{"type": "linear", "out_features": 8193}]})");
  CHECK(r.error().what() == "layers[0].out_features: 8193 exceeds the limit of 8192 features");

  r = parse_config_text(R"({"shape": {"batch": 8, "tokens": 1024}, "layers": [{"type": "relu"}]})");
  REQUIRE_FALSE(r.ok());
  INFO(r.error().what());
  CHECK(r.error().path == "shape");
  CHECK(contains(r.error().message, "limit of 4096 tokens in total"));
  CHECK(parse_config_text(R"({"shape": {"batch": 4, "tokens": 1024, "features": 512},
                              "layers": [{"type": "relu"}]})")
            .ok());

  r = parse_config_text(R"({"shape": {"batch": 4, "tokens": 1024, "features": 1024},
                           "layers": [{"type": "relu"}]})");
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().path == "shape");
  CHECK(contains(r.error().message, "exceeds the limit of 2097152 activations"));
}

TEST_CASE("config: the widest layer counts against the activation limit") {
  auto r = parse_config_text(R"({"shape": {"batch": 2, "tokens": 1024, "features": 64},
      "layers": [{"type": "residual", "body": [{"type": "linear", "out_features": 2048},
                                                {"type": "linear", "out_features": 64}]}]})");
  REQUIRE_FALSE(r.ok());
  INFO(r.error().what());
  CHECK(r.error().path == "layers[0].body[0].out_features");
  CHECK(contains(r.error().message, "2097152"));
  CHECK(parse_config_text(R"({"shape": {"batch": 2, "tokens": 1024, "features": 64},
      "layers": [{"type": "linear", "out_features": 1024}]})")
            .ok());
}

TEST_CASE("config: layers are counted through residual bodies up to the limit") {
  json flat = json::array();
  for (int i = 0; i < Limits::max_layers; ++i) flat.push_back({{"type", "relu"}});
  CHECK(parse_config(json{{"layers", flat}}).ok());
  flat.push_back({{"type", "relu"}});
  auto r = parse_config(json{{"layers", flat}});
  REQUIRE_FALSE(r.ok());
  INFO(r.error().what());
  CHECK(r.error().path == "layers[64]");
  CHECK(contains(r.error().message, "more than 64 layers"));

  json body = json::array();
  for (int i = 0; i < Limits::max_layers; ++i) body.push_back({{"type", "relu"}});
  r = parse_config(json{{"layers", {{{"type", "residual"}, {"body", body}}}}});
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().path == "layers[0].body[63]");
}

TEST_CASE("config: residual nesting deeper than the limit is rejected") {
  auto nested = [](int depth) {
    json layer = {{"type", "relu"}};
    for (int i = 0; i < depth; ++i) layer = {{"type", "residual"}, {"body", {layer}}};
    return json{{"layers", {layer}}};
  };
  CHECK(parse_config(nested(Limits::max_depth)).ok());
  const auto r = parse_config(nested(Limits::max_depth + 1));
  REQUIRE_FALSE(r.ok());
  INFO(r.error().what());
  std::string path = "layers[0]";
  for (int i = 0; i < Limits::max_depth; ++i) path += ".body[0]";
  CHECK(r.error().path == path + ".body");
  CHECK(contains(r.error().message, "limit of 8"));
  // Very deep nesting is an error, not a stack overflow.
  std::string deep = R"({"layers": [)";
  const int levels = 100000;
  for (int i = 0; i < levels; ++i) deep += R"({"type": "residual", "body": [)";
  deep += R"({"type": "relu"})";
  for (int i = 0; i < levels; ++i) deep += "]}";
  deep += "]}";
  const auto d = parse_config_text(deep);
  REQUIRE_FALSE(d.ok());
  CHECK(d.error().path == path + ".body");
}

TEST_CASE("config: a deeply nested value followed by more keys is an error, never a stack overflow") {
  // Found with fuzz/fuzz_config.cpp on a crafted input (this deep is beyond its length limit):
  // the JSON parser copied an object's earlier members, recursively, each time the object grew,
  // so a million levels overflowed any stack.
  const std::size_t depth = 1000000;
  const std::string deep = std::string(depth, '[') + std::string(depth, ']');
  SUBCASE("a top-level field") {
    const auto r = parse_config_text(R"({"seed": )" + deep + R"(, "layers": [{"type": "relu"}]})");
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().path == "seed");
    CHECK(contains(r.error().message, "must be an integer, got an array"));
  }
  SUBCASE("a layer option") {
    const auto r = parse_config_text(R"({"layers": [{"type": "linear", "bias": )" + deep + R"(, "out_features": 3}]})");
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().path == "layers[0].bias");
    CHECK(contains(r.error().message, "must be true or false, got an array"));
  }
  SUBCASE("an object nested as deep") {
    std::string objects;
    for (std::size_t i = 0; i < depth; ++i) objects += R"({"a":)";
    objects += "1" + std::string(depth, '}');
    const auto r = parse_config_text(R"({"shape": )" + objects + R"(, "layers": [{"type": "relu"}]})");
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().path == "shape.a");
    CHECK(contains(r.error().message, "unknown field"));
  }
}

TEST_CASE("config: parameters are counted per layer type against the limit") {
  // 16 linear 2048 -> 2048 without bias hold exactly 2^26 parameters, the limit.
  auto stack = [](const json& layer, int n, const json& extra = json()) {
    json layers = json::array();
    for (int i = 0; i < n; ++i) layers.push_back(layer);
    if (!extra.is_null()) layers.push_back(extra);
    return json{{"shape", {{"batch", 1}, {"tokens", 4}, {"features", 2048}}}, {"layers", layers}};
  };
  const json linear = {{"type", "linear"}, {"bias", false}};
  CHECK(parse_config(stack(linear, 16)).ok());
  auto r = parse_config(stack({{"type", "linear"}}, 16));  // + 16 * 2048 biases
  REQUIRE_FALSE(r.ok());
  INFO(r.error().what());
  CHECK(r.error().path == "layers[15]");
  CHECK(contains(r.error().message, "limit of 67108864 parameters"));

  // Norms without learned affine add nothing; with it they add parameters.
  CHECK(
      parse_config(stack(linear, 16, {{"type", "layernorm"}, {"elementwise_affine", false}})).ok());
  CHECK(parse_config(stack(linear, 16, {{"type", "groupnorm"}, {"affine", false}})).ok());
  CHECK(parse_config(stack(linear, 16, {{"type", "instancenorm"}})).ok());
  CHECK(parse_config(stack(linear, 16, {{"type", "relu"}})).ok());
  CHECK(parse_config(stack(linear, 16, {{"type", "rmsnorm"}})).error().path == "layers[16]");
  CHECK(parse_config(stack(linear, 16, {{"type", "batchnorm"}})).error().path == "layers[16]");

  // Attention: 4 F^2 weights plus F per enabled bias.
  const json bare = {{"type", "attention"},
                     {"q_bias", false},
                     {"k_bias", false},
                     {"v_bias", false},
                     {"o_bias", false}};
  CHECK(parse_config(stack(bare, 4)).ok());
  json one_bias = bare;
  one_bias["v_bias"] = true;
  CHECK(parse_config(stack(one_bias, 4)).error().path == "layers[3]");
}

TEST_CASE("config: the schema lists every layer type and option with make_layer's defaults") {
  const json schema = config_schema();
  const json& types = schema["layer_types"];
  for (LayerType t : kAllTypes) {
    bool listed = false;
    for (const auto& type : types) listed = listed || type["name"] == layer_type_name(t);
    INFO(layer_type_name(t));
    CHECK(listed);
  }
  CHECK(types.size() == kAllTypes.size());

  for (const auto& type : types) {
    const std::string name = type["name"];
    INFO("type " << name);
    CHECK_FALSE(type["help"].get<std::string>().empty());
    json bare_doc = with_layers("[" + json{{"type", name}}.dump() + "]");
    if (layer_kind(find_layer_kind(name)->type).needs_grid) bare_doc["shape"] = {{"grid", {4, 4}}};
    const auto bare = parse_config(bare_doc);
    // A residual or a parallel cannot be bare; every other type parses alone to make_layer's value.
    if (name == "residual" || name == "parallel") {
      CHECK(bare.error().path == (name == "residual" ? "layers[0].body" : "layers[0].branches"));
      continue;
    }
    REQUIRE(bare.ok());
    const LayerConfig made = bare->layers[0];
    CHECK(made == make_layer(made.type));
    CHECK(layer_to_json(made) == json{{"type", name}});
    for (const auto& opt : type["options"]) {
      const std::string key = opt["name"];
      INFO("option " << key);
      CHECK_FALSE(opt["help"].get<std::string>().empty());
      const std::string kind = opt["type"];
      CHECK((kind == "bool" || kind == "int" || kind == "number" || kind == "enum"));
      if (kind == "int") CHECK((opt.contains("min") && opt.contains("max")));
      if (kind == "enum") {
        bool default_listed = false;
        for (const auto& v : opt["values"]) default_listed = default_listed || v == opt["default"];
        CHECK(default_listed);
      }
      REQUIRE(opt.contains("default"));
      if (opt["default"].is_null()) {
        CHECK(opt.contains("default_note"));
        continue;
      }
      // Stating the schema default explicitly gives make_layer's layer.
      json layer = {{"type", name}, {key, opt["default"]}};
      json doc = with_layers("[" + layer.dump() + "]");
      if (bare_doc.contains("shape")) doc["shape"] = bare_doc["shape"];
      const auto r = parse_config(doc);
      INFO(r.error().what());
      REQUIRE(r.ok());
      CHECK(r->layers[0] == make_layer(made.type));
    }
  }
}

TEST_CASE("config: the schema says how LayerNorm over (C, H, W) is written: GroupNorm with 1 group") {
  const json schema = config_schema();
  std::string help;
  for (const auto& type : schema["layer_types"])
    if (type["name"] == "groupnorm")
      for (const auto& opt : type["options"])
        if (opt["name"] == "num_groups") help = opt["help"];
  INFO(help);
  CHECK(help.find("1 group is LayerNorm over (C, H, W)") != std::string::npos);
}

TEST_CASE("config: the schema states the top-level fields and the limits") {
  const json schema = config_schema();
  json minimal = with_layers(R"([{"type": "relu"}])");
  const auto plain = parse_config(minimal);
  REQUIRE(plain.ok());
  std::vector<std::string> names;
  for (const auto& f : schema["fields"]) {
    const std::string name = f["name"];
    names.push_back(name);
    INFO(name);
    CHECK_FALSE(f["help"].get<std::string>().empty());
    if (!f.contains("default")) continue;
    std::string pointer = "/" + name;
    for (auto& ch : pointer) ch = ch == '.' ? '/' : ch;
    json explicit_default = minimal;
    explicit_default[json::json_pointer(pointer)] = f["default"];
    const auto r = parse_config(explicit_default);
    REQUIRE(r.ok());
    CHECK(r.value() == plain.value());
  }
  CHECK(names == std::vector<std::string>{"version", "seed", "dtype", "shape.batch", "shape.tokens",
                                          "shape.features", "shape.grid", "layers"});
  const json& limits = schema["limits"];
  CHECK(limits["max_batch"] == Limits::max_batch);
  CHECK(limits["max_tokens"] == Limits::max_tokens);
  CHECK(limits["max_features"] == Limits::max_features);
  CHECK(limits["max_tokens_total"] == Limits::max_tokens_total);
  CHECK(limits["max_activations"] == Limits::max_activations);
  CHECK(limits["max_layers"] == Limits::max_layers);
  CHECK(limits["max_depth"] == Limits::max_depth);
  CHECK(limits["max_parameters"] == Limits::max_parameters);
  CHECK(limits["max_num_heads"] == Limits::max_num_heads);
}

namespace {

void collect_pointers(const json& j, const json::json_pointer& at,
                      std::vector<json::json_pointer>& out) {
  out.push_back(at);
  if (j.is_object())
    for (const auto& item : j.items()) collect_pointers(item.value(), at / item.key(), out);
  else if (j.is_array())
    for (std::size_t i = 0; i < j.size(); ++i) collect_pointers(j[i], at / i, out);
}

}  // namespace

TEST_CASE("config: random mutations of a valid config never throw and always explain errors") {
  std::mt19937 rng(20240611u);
  auto pick = [&](std::size_t n) {
    return std::uniform_int_distribution<std::size_t>(0, n - 1)(rng);
  };

  const json base = json::parse(kFullConfig);
  const json schema = config_schema();
  std::vector<std::string> type_names, keys = {"type", "body", "junk", "shape", "layers", "seed"};
  for (const auto& t : schema["layer_types"]) {
    type_names.push_back(t["name"]);
    for (const auto& o : t["options"]) keys.push_back(o["name"]);
  }
  const std::vector<json> garbage = {
      nullptr,
      true,
      false,
      0,
      -1,
      1,
      2,
      3,
      1.5,
      2.0,
      -0.0,
      1e300,
      -1e300,
      1e-300,
      std::numeric_limits<std::uint64_t>::max(),
      std::numeric_limits<std::int64_t>::min(),
      std::nan(""),
      std::numeric_limits<double>::infinity(),
      "",
      "relu",
      "residual",
      "tanh",
      "eval",
      "float32",
      std::string(500, 'x'),
      std::string("\xff\xfe bad utf8"),
      json::array(),
      json::object(),
      json::parse(R"([{"type": "relu"}])"),
      json::parse(R"({"type": "residual", "body": [{"type": "linear", "out_features": 7}]})"),
      json::binary({1, 2, 3})};

  int ok = 0, failed = 0;
  for (int iteration = 0; iteration < 400; ++iteration) {
    json j = base;
    const std::size_t mutations = 1 + pick(3);
    for (std::size_t m = 0; m < mutations; ++m) {
      std::vector<json::json_pointer> pointers;
      collect_pointers(j, json::json_pointer(), pointers);
      const json::json_pointer at = pointers[pick(pointers.size())];
      json& node = j[at];
      switch (pick(4)) {
        case 0:  // delete the node from its parent
          if (!at.empty()) {
            json& parent = j[at.parent_pointer()];
            if (parent.is_object())
              parent.erase(at.back());
            else
              parent.erase(static_cast<std::size_t>(std::stoul(at.back())));
          }
          break;
        case 1:  // replace it by garbage
          node = garbage[pick(garbage.size())];
          break;
        case 2:  // flip a layer's type
          if (node.is_object() && node.contains("type"))
            node["type"] = type_names[pick(type_names.size())];
          else if (node.is_object())
            node["type"] = garbage[pick(garbage.size())];
          break;
        default:  // insert a key, often a real option of another type
          if (node.is_object())
            node[keys[pick(keys.size())]] = garbage[pick(garbage.size())];
          else if (node.is_array())
            node.push_back(garbage[pick(garbage.size())]);
          break;
      }
    }
    std::string text;
    Result<ExperimentConfig> r = Result<ExperimentConfig>(Error{});
    const std::size_t mode = pick(4);
    if (mode == 0) {
      CHECK_NOTHROW(r = parse_config(j));
    } else {
      text = j.dump(-1, ' ', false, json::error_handler_t::replace);
      if (mode == 2) text.resize(pick(text.size() + 1));
      if (mode == 3 && !text.empty()) text[pick(text.size())] = "{}[]\":,0-.e"[pick(11)];
      CHECK_NOTHROW(r = parse_config_text(text));
    }
    if (r.ok()) {
      ++ok;
      // Whatever parses prints and parses back to the same config.
      const auto again = parse_config(config_to_json(r.value()));
      INFO(j.dump(-1, ' ', false, json::error_handler_t::replace));
      REQUIRE(again.ok());
      CHECK(again.value() == r.value());
    } else {
      ++failed;
      INFO(text);
      CHECK_FALSE(r.error().message.empty());
    }
  }
  MESSAGE(ok << " mutations parsed, " << failed << " were rejected");
  CHECK(ok > 0);
  CHECK(failed > 0);
}
