// Every claim of /work/shared/design/theory.md, sections 1-3, 5 and 6, checked through analyze().
//
// A bias of size n is redundant (n of n), partly_redundant (0 < k < n) or effective (0 of n);
// "redundant_dim" is the structural answer, "verdict" the measured one, and they must agree.
#include <cmath>
#include <map>
#include <set>
#include <string>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "analysis/measure.hpp"
#include "model/presets.hpp"
#include "analysis/structure.hpp"
#include "support.hpp"

using namespace biaslab;
using biaslab::test::bias_row;
using biaslab::test::json;
using biaslab::test::report_of;
using biaslab::test::row_text;

namespace {

std::string net(int batch, int tokens, int features, const std::string& layers,
                const std::string& dtype = "float64", int seed = 3) {
  return R"({"version": 1, "seed": )" + std::to_string(seed) + R"(, "dtype": ")" + dtype +
         R"(", "shape": {"batch": )" + std::to_string(batch) + R"(, "tokens": )" +
         std::to_string(tokens) + R"(, "features": )" + std::to_string(features) +
         R"(}, "layers": [)" + layers + "]}";
}

// redundant_dim == k, the verdict that k implies, and a consistent row.
void expect_bias(const json& report, const std::string& param, int k) {
  const json& b = bias_row(report, param);
  INFO(row_text(b));
  const int n = b.at("size");
  const char* verdict = k == n ? "redundant" : k == 0 ? "effective" : "partly_redundant";
  CHECK(b.at("redundant_dim") == k);
  CHECK(b.at("verdict") == verdict);
  CHECK(b.at("consistent") == true);
}
void expect_all(const json& report, const std::string& param) {
  expect_bias(report, param, bias_row(report, param).at("size").get<int>());
}

// The fold row of `rule` (the first one) must exist and be exact.
void expect_exact_fold(const json& report, const std::string& rule) {
  bool found = false;
  for (const json& f : report.at("folds")) {
    if (f.at("rule") != rule) continue;
    found = true;
    INFO(f.dump());
    CHECK_LE_TOL(f.at("max_abs_delta").get<double>(), f.at("noise_floor").get<double>(),
                 "fold " << rule << " output change vs its measured noise floor");
    CHECK(f.at("exact") == true);
    break;
  }
  INFO("folds: " << report.at("folds").dump());
  CHECK(found);
}

const std::string kAttn = R"({"type": "attention", "num_heads": 2)";

}  // namespace

// ---------------------------------------------------------------------------------------------
// 1. Attention
TEST_CASE("theory: the key bias is redundant in all directions; causal masks keep it so, RoPE does not") {
  SUBCASE("no positions") {
    const json r = report_of(net(2, 6, 16, kAttn + "}"));
    expect_all(r, "layers.0.k_proj.bias");
    CHECK(bias_row(r, "layers.0.k_proj.bias").at("directions") == "all");
    expect_exact_fold(r, "drop_key_bias");
  }
  SUBCASE("causal mask: masked scores stay masked, the shift is still constant over a row") {
    const json r = report_of(net(2, 6, 16, kAttn + R"(, "causal": true})"));
    expect_all(r, "layers.0.k_proj.bias");
    expect_exact_fold(r, "drop_key_bias");
  }
  SUBCASE("RoPE after the projection: R_j b_K depends on the key position, redundant_dim 0") {
    const json r = report_of(net(2, 6, 16, kAttn + R"(, "rope": true})"));
    expect_bias(r, "layers.0.k_proj.bias", 0);
    for (const json& f : r.at("folds")) CHECK(f.at("rule") != "drop_key_bias");
  }
  SUBCASE("RoPE and a causal mask: still 0") {
    const json r = report_of(net(2, 6, 16, kAttn + R"(, "rope": true, "causal": true})"));
    expect_bias(r, "layers.0.k_proj.bias", 0);
  }
}

TEST_CASE("theory: query, value and output biases of attention alone are effective") {
  const json r = report_of(net(2, 6, 16, kAttn + "}"));
  SUBCASE("query bias: b_Q . k_j varies with j") { expect_bias(r, "layers.0.q_proj.bias", 0); }
  SUBCASE("output bias: added to the output") { expect_bias(r, "layers.0.o_proj.bias", 0); }
  SUBCASE("value bias: not redundant, but folds exactly into the output bias") {
    expect_bias(r, "layers.0.v_proj.bias", 0);
    CHECK(bias_row(r, "layers.0.v_proj.bias").at("absorbed_by") == "layers.0.o_proj.bias");
    expect_exact_fold(r, "fold_value_bias");
  }
  SUBCASE("value bias without an output bias still folds: b_O' = W_O b_V") {
    const json r2 = report_of(net(2, 6, 16, kAttn + R"(, "o_bias": false})"));
    expect_bias(r2, "layers.0.v_proj.bias", 0);
    CHECK(bias_row(r2, "layers.0.v_proj.bias").at("absorbed_by") == "layers.0.o_proj.bias");
    expect_exact_fold(r2, "fold_value_bias");
  }
}

TEST_CASE("theory: few tokens and wide heads fake null directions of b_Q at one input; stacking inputs removes them") {
  // 1 sequence of 4 tokens, 128 features, 2 heads: one input shows 128 - 2 * (4 - 1) = 122
  // "redundant" directions (each head sees only T - 1 = 3 key differences). True answer: 0.
  const json r = report_of(net(1, 4, 128, R"({"type": "attention", "num_heads": 2, "v_bias": false, "o_bias": false})",
                               "float64", 2));
  const json& q = bias_row(r, "layers.0.q_proj.bias");
  INFO(row_text(q));
  INFO("structure: " << q.at("structure").dump());
  expect_bias(r, "layers.0.q_proj.bias", 0);
  CHECK(q.at("structure").at("samples").get<int>() > 1);
  const json& history = q.at("structure").at("rank_history");
  REQUIRE(history.size() >= 2);
  CHECK(128 - history[0].get<int>() == 122);
}

// ---------------------------------------------------------------------------------------------
// 2. A bias followed by a normalisation or softmax
TEST_CASE("theory: a bias before a normalisation or softmax loses exactly the part the next op subtracts") {
  auto after = [](const std::string& next, int batch = 2, int tokens = 5, int features = 16) {
    return report_of(net(batch, tokens, features, R"({"type": "linear"}, )" + next));
  };
  SUBCASE("BatchNorm train: all (the batch mean absorbs it)") {
    const json r = after(R"({"type": "batchnorm"})");
    expect_all(r, "layers.0.bias");
    expect_exact_fold(r, "drop_bias_before_norm");
  }
  SUBCASE("BatchNorm train with batch 1: the mean over tokens still absorbs all") {
    expect_all(after(R"({"type": "batchnorm"})", 1, 3, 4), "layers.0.bias");
  }
  SUBCASE("BatchNorm eval: 0, and Linear + BN fuse exactly into one Linear") {
    const json r = after(R"({"type": "batchnorm", "mode": "eval"})");
    expect_bias(r, "layers.0.bias", 0);
    expect_bias(r, "layers.1.bias", 0);
    expect_exact_fold(r, "fuse_linear_batchnorm_eval");
  }
  SUBCASE("LayerNorm: 1, the all-ones direction") {
    const json r = after(R"({"type": "layernorm"})");
    expect_bias(r, "layers.0.bias", 1);
    CHECK(bias_row(r, "layers.0.bias").at("directions") == "all-ones");
    expect_exact_fold(r, "centre_bias_before_norm");
  }
  SUBCASE("LayerNorm over 1 feature: the all-ones direction is the whole bias") {
    expect_all(after(R"({"type": "layernorm"})", 2, 3, 1), "layers.0.bias");
  }
  SUBCASE("RMSNorm: 0 (no centring)") { expect_bias(after(R"({"type": "rmsnorm"})"), "layers.0.bias", 0); }
  SUBCASE("GroupNorm with 4 groups: 4, constant within each group") {
    const json r = after(R"({"type": "groupnorm", "num_groups": 4})");
    expect_bias(r, "layers.0.bias", 4);
    const json& b = bias_row(r, "layers.0.bias");
    CHECK(b.at("directions") == "constant within each of the 4 groups");
    // Each reported basis vector is constant on each group of 16 / 4 = 4 features.
    REQUIRE(b.contains("null_basis"));
    double spread = 0;
    for (const json& v : b.at("null_basis"))
      for (int g = 0; g < 4; ++g)
        for (int i = 1; i < 4; ++i)
          spread = std::max(spread, std::abs(v[g * 4 + i].get<double>() - v[g * 4].get<double>()));
    CHECK_LE_TOL(spread, 1e-8, "max spread of a null basis vector within a group");
  }
  SUBCASE("GroupNorm with 1 group behaves like a per-sample LayerNorm over tokens: 1") {
    expect_bias(after(R"({"type": "groupnorm", "num_groups": 1})"), "layers.0.bias", 1);
  }
  SUBCASE("InstanceNorm: all (the per-feature mean over tokens absorbs it)") {
    const json r = after(R"({"type": "instancenorm"})");
    expect_all(r, "layers.0.bias");
    expect_exact_fold(r, "drop_bias_before_norm");
  }
  SUBCASE("softmax over features: 1, the all-ones direction") {
    const json r = after(R"({"type": "softmax"})");
    expect_bias(r, "layers.0.bias", 1);
    CHECK(bias_row(r, "layers.0.bias").at("directions") == "all-ones");
  }
  SUBCASE("ReLU: 0") { expect_bias(after(R"({"type": "relu"})"), "layers.0.bias", 0); }
  SUBCASE("GELU exact: 0") { expect_bias(after(R"({"type": "gelu"})"), "layers.0.bias", 0); }
  SUBCASE("GELU tanh: 0") { expect_bias(after(R"({"type": "gelu", "approximate": "tanh"})"), "layers.0.bias", 0); }
}

TEST_CASE("theory: a bias before a Linear W2 loses the null space of W2, F_in - rank W2, and the rest folds") {
  SUBCASE("W2: 12 -> 5, rank 5: nullity 7") {
    const json r = report_of(net(2, 4, 8, R"({"type": "linear", "out_features": 12}, {"type": "linear", "out_features": 5})"));
    expect_bias(r, "layers.0.bias", 12 - 5);
    CHECK(bias_row(r, "layers.0.bias").at("directions") == "null space of layers.1.weight");
    expect_bias(r, "layers.1.bias", 0);
    expect_exact_fold(r, "merge_linear_linear");
  }
  SUBCASE("W2: 6 -> 10, full column rank: 0") {
    const json r = report_of(net(2, 4, 8, R"({"type": "linear", "out_features": 6}, {"type": "linear", "out_features": 10})"));
    expect_bias(r, "layers.0.bias", 0);
  }
  SUBCASE("W2 of rank 2 (set by hand, 12 -> 5): nullity 12 - 2 = 10") {
    // analyze() draws full-rank weights, so this case goes to the structural solver directly.
    auto b = biaslab::test::build(net(2, 4, 8, R"({"type": "linear", "out_features": 12}, {"type": "linear", "out_features": 5})"));
    Mat& W2 = b.model.params[biaslab::test::param_index(b.model, "layers.1.weight")].value;
    const Mat low_rank = W2.leftCols(2) * W2.topRows(2);  // (5, 2) (2, 12): rank 2
    W2 = low_rank;
    REQUIRE(Eigen::FullPivLU<Mat>(W2).rank() == 2);
    TracePool pool(b.model, b.config);
    StructureSolver solver(b.model, pool);
    const Structure st = solver.solve(biaslab::test::param_index(b.model, "layers.0.bias"));
    CAPTURE(st.samples);
    CHECK(st.redundant_dim == 10);
    const double leak = (W2 * st.null_basis).cwiseAbs().maxCoeff();
    CHECK_LE_TOL(leak, 1e-10, "max |W2 * null_basis|");
  }
}

// ---------------------------------------------------------------------------------------------
// 3. Blocks
TEST_CASE("theory: post-norm attention LN(x + Attn(x)): b_K all, b_V 1, b_O 1, b_Q 0") {
  const json r = report_of(net(2, 6, 16, R"({"type": "residual", "body": [{"type": "attention", "num_heads": 2}]}, {"type": "layernorm"})"));
  expect_all(r, "layers.0.body.0.k_proj.bias");
  expect_bias(r, "layers.0.body.0.q_proj.bias", 0);
  expect_bias(r, "layers.0.body.0.v_proj.bias", 1);
  CHECK(bias_row(r, "layers.0.body.0.v_proj.bias").at("directions") == "W_O b_V along all-ones");
  expect_bias(r, "layers.0.body.0.o_proj.bias", 1);
  CHECK(bias_row(r, "layers.0.body.0.o_proj.bias").at("directions") == "all-ones");
}

TEST_CASE("theory: post-norm FFN LN(x + W2 act(W1 x + b1) + b2): b2 loses only its mean") {
  for (const char* act : {"relu", "gelu"}) {
    INFO("act := " << std::string(act));
    const json r = report_of(net(2, 6, 16, std::string(R"({"type": "residual", "body": [{"type": "linear", "out_features": 32}, {"type": ")") +
                                              act + R"("}, {"type": "linear", "out_features": 16}]}, {"type": "layernorm"})"));
    expect_bias(r, "layers.0.body.2.bias", 1);
    CHECK(bias_row(r, "layers.0.body.2.bias").at("directions") == "all-ones");
  }
}

TEST_CASE("theory: pre-norm attention x + Attn(LN(x)): b_K all, everything else 0, LN affine folds into q/k/v") {
  const json r = report_of(net(2, 6, 16, R"({"type": "residual", "body": [{"type": "layernorm"}, {"type": "attention", "num_heads": 2}]})"));
  expect_all(r, "layers.0.body.1.k_proj.bias");
  for (const std::string p : {"layers.0.body.0.bias", "layers.0.body.1.q_proj.bias", "layers.0.body.1.v_proj.bias",
                              "layers.0.body.1.o_proj.bias"}) {
    CAPTURE(p);
    expect_bias(r, p, 0);
  }
  expect_exact_fold(r, "fold_layernorm_affine");
}

// ---------------------------------------------------------------------------------------------
// 5. Invariances (the probe mechanics are in test_invariance.cpp)
namespace {

const json& probe(const json& report, const std::string& name, const std::string& layer) {
  for (const json& p : report.at("invariances"))
    if (p.at("probe") == name && p.at("layer") == layer) return p;
  INFO("invariances: " << report.at("invariances").dump());
  FAIL("no probe '" << name << "' on " << layer);
  return report;
}

void expect_probe(const json& report, const std::string& name, const std::string& layer, bool holds) {
  const json& p = probe(report, name, layer);
  INFO(p.dump());
  CHECK(p.at("holds") == holds);
  CHECK(p.at("agrees") == true);
}

}  // namespace

TEST_CASE("theory: attention without positions is kv-permutation invariant and query equivariant; causal or RoPE break both") {
  const std::string kv = "attention: permute keys and values together", q = "attention: permute queries";
  SUBCASE("with q/k/v biases") {
    const json r = report_of(net(2, 6, 16, kAttn + "}"), false, true);
    expect_probe(r, kv, "layers.0", true);
    expect_probe(r, q, "layers.0", true);
  }
  SUBCASE("without biases") {
    const json r = report_of(net(2, 6, 16, kAttn + R"(, "q_bias": false, "k_bias": false, "v_bias": false, "o_bias": false})"), false, true);
    expect_probe(r, kv, "layers.0", true);
    expect_probe(r, q, "layers.0", true);
  }
  SUBCASE("causal mask") {
    const json r = report_of(net(2, 6, 16, kAttn + R"(, "causal": true})"), false, true);
    expect_probe(r, kv, "layers.0", false);
    expect_probe(r, q, "layers.0", false);
  }
  SUBCASE("RoPE") {
    const json r = report_of(net(2, 6, 16, kAttn + R"(, "rope": true})"), false, true);
    expect_probe(r, kv, "layers.0", false);
    expect_probe(r, q, "layers.0", false);
  }
}

TEST_CASE("theory: LayerNorm acts on each token alone, so a token permutation commutes with it") {
  const json r = report_of(net(2, 6, 16, R"({"type": "layernorm"})"), false, true);
  expect_probe(r, "model: permute tokens", "model", true);
}

TEST_CASE("theory: each norm is invariant to exactly the shifts and scales its statistics see") {
  SUBCASE("LayerNorm: shift by c 1 and scale by s > 0, per token") {
    const json r = report_of(net(2, 6, 16, R"({"type": "layernorm"})"), false, true);
    expect_probe(r, "norm: shift the input per token", "layers.0", true);
    expect_probe(r, "norm: scale the input per token", "layers.0", true);
  }
  SUBCASE("RMSNorm: scale only") {
    const json r = report_of(net(2, 6, 16, R"({"type": "rmsnorm"})"), false, true);
    expect_probe(r, "norm: shift the input per token", "layers.0", false);
    expect_probe(r, "norm: scale the input per token", "layers.0", true);
  }
  SUBCASE("BatchNorm train: per-feature shift and scale across the batch") {
    const json r = report_of(net(2, 6, 16, R"({"type": "batchnorm"})"), false, true);
    expect_probe(r, "norm: shift the input per feature, across batch and tokens", "layers.0", true);
    expect_probe(r, "norm: scale the input per feature, across batch and tokens", "layers.0", true);
  }
  SUBCASE("InstanceNorm: per sample and feature") {
    const json r = report_of(net(2, 6, 16, R"({"type": "instancenorm", "affine": true})"), false, true);
    expect_probe(r, "norm: shift the input per sample and feature", "layers.0", true);
    expect_probe(r, "norm: scale the input per sample and feature", "layers.0", true);
  }
}

// ---------------------------------------------------------------------------------------------
// 6. Floating point
TEST_CASE("theory: a redundant bias moves the output by rounding only, measured against a floor that scales with the dtype") {
  // The key bias of a wide attention: its delta is not 0 but stays below the measured floor,
  // and the float32 floor exceeds the float64 floor by about the roundoff ratio 2^29 ~ 5e8.
  const std::string layers = R"({"type": "attention", "num_heads": 4, "q_bias": false, "v_bias": false, "o_bias": false})";
  const json r32 = report_of(net(1, 16, 64, layers, "float32", 42), false, false, true);
  const json r64 = report_of(net(1, 16, 64, layers, "float64", 42), false, false, true);
  const json& b32 = bias_row(r32, "layers.0.k_proj.bias");
  const json& b64 = bias_row(r64, "layers.0.k_proj.bias");
  INFO("float32: " << row_text(b32));
  INFO("float64: " << row_text(b64));
  for (const json* b : {&b32, &b64}) {
    CHECK(b->at("verdict") == "redundant");
    CHECK_GT_TOL(b->at("max_abs_delta").get<double>(), 0.0, "delta of a redundant bias (rounding is not 0)");
    CHECK_LE_TOL(b->at("max_abs_delta").get<double>(), b->at("noise_floor").get<double>(), "delta vs measured floor");
  }
  const double ratio = b32.at("noise_floor").get<double>() / b64.at("noise_floor").get<double>();
  CHECK_GT_TOL(ratio, 1e6, "float32 floor / float64 floor");

  SUBCASE("a real effect scales linearly with the perturbation, rounding does not") {
    // The sweep scales a random direction by sizes 1e-8 .. 1e2. The key bias stays below the
    // floor at every size up to 100; the query bias of the same attention (an effective bias)
    // grows 10x per decade between rounding (small sizes) and curvature (large sizes).
    for (const json& s : r64.at("sweep").at("series")) {
      if (s.at("param") != "layers.0.k_proj.bias") continue;
      for (size_t i = 0; i < s.at("delta").size(); ++i) {
        CAPTURE(r64.at("sweep").at("sizes")[i].get<double>());
        CHECK_LE_TOL(s.at("delta")[i].get<double>(), s.at("noise_floor")[i].get<double>(), "key bias sweep delta vs floor");
      }
    }
    const json rq = report_of(net(1, 16, 64, R"({"type": "attention", "num_heads": 4, "k_bias": false, "v_bias": false, "o_bias": false})",
                                  "float64", 42), false, false, true);
    const json& sizes = rq.at("sweep").at("sizes");
    const json& s = rq.at("sweep").at("series")[0];
    REQUIRE(s.at("param") == "layers.0.q_proj.bias");
    for (size_t i = 0; i + 1 < sizes.size(); ++i) {
      const double a = sizes[i], d = s.at("delta")[i], d_next = s.at("delta")[i + 1];
      if (a < 1e-6 || a > 1e-4) continue;  // above rounding, below curvature
      CAPTURE(a);
      // Far above the floor, the floor is not measured (null): the change must then exceed
      // 1e6 x the unperturbed model's own floor, as the report's noise_floor_note says.
      if (s.at("noise_floor")[i].is_null())
        CHECK_GT_TOL(d, 1e6 * kFloorFactor * 2 * rq.at("noise").at("output_rounding").get<double>(),
                     "delta where the floor is not measured, vs 1e6 x the unperturbed floor");
      else
        CHECK_GT_TOL(d, 1e3 * s.at("noise_floor")[i].get<double>(), "delta well above the floor");
      const double growth = d_next / d;
      INFO("delta " << d << " -> " << d_next);
      CHECK_LE_TOL(std::abs(growth - 10.0), 0.1, "growth of delta per decade of size, minus 10");
    }
  }
}

// ---------------------------------------------------------------------------------------------
TEST_CASE("theory: every preset analyses, and every bias row is consistent or carries a note") {
  for (const Preset& p : presets()) {
    CAPTURE(p.name);
    const json r = analyze_text(p.config);
    INFO("report: " << (r.value("ok", false) ? std::string("ok") : r.dump()));
    REQUIRE(r.value("ok", false));
    std::string rows;
    for (const json& b : r.at("biases")) rows += "\n  " + row_text(b);
    MESSAGE(p.name << " bias rows:" << rows);
    if (p.name == "article2-key-bias") {
      // The second article's float32 check prints a mean |delta| of about 1.3e-8, not 0: the
      // same order of magnitude here (1024 features, 32 heads, 16 tokens, float32).
      const double mean = bias_row(r, "layers.0.k_proj.bias").at("mean_abs_delta");
      CHECK_GT_TOL(mean, 1e-9, "article2 key bias mean |delta|");
      CHECK_LE_TOL(mean, 1e-7, "article2 key bias mean |delta|");
    }
    for (const json& b : r.at("biases")) {
      if (b.at("consistent") == true) continue;
      INFO("inconsistent row: " << row_text(b));
      CHECK(!b.value("note", std::string()).empty());
    }
  }
}

using biaslab::test::dims;
using biaslab::test::rules;

TEST_CASE("presets: gpt2-block, bert-layer and pythia-block say what their reports find") {
  // GPT-2 with ln_f: the key bias (96 of 96), and the mean of what writes into the stream.
  const json gpt2 = report_of(find_preset("gpt2-block")->config);
  const std::map<std::string, int> expected_gpt2{
      {"layers.0.body.0.bias", 0},        {"layers.0.body.1.q_proj.bias", 0}, {"layers.0.body.1.k_proj.bias", 96},
      {"layers.0.body.1.v_proj.bias", 1}, {"layers.0.body.1.o_proj.bias", 1}, {"layers.1.body.0.bias", 0},
      {"layers.1.body.1.bias", 0},        {"layers.1.body.3.bias", 1},        {"layers.2.bias", 0}};
  CHECK(dims(gpt2) == expected_gpt2);
  CHECK(rules(gpt2) == std::multiset<std::string>{"centre_bias_before_norm", "centre_writers", "drop_key_bias",
                                                   "fold_layernorm_affine", "fold_layernorm_affine", "fold_value_bias"});
  // BERT (post-norm): the key bias, and one direction (the mean) of the value bias, the attention
  // output bias and the second FFN bias.
  const json bert = report_of(find_preset("bert-layer")->config);
  const std::map<std::string, int> expected{
      {"layers.0.body.0.q_proj.bias", 0}, {"layers.0.body.0.k_proj.bias", 96}, {"layers.0.body.0.v_proj.bias", 1},
      {"layers.0.body.0.o_proj.bias", 1}, {"layers.1.bias", 0},                 {"layers.2.body.0.bias", 0},
      {"layers.2.body.2.bias", 1},        {"layers.3.bias", 0}};
  CHECK(dims(bert) == expected);
  // Pythia (parallel residual, 25% rotary, final_layer_norm): the key bias off the rotated
  // quarter (12 heads x 6 of 8 dimensions), and the mean of both branches' output biases.
  const json pythia = report_of(find_preset("pythia-block")->config);
  const std::string a = "layers.0.branches.0.", f = "layers.0.branches.1.";
  const std::map<std::string, int> expected_pythia{
      {a + "0.bias", 0},        {a + "1.q_proj.bias", 0}, {a + "1.k_proj.bias", 72}, {a + "1.v_proj.bias", 1},
      {a + "1.o_proj.bias", 1}, {f + "0.bias", 0},        {f + "1.bias", 0},         {f + "3.bias", 1},
      {"layers.1.bias", 0}};
  CHECK(dims(pythia) == expected_pythia);
  CHECK(rules(pythia) == std::multiset<std::string>{"centre_bias_before_norm", "centre_writers", "drop_unrotated_key_bias", "fold_layernorm_affine", "merge_branch_biases",
                                                     "fold_layernorm_affine", "fold_value_bias"});
  const std::string sentence = find_preset("pythia-block")->claim;
  for (const char* quoted : {"72 of 96", "drop_unrotated_key_bias", "centre_writers", "use_parallel_residual", "merge_branch_biases"})
    CHECK(sentence.find(quoted) != std::string::npos);
}

TEST_CASE("presets: resnet-basic-block and convnext-block say what their reports find") {
  // ResNet: BatchNorm (train) cancels each conv bias whole; its own shifts meet a ReLU.
  const json resnet = report_of(find_preset("resnet-basic-block")->config);
  const std::map<std::string, int> expected_resnet{{"layers.0.body.0.bias", 64}, {"layers.0.body.1.bias", 0},
                                                   {"layers.0.body.3.bias", 64}, {"layers.0.body.4.bias", 0}};
  CHECK(dims(resnet) == expected_resnet);
  CHECK(rules(resnet) == std::multiset<std::string>{"drop_bias_before_norm", "drop_bias_before_norm"});
  CHECK(bias_row(resnet, "layers.0.body.0.bias").at("verdict") == "redundant");
  const std::string resnet_claim = find_preset("resnet-basic-block")->claim;
  for (const char* quoted : {"64 of 64", "drop_bias_before_norm", "bias=False", "fuse_conv_batchnorm_eval"})
    CHECK(resnet_claim.find(quoted) != std::string::npos);
  // Its eval-mode twin: both BatchNorms fuse into the convolutions, exactly.
  json eval = json::parse(find_preset("resnet-basic-block")->config);
  for (const char* at : {"/layers/0/body/1", "/layers/0/body/4"}) eval[json::json_pointer(at)]["mode"] = "eval";
  const json fused = report_of(eval.dump());
  CHECK(rules(fused) == std::multiset<std::string>{"fuse_conv_batchnorm_eval", "fuse_conv_batchnorm_eval"});
  for (const json& f : fused.at("folds")) CHECK(f.at("exact") == true);
  // ConvNeXt: the mean of the depthwise conv's bias and of pwconv2's, through LayerNorms.
  const json convnext = report_of(find_preset("convnext-block")->config);
  const std::map<std::string, int> expected_convnext{{"layers.0.body.0.bias", 1}, {"layers.0.body.1.bias", 0},
                                                     {"layers.0.body.2.bias", 0}, {"layers.0.body.4.bias", 1},
                                                     {"layers.1.bias", 0}};
  CHECK(dims(convnext) == expected_convnext);
  CHECK(rules(convnext) == std::multiset<std::string>{"centre_bias_before_norm", "centre_bias_before_norm", "fold_layernorm_affine"});
  const std::string convnext_claim = find_preset("convnext-block")->claim;
  for (const char* quoted : {"1 of 96", "centre_bias_before_norm", "fold_layernorm_affine", "groups 96"})
    CHECK(convnext_claim.find(quoted) != std::string::npos);
}

TEST_CASE("presets: vit-block says what its report finds") {
  // Every reader of the stream is a LayerNorm: the position table loses each position's mean
  // (8 positions), the key bias all of it, what writes into the stream its mean.
  const json vit = report_of(find_preset("vit-block")->config);
  const std::map<std::string, int> expected{
      {"layers.0.weight", 8},           {"layers.1.body.0.bias", 0},        {"layers.1.body.1.q_proj.bias", 0},
      {"layers.1.body.1.k_proj.bias", 96}, {"layers.1.body.1.v_proj.bias", 1}, {"layers.1.body.1.o_proj.bias", 1},
      {"layers.2.body.0.bias", 0},      {"layers.2.body.1.bias", 0},        {"layers.2.body.3.bias", 1},
      {"layers.3.bias", 0}};
  CHECK(dims(vit) == expected);
  CHECK(bias_row(vit, "layers.0.weight").at("size") == 8 * 96);
  CHECK(bias_row(vit, "layers.0.weight").at("directions") == "constant over each position's features");
  CHECK(rules(vit) == std::multiset<std::string>{"centre_bias_before_norm", "centre_writers", "drop_key_bias",
                                                  "fold_layernorm_affine", "fold_layernorm_affine", "fold_value_bias"});
  for (const json& f : vit.at("folds")) CHECK(f.at("exact") == true);
  const std::string claim = find_preset("vit-block")->claim;
  for (const char* quoted : {"8 of its 768", "centre_writers", "redundant whole", "layernorm_before"})
    CHECK(claim.find(quoted) != std::string::npos);
}

TEST_CASE("structure: a rank decision that would overrun the budget is not started, and says so") {
  // One input of a Linear(64) bias before a LayerNorm stacks a 256 x 64 Jacobian: its Gram
  // matrix and eigenvalues alone may take 256 * 64^2 + 4 * 64^3 = 2.1 MFLOP (then a QR and SVD
  // 6.3 MFLOP more). Under a budget of 1 MFLOP the row is
  // undetermined with bounds 0 and 64 at once; with the default budget it is 1 (all-ones).
  auto b = biaslab::test::build(net(1, 4, 64, R"({"type": "linear"}, {"type": "layernorm"})"));
  const int p = biaslab::test::param_index(b.model, "layers.0.bias");
  TracePool pool(b.model, b.config);
  StructureOptions tight;
  tight.max_flops = 1e6;
  const Structure st = StructureSolver(b.model, pool, tight).solve(p);
  CHECK(st.stop == StopRule::budget);
  CHECK_FALSE(st.determined);
  CHECK(st.redundant_dim_min == 0);
  CHECK(st.redundant_dim_max == 64);
  CHECK(st.samples == 1);
  CHECK(st.stop_note.find("ranking the Jacobian stacked over 1 input would take up to") != std::string::npos);
  CAPTURE(st.flops);
  CHECK(st.flops <= tight.max_flops);
  const Structure full = StructureSolver(b.model, pool).solve(p);
  CHECK(full.determined);
  CHECK(full.redundant_dim == 1);
}

// Natively, the sweep's points of one bias run side by side (OpenMP), each on one thread; on one
// thread they run one after the other, by the code the wasm build has. The numbers must be the
// same: every delta and floor of every series equal to the last bit, with two threads against
// one (GPT-2's preset: a redundant part too). Eigen's own products stay on one thread in both
// (with more they round differently everywhere, the base run included). Without OpenMP there is
// nothing to compare.
TEST_CASE("sweep: points run side by side give the numbers of one thread") {
#ifdef _OPENMP
  const Preset* pr = find_preset("gpt2-block");
  REQUIRE(pr != nullptr);
  const int before = omp_get_max_threads();
  Eigen::setNbThreads(1);
  omp_set_num_threads(1);
  const json one = report_of(pr->config, false, false, true);
  omp_set_num_threads(2);
  const json two = report_of(pr->config, false, false, true);
  omp_set_num_threads(before);
  Eigen::setNbThreads(0);  // (Eigen follows OpenMP's count again, as analyze()'s thread rule needs)
  CHECK(two.at("timing_ms").value("threads", 0) == 2);  // (over kThreadsMinWork: the points side by side)
  const json& a = one.at("sweep").at("series");
  const json& b = two.at("sweep").at("series");
  REQUIRE(a.size() == b.size());
  int compared = 0;
  for (size_t i = 0; i < a.size(); ++i)
    for (const char* key : {"delta", "noise_floor", "delta_redundant", "noise_floor_redundant"}) {
      if (!a[i].contains(key)) continue;
      CAPTURE(a[i].at("param").get<std::string>());
      CAPTURE(key);
      CHECK(a[i].at(key).dump() == b[i].at(key).dump());
      ++compared;
    }
  CHECK(compared >= 16);
#endif
}

TEST_CASE("report: the timing laps add up to the total, the setup before the analyses included") {
  // 512 wide: drawing the weights, the work check's factorisation of the trailing Linear and the
  // base forwards take a measurable share of the whole, which "setup" must hold.
  const json r = report_of(net(1, 8, 512, R"({"type": "linear"}, {"type": "layernorm"}, {"type": "linear"})"), true,
                           true, true);
  const json& t = r.at("timing_ms");
  double laps = 0;
  for (const char* lap : {"setup", "biases", "invariances", "sweep", "folds"}) laps += t.at(lap).get<double>();
  const double total = t.at("total").get<double>(), setup = t.at("setup").get<double>();
  INFO("setup " << setup << " ms; laps " << laps << " ms of " << total << " ms");
  CHECK(setup > 0.0);
  CHECK(laps <= total);
  CHECK(total - laps <= 0.02 * total);  // (what follows the last lap: the per-bias figures)
}
