// Grouped-query and multi-query attention (attention's num_kv_heads, cpp/layers/attention.cpp, attention_kernel.cpp):
// the forward against multi-head attention with repeated key/value heads, the parameter shapes,
// the key and value biases, the parser's message and the script's argument.
#include <string>

#include "export/torch_export.hpp"
#include "layers/attention.hpp"
#include "../support.hpp"

using namespace biaslab;
using biaslab::test::build;

namespace {

std::string gqa(int heads, int kv_heads, const std::string& extra = "") {
  return R"({"version": 1, "seed": 21, "shape": {"batch": 2, "tokens": 5, "features": 16},
      "layers": [{"type": "attention", "num_heads": )" + std::to_string(heads) +
         (kv_heads ? R"(, "num_kv_heads": )" + std::to_string(kv_heads) : std::string()) + extra + "}]}";
}

}  // namespace

TEST_CASE("gqa: query head h reads kv head h / (heads / kv_heads), as multi-head attention with k and v repeated") {
  for (const bool rope : {false, true}) {
    CAPTURE(rope);
    const std::string extra = rope ? R"(, "rope": true, "causal": true)" : "";
    auto grouped = build(gqa(4, 2, extra));
    auto full = build(gqa(4, 0, extra));
    // The multi-head model's k and v weights and biases: each kv head copied to its 2 query
    // heads (rows 0-3 and 4-7 of the grouped projection serve heads 0, 1 and 2, 3).
    const Mat R = repeat_kv_matrix(4, 2, 4);
    REQUIRE(R.rows() == 16);
    REQUIRE(R.cols() == 8);
    for (const char* name : {"q_proj.weight", "q_proj.bias", "o_proj.weight", "o_proj.bias"}) {
      const std::string n = std::string("layers.0.") + name;
      full.model.params[test::param_index(full.model, n)].value = grouped.model.params[test::param_index(grouped.model, n)].value;
    }
    for (const char* name : {"k_proj.weight", "k_proj.bias", "v_proj.weight", "v_proj.bias"}) {
      const std::string n = std::string("layers.0.") + name;
      const Mat& g = grouped.model.params[test::param_index(grouped.model, n)].value;
      CHECK(g.rows() == 8);
      full.model.params[test::param_index(full.model, n)].value = R * g;
    }
    const Mat x = draw_input(grouped.config, 0);
    const Mat yg = forward<double>(grouped.model, cast_weights<double>(grouped.model), x);
    const Mat yf = forward<double>(full.model, cast_weights<double>(full.model), x);
    CHECK_MAX_ABS_LE(yg, yf, 1e-14);
  }
}

TEST_CASE("gqa: k_proj and v_proj are kv_heads * head_dim wide in the report's parameter list") {
  const Json r = test::report_of(gqa(4, 1));
  int seen = 0;
  for (const Json& p : r.at("layers").at(0).at("params")) {
    const std::string name = p.at("name");
    const std::string local = name.substr(name.find('.', name.find('.') + 1) + 1);
    if (local == "k_proj.weight" || local == "v_proj.weight") {
      CHECK(p.at("shape") == Json::array({4, 16}));
      ++seen;
    }
    if (local == "k_proj.bias" || local == "v_proj.bias") {
      CHECK(p.at("shape") == Json::array({4}));
      ++seen;
    }
  }
  CHECK(seen == 4);
}

TEST_CASE("gqa: the key bias stays redundant and the value bias folds through repeat_kv") {
  const Json r = test::report_of(gqa(4, 2));
  const Json& k = test::bias_row(r, "layers.0.k_proj.bias");
  INFO(test::row_text(k));
  CHECK(k.at("size") == 8);
  CHECK(k.at("redundant_dim") == 8);
  CHECK(k.at("verdict") == "redundant");
  int value_folds = 0;
  for (const Json& f : r.at("folds"))
    if (f.at("rule") == "fold_value_bias") {
      INFO(f.dump());
      CHECK(f.at("exact") == true);
      ++value_folds;
    }
  CHECK(value_folds == 1);
  CHECK(test::bias_row(r, "layers.0.v_proj.bias").at("why").get<std::string>().find("repeat_kv(b_V)") != std::string::npos);
}

TEST_CASE("gqa: with partial RoPE the key bias is redundant on each kv head's non-rotated dimensions") {
  // 2 query heads of d = 8 sharing 1 kv head, r = 4: 8 - 4 = 4 of the 8 key-bias directions.
  const Json r = test::report_of(gqa(2, 1, R"(, "rope": true, "rotary_dim": 4)"));
  const Json& k = test::bias_row(r, "layers.0.k_proj.bias");
  INFO(test::row_text(k));
  CHECK(k.at("size") == 8);
  CHECK(k.at("redundant_dim") == 4);
  // The key bias enters inside the layer: o_proj's weight (16 x 16) says nothing about its 8
  // dimensions, so the directions are not described through it.
  CHECK(k.at("directions") == "4 of 8 directions");
}

TEST_CASE("gqa: num_kv_heads must divide num_heads, and the script passes it on") {
  const auto bad = parse_config_text(gqa(4, 3));
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().what() == "layers[0].num_kv_heads: 3 does not divide num_heads 4");
  CHECK(export_torch_script(test::config_from(gqa(4, 2))).find("num_heads=4, num_kv_heads=2, q_bias=True") != std::string::npos);
  CHECK(export_torch_script(test::config_from(gqa(4, 0))).find("Attention(16, num_heads=4, q_bias=True") != std::string::npos);
}
