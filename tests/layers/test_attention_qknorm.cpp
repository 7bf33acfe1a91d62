// QK-norm (attention's `qk_norm`, as Qwen3): each head's queries and keys normalised over the head
// dimension after the projections and before RoPE, against the formula written out here; what it
// leaves redundant of the q/k biases and of the norms' own shifts; the names and the script.
#include <cmath>
#include <string>

#include "export/torch_export.hpp"
#include "model/presets.hpp"
#include "../support.hpp"

using namespace biaslab;
using biaslab::test::build;

namespace {

std::string qk(const std::string& norm, const std::string& extra = "", int features = 16) {
  return R"({"version": 1, "seed": 31, "shape": {"batch": 2, "tokens": 4, "features": )" + std::to_string(features) +
         R"(}, "layers": [{"type": "attention", "num_heads": 4, "num_kv_heads": 2, "qk_norm": ")" + norm + "\"" + extra +
         "}]}";
}

// LayerNorm (centre = true) or RMSNorm of one row over its d values, eps 1e-6, then gain and shift.
Eigen::RowVectorXd norm_row(Eigen::RowVectorXd v, bool centre, const Mat& gain, const Mat* shift) {
  if (centre) v.array() -= v.mean();
  v /= std::sqrt(v.squaredNorm() / double(v.size()) + 1e-6);
  v = v.cwiseProduct(gain.col(0).transpose());
  if (shift) v += shift->col(0).transpose();
  return v;
}

}  // namespace

TEST_CASE("qk_norm: q and k are normalised per head over head_dim, one gain (and shift) for all heads") {
  for (const char* norm : {"layernorm", "rmsnorm"}) {
    CAPTURE(norm);
    const bool centre = std::string(norm) == "layernorm";
    auto b = build(qk(norm));
    const Model& m = b.model;
    auto val = [&](const std::string& n) -> const Mat& { return m.params[test::param_index(m, "layers.0." + n)].value; };
    REQUIRE(val("q_norm.weight").rows() == 4);
    REQUIRE(val("k_norm.weight").rows() == 4);
    CHECK((m.find_param("layers.0.q_norm.bias") >= 0) == centre);
    CHECK((m.find_param("layers.0.k_norm.bias") >= 0) == centre);
    const Mat x = draw_input(b.config, 0);
    auto proj = [&](const std::string& p) {
      Mat y = x * val(p + ".weight").transpose();
      y.rowwise() += val(p + ".bias").col(0).transpose();
      return y;
    };
    Mat q = proj("q_proj"), k = proj("k_proj");
    const Mat v = proj("v_proj");
    const Mat* qs = centre ? &val("q_norm.bias") : nullptr;
    const Mat* ks = centre ? &val("k_norm.bias") : nullptr;
    for (int r = 0; r < 8; ++r) {
      for (int h = 0; h < 4; ++h) q.block(r, h * 4, 1, 4) = norm_row(q.block(r, h * 4, 1, 4), centre, val("q_norm.weight"), qs);
      for (int h = 0; h < 2; ++h) k.block(r, h * 4, 1, 4) = norm_row(k.block(r, h * 4, 1, 4), centre, val("k_norm.weight"), ks);
    }
    Mat ctx = Mat::Zero(8, 16);
    for (int s = 0; s < 2; ++s)
      for (int h = 0; h < 4; ++h) {
        const int g = h / 2;  // two query heads per key/value head
        Mat p(4, 4);
        for (int i = 0; i < 4; ++i)
          for (int j = 0; j < 4; ++j) p(i, j) = std::exp((q.block(s * 4 + i, h * 4, 1, 4) * k.block(s * 4 + j, g * 4, 1, 4).transpose())(0, 0) / 2);
        for (int i = 0; i < 4; ++i) p.row(i) /= p.row(i).sum();
        ctx.block(s * 4, h * 4, 4, 4) = p * v.block(s * 4, g * 4, 4, 4);
      }
    Mat expected = ctx * val("o_proj.weight").transpose();
    expected.rowwise() += val("o_proj.bias").col(0).transpose();
    CHECK_MAX_ABS_LE(forward<double>(m, cast_weights<double>(m), x), expected, 1e-13);
  }
}

TEST_CASE("qk_norm layernorm: of the q/k biases only each head's mean cancels; k_norm.bias cancels whole") {
  const Json r = test::report_of(qk("layernorm"));
  auto dim = [&](const char* n) {
    const Json& row = test::bias_row(r, std::string("layers.0.") + n);
    INFO(test::row_text(row));
    return row.at("redundant_dim").get<int>();
  };
  CHECK(dim("q_proj.bias") == 4);  // one per query head (16 dims)
  CHECK(dim("k_proj.bias") == 2);  // one per key/value head (8 dims)
  CHECK(dim("k_norm.bias") == 4);  // all of it: it shifts a whole score row
  CHECK(dim("q_norm.bias") == 1);  // along 1 / k_norm.weight (normalised keys have zero mean)
  CHECK(dim("v_proj.bias") == 0);
  const Json& k = test::bias_row(r, "layers.0.k_proj.bias");
  CHECK(k.at("why").get<std::string>().find("qk_norm normalises each head") != std::string::npos);
  const Json& kn = test::bias_row(r, "layers.0.k_norm.bias");
  CHECK(kn.at("verdict") == "redundant");
  CHECK(kn.at("why").get<std::string>().find("softmax is shift invariant") != std::string::npos);
  for (const Json& f : r.at("folds")) {
    INFO(f.dump());
    CHECK(f.at("rule") != "drop_key_bias");  // the key bias is no longer all redundant
  }
  // With RoPE the shared shift of the keys rotates by position and stops cancelling.
  const Json rope = test::report_of(qk("layernorm", R"(, "rope": true)"));
  const Json& kr = test::bias_row(rope, "layers.0.k_norm.bias");
  INFO(test::row_text(kr));
  CHECK(kr.at("redundant_dim") == 0);
  CHECK(kr.at("why").get<std::string>().find("rotated by RoPE") != std::string::npos);
}

TEST_CASE("qk_norm rmsnorm: nothing of the q/k biases cancels, and there are no norm shifts") {
  const Json r = test::report_of(qk("rmsnorm"));
  for (const char* n : {"layers.0.q_proj.bias", "layers.0.k_proj.bias"}) {
    const Json& row = test::bias_row(r, n);
    INFO(test::row_text(row));
    CHECK(row.at("redundant_dim") == 0);
  }
  for (const Json& b : r.at("biases")) CHECK(b.at("param").get<std::string>().find("_norm.") == std::string::npos);
}

TEST_CASE("qk_norm: the script builds q_norm and k_norm; the option round-trips; the default is none") {
  const std::string s = export_torch_script(test::config_from(qk("rmsnorm")));
  CHECK(s.find(R"(, qk_norm="rmsnorm"))") != std::string::npos);
  CHECK(s.find("class RMSNorm") != std::string::npos);  // the per-head norm's class is emitted
  const std::string l = export_torch_script(test::config_from(qk("layernorm")));
  CHECK(l.find(R"(, qk_norm="layernorm"))") != std::string::npos);
  auto plain = build(R"({"version": 1, "seed": 1, "shape": {"batch": 1, "tokens": 2, "features": 8}, "layers": [{"type": "attention", "num_heads": 2}]})");
  CHECK(plain.model.find_param("layers.0.q_norm.weight") < 0);
  CHECK(layer_to_json(plain.config.layers[0]).count("qk_norm") == 0);
}

TEST_CASE("presets: qwen3-block has no biases, and its sentence's counterfactuals hold") {
  const Preset* p = find_preset("qwen3-block");
  REQUIRE(p != nullptr);
  const Json r = test::report_of(p->config);
  CHECK(r.at("biases").empty());  // Qwen3 has no attention or MLP biases
  for (const Json& f : r.at("folds")) CHECK(f.at("rule") == "fold_rmsnorm_gain");
  // "switch q_bias or k_bias on": nothing of them cancels under the RMS QK-norm...
  std::string with = p->config;
  const std::string off = R"("q_bias": false, "k_bias": false)";
  REQUIRE(with.find(off) != std::string::npos);
  with.replace(with.find(off), off.size(), R"("q_bias": true, "k_bias": true)");
  const Json rb = test::report_of(with);
  for (const char* n : {"layers.0.body.1.q_proj.bias", "layers.0.body.1.k_proj.bias"}) {
    const Json& row = test::bias_row(rb, n);
    INFO(test::row_text(row));
    CHECK(row.at("redundant_dim") == 0);
  }
  // ... and under a LayerNorm QK-norm each head's mean does (8 query heads, 2 key/value heads).
  std::string ln = with;
  ln.replace(ln.find(R"("qk_norm": "rmsnorm")"), 20, R"("qk_norm": "layernorm")");
  const Json rl = test::report_of(ln);
  CHECK(test::bias_row(rl, "layers.0.body.1.q_proj.bias").at("redundant_dim") == 8);
  CHECK(test::bias_row(rl, "layers.0.body.1.k_proj.bias").at("redundant_dim") == 2);
}
