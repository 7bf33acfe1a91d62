// Cross-attention (attention's `context_tokens`, as Whisper's encoder_attn): queries from the
// layer's input, keys and values from a context drawn with every input. The forward against the
// formula written out here, the refusals, what it does to the biases and folds, the invariances,
// the script, and the whisper-decoder-block preset.
#include <cmath>
#include <map>
#include <set>
#include <string>

#include "export/torch_export.hpp"
#include "model/presets.hpp"
#include "../support.hpp"

using namespace biaslab;
using biaslab::test::build;

namespace {

// Batch 2, 3 query tokens, 8 features, a context of 5 tokens; `before` goes in front of it.
std::string cross(const std::string& extra = "", const std::string& before = "", int features = 8) {
  return R"({"version": 1, "seed": 5, "shape": {"batch": 2, "tokens": 3, "features": )" + std::to_string(features) +
         R"(}, "layers": [)" + before + R"({"type": "attention", "num_heads": 2, "context_tokens": 5)" + extra + "}]}";
}

std::string error_of(const std::string& text) {
  const auto r = parse_config_text(text);
  REQUIRE_FALSE(r.ok());
  return r.error().path + ": " + r.error().message;
}

}  // namespace

TEST_CASE("cross-attention: softmax(q k^T / sqrt(d)) v with q from the input and k, v from the context") {
  // The layer reads 12 features after a Linear, the context has the experiment's 8: k_proj and
  // v_proj are (kv, 8), q_proj (12, 12).
  auto b = build(cross(R"(, "num_kv_heads": 1)", R"({"type": "linear", "out_features": 12}, )"));
  const Model& m = b.model;
  CHECK(m.context_tokens == 5);
  const Mat x = draw_input(b.config, 0);
  REQUIRE(x.rows() == 2 * 3 + 2 * 5);
  auto val = [&](const std::string& n) { return m.params[test::param_index(m, n)].value; };
  CHECK(val("layers.1.q_proj.weight").cols() == 12);
  CHECK(val("layers.1.k_proj.weight").rows() == 6);  // one kv head of d = 6
  CHECK(val("layers.1.k_proj.weight").cols() == 8);
  CHECK(val("layers.1.v_proj.weight").cols() == 8);
  const Mat in = x.topRows(6), ctx = x.bottomRows(10);
  auto proj = [&](const Mat& z, const std::string& p) {
    Mat y = z * val(p + ".weight").transpose();
    y.rowwise() += val(p + ".bias").col(0).transpose();
    return y;
  };
  const Mat h = proj(in, "layers.0");
  const Mat q = proj(h, "layers.1.q_proj"), k = proj(ctx, "layers.1.k_proj"), v = proj(ctx, "layers.1.v_proj");
  Mat out = Mat::Zero(6, 12);
  for (int s = 0; s < 2; ++s)
    for (int hd = 0; hd < 2; ++hd)  // both query heads read the one kv head
      for (int i = 0; i < 3; ++i) {
        double den = 0;
        Vec e(5);
        for (int j = 0; j < 5; ++j) {
          e(j) = std::exp(q.row(s * 3 + i).segment(hd * 6, 6).dot(k.row(s * 5 + j)) / std::sqrt(6.0));
          den += e(j);
        }
        for (int j = 0; j < 5; ++j) out.block(s * 3 + i, hd * 6, 1, 6) += e(j) / den * v.row(s * 5 + j);
      }
  Mat expected = out * val("layers.1.o_proj.weight").transpose();
  expected.rowwise() += val("layers.1.o_proj.bias").col(0).transpose();
  const Mat y = forward<double>(m, cast_weights<double>(m), x);
  CHECK(y.rows() == 6);
  CHECK_MAX_ABS_LE(y, expected, 1e-14);
  // Every input draws its own context.
  const Mat x1 = draw_input(b.config, 1);
  CHECK(test::max_abs_diff(x1.bottomRows(10), ctx) > 0.1);
}

TEST_CASE("cross-attention: refused with causal or rope, and when two layers disagree on the context") {
  CHECK(error_of(cross(R"(, "causal": true)")) ==
        "layers[0].context_tokens: cross-attention reads a separate context, and causal masks a token's own "
        "sequence: set causal to false, or context_tokens to 0 for self-attention");
  CHECK(error_of(cross(R"(, "rope": true)")).rfind("layers[0].context_tokens: cross-attention reads a separate context, and rope", 0) == 0);
  const std::string two = R"({"version": 1, "shape": {"batch": 2, "tokens": 3, "features": 8}, "layers": [
      {"type": "attention", "num_heads": 2, "context_tokens": 5},
      {"type": "residual", "body": [{"type": "attention", "num_heads": 2, "context_tokens": 6}]}]})";
  CHECK(error_of(two) == "layers[1].body[0].context_tokens: every cross-attention layer reads the same context, of 5 "
                         "tokens (layers[0].context_tokens), got 6");
  // batch * context_tokens counts against the tokens limit, like batch * tokens.
  const std::string big = R"({"version": 1, "shape": {"batch": 8, "tokens": 3, "features": 8}, "layers": [
      {"type": "attention", "num_heads": 2, "context_tokens": 1000}]})";
  CHECK(error_of(big).rfind("layers[0].context_tokens: batch * context_tokens = 8 * 1000 = 8000 exceeds", 0) == 0);
  // The keys and values of the context count against the activations limit at their own width.
  const std::string wide = R"({"version": 1, "shape": {"batch": 4, "tokens": 1, "features": 1}, "layers": [
      {"type": "linear", "out_features": 1024, "bias": false}, {"type": "attention", "num_heads": 1, "context_tokens": 1024}]})";
  CHECK(error_of(wide) == "layers[1].context_tokens: batch * context_tokens * the key width = 4096 * 1024 exceeds the "
                          "limit of 2097152 activations");
  // The same number of context tokens in two layers is one shared context.
  auto b = build(R"({"version": 1, "shape": {"batch": 2, "tokens": 3, "features": 8}, "layers": [
      {"type": "attention", "num_heads": 2, "context_tokens": 5}, {"type": "attention", "num_heads": 4, "context_tokens": 5}]})");
  CHECK(draw_input(b.config, 0).rows() == 6 + 10);
}

TEST_CASE("cross-attention: the key bias is redundant, the value bias folds, a norm before it folds into q alone") {
  const Json r = test::report_of(cross("", R"({"type": "layernorm"}, )"), true, true);
  const Json& k = test::bias_row(r, "layers.1.k_proj.bias");
  INFO(test::row_text(k));
  CHECK(k.at("redundant_dim") == 8);
  const Json& v = test::bias_row(r, "layers.1.v_proj.bias");
  CHECK(v.at("absorbed_by") == "layers.1.o_proj.bias");
  // The LayerNorm's shift reaches the queries alone: nothing cancels it, and it moves into
  // q_proj's bias only.
  const Json& shift = test::bias_row(r, "layers.0.bias");
  INFO(test::row_text(shift));
  CHECK(shift.at("redundant_dim") == 0);
  CHECK(shift.at("why") == "feeds the query projection of a cross-attention layer");
  bool folded = false;
  for (const Json& f : r.at("folds")) {
    INFO(f.dump());
    CHECK(f.at("exact") == true);
    if (f.at("rule") != "fold_layernorm_affine") continue;
    folded = true;
    CHECK(f.at("params_removed") == 16);  // gain and shift; no bias appears on k_proj or v_proj
  }
  CHECK(folded);
  CHECK(test::probe_row(r, "attention: permute the context's tokens").at("expected") == "invariant");
  CHECK(test::probe_row(r, "attention: permute the context's tokens").at("agrees") == true);
  CHECK(test::probe_row(r, "attention: permute queries").at("expected") == "equivariant");
  CHECK(test::probe_row(r, "model: permute the context's tokens").at("agrees") == true);
  CHECK(test::probe_row(r, "model: permute tokens").at("expected") == "equivariant");
}

TEST_CASE("cross-attention: with one context token every softmax row has one key, and the query bias is redundant") {
  const Json r = test::report_of(R"({"version": 1, "seed": 2, "shape": {"batch": 2, "tokens": 3, "features": 4},
      "layers": [{"type": "attention", "num_heads": 2, "context_tokens": 1}]})");
  const Json& q = test::bias_row(r, "layers.0.q_proj.bias");
  INFO(test::row_text(q));
  CHECK(q.at("redundant_dim") == 4);
  CHECK(q.at("why") == "each softmax row has a single key, whose weight is 1 whatever its score");
}

TEST_CASE("cross-attention: the script builds it with the context, whose width is the experiment's") {
  const std::string s = export_torch_script(test::config_from(cross("", R"({"type": "linear", "out_features": 12}, )")));
  CHECK(s.find("context_tokens=5, context_size=8)") != std::string::npos);
}

TEST_CASE("presets: whisper-decoder-block says what its report finds") {
  const Json r = test::report_of(find_preset("whisper-decoder-block")->config, true, true);
  const std::map<std::string, int> expected{
      {"layers.0.body.0.bias", 0}, {"layers.0.body.1.q_proj.bias", 0}, {"layers.0.body.1.v_proj.bias", 1},
      {"layers.0.body.1.o_proj.bias", 1}, {"layers.1.body.0.bias", 0}, {"layers.1.body.1.q_proj.bias", 0},
      {"layers.1.body.1.v_proj.bias", 1}, {"layers.1.body.1.o_proj.bias", 1}, {"layers.2.body.0.bias", 0},
      {"layers.2.body.1.bias", 0}, {"layers.2.body.3.bias", 1}, {"layers.3.bias", 0}};
  CHECK(test::dims(r) == expected);
  for (const Json& f : r.at("folds")) CHECK(f.at("exact") == true);
  CHECK(test::rules(r) == std::multiset<std::string>{"centre_bias_before_norm", "centre_writers", "fold_layernorm_affine",
                                            "fold_layernorm_affine", "fold_layernorm_affine", "fold_value_bias",
                                            "fold_value_bias"});
  // The minimal model drops the key bias the first fold gave the self-attention, and no other.
  std::multiset<std::string> minimal;
  for (const Json& f : r.at("minimal_model").at("folds_applied")) minimal.insert(f.at("rule").get<std::string>());
  CHECK(minimal.count("drop_key_bias") == 1);
  CHECK(test::probe_row(r, "model: permute the context's tokens").at("holds") == true);
  CHECK(test::probe_row(r, "model: permute tokens").at("holds") == false);
  const std::string claim = find_preset("whisper-decoder-block")->claim;
  for (const char* quoted : {"1 of 96", "centre_writers", "fold_value_bias", "drop_key_bias", "q_proj alone",
                             "context_tokens 12", "changes nothing"})
    CHECK(claim.find(quoted) != std::string::npos);
}
