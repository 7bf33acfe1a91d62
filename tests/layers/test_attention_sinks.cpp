// Attention sinks (attention's `sinks`, as gpt-oss): one learned logit per head in every softmax
// row, against the formula written out here; what they do to the key and value biases; the
// parameter, the parser and the script.
#include <cmath>
#include <string>

#include "export/torch_export.hpp"
#include "model/presets.hpp"
#include "../support.hpp"

using namespace biaslab;
using biaslab::test::build;

namespace {

std::string sinks(const std::string& extra = "") {
  return R"({"version": 1, "seed": 5, "shape": {"batch": 2, "tokens": 4, "features": 8},
      "layers": [{"type": "attention", "num_heads": 2, "sinks": true)" + extra + "}]}";
}

}  // namespace

TEST_CASE("sinks: p_ij = exp(s_ij) / (exp(sink_h) + sum_j' exp(s_ij')) after the causal mask, no value") {
  for (const bool causal : {false, true}) {
    CAPTURE(causal);
    auto b = build(sinks(causal ? R"(, "causal": true)" : ""));
    const Model& m = b.model;
    const Mat x = draw_input(b.config, 0);
    auto val = [&](const char* n) { return m.params[test::param_index(m, std::string("layers.0.") + n)].value; };
    const Mat sink = val("sinks");
    REQUIRE(sink.rows() == 2);
    auto proj = [&](const char* p) {
      Mat y = x * val((std::string(p) + ".weight").c_str()).transpose();
      y.rowwise() += val((std::string(p) + ".bias").c_str()).col(0).transpose();
      return y;
    };
    const Mat q = proj("q_proj"), k = proj("k_proj"), v = proj("v_proj");
    // Score of query row r and key row c in head h: q . k / sqrt(d), d = 4.
    auto score = [&](int r, int c, int h) { return q.row(r).segment(h * 4, 4).dot(k.row(c).segment(h * 4, 4)) / 2; };
    Mat ctx = Mat::Zero(8, 8);
    for (int s = 0; s < 2; ++s)
      for (int h = 0; h < 2; ++h)
        for (int i = 0; i < 4; ++i) {
          double den = std::exp(sink(h, 0));
          for (int j = 0; j < 4; ++j)
            if (!causal || j <= i) den += std::exp(score(s * 4 + i, s * 4 + j, h));
          for (int j = 0; j < 4; ++j)
            if (!causal || j <= i)
              ctx.block(s * 4 + i, h * 4, 1, 4) +=
                  std::exp(score(s * 4 + i, s * 4 + j, h)) / den * v.block(s * 4 + j, h * 4, 1, 4);
        }
    Mat expected = ctx * val("o_proj.weight").transpose();
    expected.rowwise() += val("o_proj.bias").col(0).transpose();
    CHECK_MAX_ABS_LE(forward<double>(m, cast_weights<double>(m), x), expected, 1e-14);
  }
}

TEST_CASE("sinks: the key bias is no longer redundant and the value bias no longer folds; the sinks are bias rows") {
  const Json r = test::report_of(sinks(R"(, "causal": true)"));
  const Json& k = test::bias_row(r, "layers.0.k_proj.bias");
  INFO(test::row_text(k));
  CHECK(k.at("redundant_dim") == 0);
  CHECK(k.at("why").get<std::string>().find("not to the sink logit") != std::string::npos);
  const Json& v = test::bias_row(r, "layers.0.v_proj.bias");
  CHECK(v.at("why").get<std::string>().find("does not fold into the output bias") != std::string::npos);
  const Json& s = test::bias_row(r, "layers.0.sinks");
  INFO(test::row_text(s));
  CHECK(s.at("size") == 2);
  CHECK(s.at("redundant_dim") == 0);
  CHECK(s.at("verdict") == "effective");
  CHECK(s.at("why").get<std::string>().find("sink logit") != std::string::npos);
  for (const Json& f : r.at("folds")) {
    INFO(f.dump());
    CHECK(f.at("rule") != "drop_key_bias");
    CHECK(f.at("rule") != "fold_value_bias");
  }
  // Without sinks both folds apply to the same layer.
  const Json plain = test::report_of(R"({"version": 1, "seed": 5, "shape": {"batch": 2, "tokens": 4, "features": 8},
      "layers": [{"type": "attention", "num_heads": 2, "causal": true}]})");
  CHECK(plain.at("folds").size() == 2);
}

TEST_CASE("sinks: the script builds the layer with sinks=True, and `sinks` is its parameter") {
  const std::string s = export_torch_script(test::config_from(sinks()));
  CHECK(s.find("causal=False, rope=False, sinks=True)") != std::string::npos);
  auto b = build(sinks());
  CHECK(b.model.find_param("layers.0.sinks") >= 0);
}

TEST_CASE("presets: gpt-oss-block says what its report finds") {
  const Json r = test::report_of(find_preset("gpt-oss-block")->config);
  int attention_rows = 0;
  for (const Json& b : r.at("biases")) {
    INFO(test::row_text(b));
    CHECK(b.at("verdict") == "effective");  // "every bias is effective"
    const std::string name = b.at("param");
    if (name.rfind("layers.0.body.1.", 0) == 0) ++attention_rows;
  }
  CHECK(attention_rows == 5);  // q, k, v, o biases and the sinks
  for (const Json& f : r.at("folds")) {
    INFO(f.dump());
    CHECK(f.at("rule") == "fold_rmsnorm_gain");  // no drop_key_bias, no fold_value_bias
  }
}
