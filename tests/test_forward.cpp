// Forward passes of every layer against values computed by hand.
//
// Shapes: x is (N = B*T, F), row b*T + t holding token t of sample b. Parameters are set
// explicitly through Model::params so that each expected value is a short formula written out
// here, never a call into the engine.
#include <cmath>
#include <string>

#include "analysis/measure.hpp"
#include "model/forward.hpp"
#include "model/presets.hpp"
#include "support.hpp"

using namespace biaslab;
using biaslab::test::build;
using biaslab::test::col;
using biaslab::test::mat;
using biaslab::test::param_index;

namespace {

// Hand-computed values are exact up to a few float64 roundings.
constexpr double kTol = 1e-12;

Mat run64(const Model& m, const Mat& x) { return forward<double>(m, cast_weights<double>(m), x); }

void set(Model& m, const std::string& name, const Mat& value) {
  Mat& v = m.params[param_index(m, name)].value;
  REQUIRE(v.rows() == value.rows());
  REQUIRE(v.cols() == value.cols());
  v = value;
}

std::string one_layer(int batch, int tokens, int features, const std::string& layer) {
  return R"({"version": 1, "seed": 1, "shape": {"batch": )" + std::to_string(batch) +
         R"(, "tokens": )" + std::to_string(tokens) + R"(, "features": )" +
         std::to_string(features) + R"(}, "layers": [)" + layer + "]}";
}

}  // namespace

TEST_CASE("forward: layernorm normalises each token over its features, then gain and shift") {
  SUBCASE("one token [1, 2, 3, 4]: mean 2.5, biased variance 1.25, eps 1e-5") {
    auto b = build(one_layer(1, 1, 4, R"({"type": "layernorm", "eps": 1e-5})"));
    set(b.model, "layers.0.weight", col({1, 2, 0.5, -1}));
    set(b.model, "layers.0.bias", col({0.1, 0, 0, -0.2}));
    const double r = 1 / std::sqrt(1.25 + 1e-5);
    const Mat expected = mat(1, 4, {-1.5 * r * 1 + 0.1, -0.5 * r * 2, 0.5 * r * 0.5, 1.5 * r * -1 - 0.2});
    CHECK_MAX_ABS_LE(run64(b.model, mat(1, 4, {1, 2, 3, 4})), expected, kTol);
  }
  SUBCASE("eps sits inside the square root: eps 0.1, no affine") {
    auto b = build(one_layer(1, 1, 4, R"({"type": "layernorm", "eps": 0.1, "elementwise_affine": false})"));
    CHECK(b.model.params.empty());
    const double r = 1 / std::sqrt(1.25 + 0.1);
    CHECK_MAX_ABS_LE(run64(b.model, mat(1, 4, {1, 2, 3, 4})), mat(1, 4, {-1.5 * r, -0.5 * r, 0.5 * r, 1.5 * r}), kTol);
  }
  SUBCASE("two tokens are normalised separately: [1,2,3,4] and [10,10,10,14]") {
    auto b = build(one_layer(1, 2, 4, R"({"type": "layernorm", "elementwise_affine": false})"));
    // token 1: mean 11, deviations (-1,-1,-1,3), variance 3
    const double r0 = 1 / std::sqrt(1.25 + 1e-5), r1 = 1 / std::sqrt(3 + 1e-5);
    CHECK_MAX_ABS_LE(run64(b.model, mat(2, 4, {1, 2, 3, 4, 10, 10, 10, 14})),
                     mat(2, 4, {-1.5 * r0, -0.5 * r0, 0.5 * r0, 1.5 * r0, -r1, -r1, -r1, 3 * r1}), kTol);
  }
  SUBCASE("one feature: the centred value is 0, so the output is the shift") {
    auto b = build(one_layer(1, 1, 1, R"({"type": "layernorm"})"));
    set(b.model, "layers.0.weight", col({3}));
    set(b.model, "layers.0.bias", col({0.25}));
    CHECK_MAX_ABS_LE(run64(b.model, mat(1, 1, {7})), mat(1, 1, {0.25}), kTol);
  }
}

TEST_CASE("forward: rmsnorm divides each token by its root mean square, without centring") {
  SUBCASE("[1, 2, 3, 4]: mean square 7.5, default eps 1e-6, gain") {
    auto b = build(one_layer(1, 1, 4, R"({"type": "rmsnorm"})"));
    REQUIRE(b.model.ops[0].eps == 1e-6);  // torch.nn.RMSNorm's default as the schema's
    set(b.model, "layers.0.weight", col({1, 2, 0.5, -1}));
    const double r = 1 / std::sqrt(7.5 + 1e-6);
    CHECK_MAX_ABS_LE(run64(b.model, mat(1, 4, {1, 2, 3, 4})), mat(1, 4, {r, 4 * r, 1.5 * r, -4 * r}), kTol);
  }
  SUBCASE("one feature: x / sqrt(x^2 + eps)") {
    auto b = build(one_layer(1, 1, 1, R"({"type": "rmsnorm", "elementwise_affine": false, "eps": 0.5})"));
    CHECK_MAX_ABS_LE(run64(b.model, mat(1, 1, {-2})), mat(1, 1, {-2 / std::sqrt(4.5)}), kTol);
  }
}

TEST_CASE("forward: batchnorm normalises each feature over batch and tokens") {
  // B = 2, T = 2, F = 2; rows b0t0, b0t1, b1t0, b1t1.
  const Mat x = mat(4, 2, {1, 0, 2, 0, 3, 2, 4, 2});
  SUBCASE("train: batch statistics, biased variance (feature 0: mean 2.5 var 1.25; feature 1: mean 1 var 1)") {
    auto b = build(one_layer(2, 2, 2, R"({"type": "batchnorm", "mode": "train", "eps": 1e-5})"));
    set(b.model, "layers.0.weight", col({2, -1}));
    set(b.model, "layers.0.bias", col({0.5, 1}));
    const double r0 = 1 / std::sqrt(1.25 + 1e-5), r1 = 1 / std::sqrt(1 + 1e-5);
    const Mat expected = mat(4, 2, {-1.5 * r0 * 2 + 0.5, r1 + 1,
                                    -0.5 * r0 * 2 + 0.5, r1 + 1,
                                    0.5 * r0 * 2 + 0.5, -r1 + 1,
                                    1.5 * r0 * 2 + 0.5, -r1 + 1});
    CHECK_MAX_ABS_LE(run64(b.model, x), expected, kTol);
  }
  SUBCASE("train with batch 1 and 1 token: every value is its own mean, so the output is the shift") {
    auto b = build(one_layer(1, 1, 2, R"({"type": "batchnorm"})"));
    set(b.model, "layers.0.bias", col({0.5, -0.25}));
    CHECK_MAX_ABS_LE(run64(b.model, mat(1, 2, {3, -4})), mat(1, 2, {0.5, -0.25}), kTol);
  }
  SUBCASE("eval: running statistics (mean 0.5, -1; var 4, 0.25)") {
    auto b = build(one_layer(2, 2, 2, R"({"type": "batchnorm", "mode": "eval", "eps": 1e-5})"));
    set(b.model, "layers.0.weight", col({2, -1}));
    set(b.model, "layers.0.bias", col({0.5, 1}));
    set(b.model, "layers.0.running_mean", col({0.5, -1}));
    set(b.model, "layers.0.running_var", col({4, 0.25}));
    const double r0 = 2 / std::sqrt(4 + 1e-5), r1 = -1 / std::sqrt(0.25 + 1e-5);
    const Mat expected = mat(4, 2, {0.5 * r0 + 0.5, 1 * r1 + 1,
                                    1.5 * r0 + 0.5, 1 * r1 + 1,
                                    2.5 * r0 + 0.5, 3 * r1 + 1,
                                    3.5 * r0 + 0.5, 3 * r1 + 1});
    CHECK_MAX_ABS_LE(run64(b.model, x), expected, kTol);
  }
}

TEST_CASE("forward: instancenorm normalises each sample and feature over the tokens") {
  // B = 2, T = 2, F = 2. Sample 0: feature 0 [1, 3], feature 1 [2, 2] (constant -> 0);
  // sample 1: feature 0 [0, 4], feature 1 [5, 1].
  const Mat x = mat(4, 2, {1, 2, 3, 2, 0, 5, 4, 1});
  const double r1 = 1 / std::sqrt(1 + 1e-5), r4 = 1 / std::sqrt(4 + 1e-5);
  const Mat plain = mat(4, 2, {-r1, 0, r1, 0, -2 * r4, 2 * r4, 2 * r4, -2 * r4});
  SUBCASE("affine off (torch's default): no parameters") {
    auto b = build(one_layer(2, 2, 2, R"({"type": "instancenorm"})"));
    CHECK(b.model.params.empty());
    CHECK_MAX_ABS_LE(run64(b.model, x), plain, kTol);
  }
  SUBCASE("affine on: per-feature gain and shift after normalising") {
    auto b = build(one_layer(2, 2, 2, R"({"type": "instancenorm", "affine": true})"));
    set(b.model, "layers.0.weight", col({2, 3}));
    set(b.model, "layers.0.bias", col({-1, 1}));
    Mat expected = plain;
    expected.col(0) = expected.col(0) * 2 - Mat::Ones(4, 1);
    expected.col(1) = expected.col(1) * 3 + Mat::Ones(4, 1);
    CHECK_MAX_ABS_LE(run64(b.model, x), expected, kTol);
  }
}

TEST_CASE("forward: groupnorm normalises each sample over its tokens and the features of a group") {
  // B = 2, T = 2, F = 4, G = 2: group 0 = features 0-1, group 1 = features 2-3.
  // Sample 0: group 0 {1,2,5,6} mean 3.5 var 4.25; group 1 {3,4,7,8} mean 5.5 var 4.25.
  // Sample 1: group 0 all 0 -> 0; group 1 {1,-1,-1,1} mean 0 var 1.
  auto b = build(one_layer(2, 2, 4, R"({"type": "groupnorm", "num_groups": 2, "affine": false})"));
  const Mat x = mat(4, 4, {1, 2, 3, 4,
                           5, 6, 7, 8,
                           0, 0, 1, -1,
                           0, 0, -1, 1});
  const double r = 1 / std::sqrt(4.25 + 1e-5), s = 1 / std::sqrt(1 + 1e-5);
  const Mat expected = mat(4, 4, {-2.5 * r, -1.5 * r, -2.5 * r, -1.5 * r,
                                  1.5 * r, 2.5 * r, 1.5 * r, 2.5 * r,
                                  0, 0, s, -s,
                                  0, 0, -s, s});
  CHECK_MAX_ABS_LE(run64(b.model, x), expected, kTol);
}

TEST_CASE("forward: activations act elementwise") {
  const Mat x = mat(1, 3, {-1, 1, 2});
  SUBCASE("relu") {
    auto b = build(one_layer(1, 1, 3, R"({"type": "relu"})"));
    CHECK_MAX_ABS_LE(run64(b.model, mat(1, 3, {-1, 0, 2})), mat(1, 3, {0, 0, 2}), kTol);
  }
  SUBCASE("gelu exact: x Phi(x)") {
    auto b = build(one_layer(1, 1, 3, R"({"type": "gelu"})"));
    CHECK_MAX_ABS_LE(run64(b.model, x), mat(1, 3, {-0.15865525393145707, 0.8413447460685429, 1.9544997361036416}), kTol);
  }
  SUBCASE("gelu tanh: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))") {
    auto b = build(one_layer(1, 1, 3, R"({"type": "gelu", "approximate": "tanh"})"));
    CHECK_MAX_ABS_LE(run64(b.model, x), mat(1, 3, {-0.15880800939172324, 0.8411919906082768, 1.954597694087775}), kTol);
  }
}

TEST_CASE("forward: softmax normalises over the features of each token") {
  SUBCASE("[1, 2, 3] and a constant row [5, 5, 5]") {
    auto b = build(one_layer(1, 2, 3, R"({"type": "softmax"})"));
    const double t = 1.0 / 3;
    CHECK_MAX_ABS_LE(run64(b.model, mat(2, 3, {1, 2, 3, 5, 5, 5})),
                     mat(2, 3, {0.09003057317038046, 0.24472847105479767, 0.6652409557748219, t, t, t}), kTol);
  }
  SUBCASE("one feature: always 1") {
    auto b = build(one_layer(1, 1, 1, R"({"type": "softmax"})"));
    CHECK_MAX_ABS_LE(run64(b.model, mat(1, 1, {-30})), mat(1, 1, {1}), kTol);
  }
}

TEST_CASE("forward: linear computes x W^T + b per token") {
  SUBCASE("3 -> 2 with bias") {
    auto b = build(one_layer(1, 2, 3, R"({"type": "linear", "out_features": 2})"));
    set(b.model, "layers.0.weight", mat(2, 3, {1, 2, 3, -1, 0, 1}));
    set(b.model, "layers.0.bias", col({0.5, -0.5}));
    CHECK(b.model.out_features == 2);
    CHECK_MAX_ABS_LE(run64(b.model, mat(2, 3, {1, 1, 1, 1, 0, -1})), mat(2, 2, {6.5, -0.5, -1.5, -2.5}), kTol);
  }
  SUBCASE("1 -> 1 without bias") {
    auto b = build(one_layer(1, 1, 1, R"({"type": "linear", "bias": false})"));
    REQUIRE(b.model.params.size() == 1);
    set(b.model, "layers.0.weight", mat(1, 1, {-3}));
    CHECK_MAX_ABS_LE(run64(b.model, mat(1, 1, {2})), mat(1, 1, {-6}), kTol);
  }
}

TEST_CASE("forward: residual computes x + body(x)") {
  const Mat W = mat(2, 2, {1, 2, 3, 4});
  const Mat x = mat(1, 2, {1, 0});  // W x = (1, 3)
  SUBCASE("one block") {
    auto b = build(one_layer(1, 1, 2, R"({"type": "residual", "body": [{"type": "linear"}]})"));
    set(b.model, "layers.0.body.0.weight", W);
    set(b.model, "layers.0.body.0.bias", col({1, 1}));
    CHECK_MAX_ABS_LE(run64(b.model, x), mat(1, 2, {1 + 2, 0 + 4}), kTol);
  }
  SUBCASE("nested: x + (x + W x + b) = 2 x + W x + b") {
    auto b = build(one_layer(1, 1, 2,
        R"({"type": "residual", "body": [{"type": "residual", "body": [{"type": "linear"}]}]})"));
    set(b.model, "layers.0.body.0.body.0.weight", W);
    set(b.model, "layers.0.body.0.body.0.bias", col({1, 1}));
    CHECK_MAX_ABS_LE(run64(b.model, x), mat(1, 2, {2 + 2, 0 + 4}), kTol);
  }
}

namespace {

// Attention with identity projections and the given biases, so q = x + b_Q, k = x + b_K, ...
void identity_attention(Model& m, int F, const Mat& bq, const Mat& bk, const Mat& bv, const Mat& bo) {
  for (const char* p : {"q", "k", "v", "o"}) set(m, std::string("layers.0.") + p + "_proj.weight", Mat::Identity(F, F));
  set(m, "layers.0.q_proj.bias", bq);
  set(m, "layers.0.k_proj.bias", bk);
  set(m, "layers.0.v_proj.bias", bv);
  set(m, "layers.0.o_proj.bias", bo);
}

}  // namespace

TEST_CASE("forward: attention with 1 head and 2 tokens matches the hand computation") {
  // x = e0, e1 (F = 2, d = 2): scores = x x^T / sqrt(2); the softmax of (1/sqrt 2, 0) is
  // (sigma, 1 - sigma) with sigma = 1 / (1 + exp(-1/sqrt 2)).
  const double sigma = 0.6697615493266569;
  const Mat x = mat(2, 2, {1, 0, 0, 1});
  const Mat zero = Mat::Zero(2, 1);
  SUBCASE("no biases, no mask") {
    auto b = build(one_layer(1, 2, 2, R"({"type": "attention", "num_heads": 1})"));
    identity_attention(b.model, 2, zero, zero, zero, zero);
    CHECK_MAX_ABS_LE(run64(b.model, x), mat(2, 2, {sigma, 1 - sigma, 1 - sigma, sigma}), kTol);
  }
  SUBCASE("causal mask: token 0 sees only itself") {
    auto b = build(one_layer(1, 2, 2, R"({"type": "attention", "num_heads": 1, "causal": true})"));
    identity_attention(b.model, 2, zero, zero, zero, zero);
    CHECK_MAX_ABS_LE(run64(b.model, x), mat(2, 2, {1, 0, 1 - sigma, sigma}), kTol);
  }
  SUBCASE("biases: b_Q (1,0), b_K (3,-7) shifts whole rows, b_V (0,1), b_O (0.5,0.5)") {
    // q0 = (2,0), q1 = (1,1); k = x + b_K adds q_i . b_K to row i only. Row 0 scores
    // (2, 0)/sqrt 2 -> p0 = 1/(1 + exp(-sqrt 2)); row 1 scores equal -> (1/2, 1/2).
    // v0 = (1,1), v1 = (0,2): ctx0 = (p0, 2 - p0), ctx1 = (1/2, 3/2); out = ctx + b_O.
    auto b = build(one_layer(1, 2, 2, R"({"type": "attention", "num_heads": 1})"));
    identity_attention(b.model, 2, col({1, 0}), col({3, -7}), col({0, 1}), col({0.5, 0.5}));
    const double p0 = 1 / (1 + std::exp(-std::sqrt(2.0)));
    CHECK_MAX_ABS_LE(run64(b.model, x), mat(2, 2, {p0 + 0.5, 2 - p0 + 0.5, 1.0, 2.0}), kTol);
  }
  SUBCASE("two heads split the features into halves") {
    // F = 4, d = 2. Head 0 sees (e0, e1) as above; head 1 sees (e1, e0).
    auto b = build(one_layer(1, 2, 4, R"({"type": "attention", "num_heads": 2})"));
    const Mat z = Mat::Zero(4, 1);
    identity_attention(b.model, 4, z, z, z, z);
    CHECK_MAX_ABS_LE(run64(b.model, mat(2, 4, {1, 0, 0, 1, 0, 1, 1, 0})),
                     mat(2, 4, {sigma, 1 - sigma, 1 - sigma, sigma, 1 - sigma, sigma, sigma, 1 - sigma}), kTol);
  }
  SUBCASE("batch 2 of 1 token: each token attends only to itself, so out = v W_O^T + b_O") {
    auto b = build(one_layer(2, 1, 2, R"({"type": "attention", "num_heads": 1})"));
    identity_attention(b.model, 2, col({5, 5}), col({-1, 2}), col({0, 1}), col({0.5, 0}));
    CHECK_MAX_ABS_LE(run64(b.model, mat(2, 2, {1, 2, 3, 4})), mat(2, 2, {1.5, 3, 3.5, 5}), kTol);
  }
}

TEST_CASE("forward: rope rotates half-split pairs by position times 10000^(-2i/d)") {
  // d = 4, half = 2: pair (0, 2) turns by t * 1 rad, pair (1, 3) by t * 0.01 rad.
  const double c1 = 0.5403023058681398, s1 = 0.8414709848078965;
  const double c2 = 0.9999500004166653, s2 = 0.009999833334166664;
  SUBCASE("tables at positions 0 and 1") {
    Mat ct, st;
    rope_tables(2, 4, ct, st);
    CHECK_MAX_ABS_LE(ct, mat(2, 2, {1, 1, c1, c2}), kTol);
    CHECK_MAX_ABS_LE(st, mat(2, 2, {0, 0, s1, s2}), kTol);
  }
  SUBCASE("position 0 is unchanged, position 1 is rotated") {
    Mat z = mat(2, 4, {1, 2, 3, 4, 1, 2, 3, 4});
    rope_rotate(z, 1, 2, 1);
    CHECK_MAX_ABS_LE(z, mat(2, 4, {1, 2, 3, 4,
                                   1 * c1 - 3 * s1, 2 * c2 - 4 * s2, 3 * c1 + 1 * s1, 4 * c2 + 2 * s2}), kTol);
  }
  SUBCASE("each head rotates its own half-split pairs") {
    // 2 heads of d = 2: one pair per head, (0,1) and (2,3), both at frequency 1.
    Mat z = mat(2, 4, {0, 0, 0, 0, 1, 0, 0, 1});
    rope_rotate(z, 1, 2, 2);
    CHECK_MAX_ABS_LE(z, mat(2, 4, {0, 0, 0, 0, c1, s1, -s1, c1}), kTol);
  }
  SUBCASE("inside attention: q and k are rotated, v is not") {
    // F = 4, 1 head, x = e0 at position 0 and e2 at position 1. Rotated k1 = (-sin 1, 0, cos 1, 0),
    // so scores / 2: row 0 (1, -sin 1)/2, row 1 (-sin 1, 1)/2 (q1 . k1 = 1). v = x unrotated.
    auto b = build(one_layer(1, 2, 4, R"({"type": "attention", "num_heads": 1, "rope": true})"));
    const Mat z = Mat::Zero(4, 1);
    identity_attention(b.model, 4, z, z, z, z);
    const double p01 = 1 / (1 + std::exp((1 + s1) / 2));  // weight of key 1 in row 0
    const double p11 = 1 / (1 + std::exp(-(1 + s1) / 2));
    CHECK_MAX_ABS_LE(run64(b.model, mat(2, 4, {1, 0, 0, 0, 0, 0, 1, 0})),
                     mat(2, 4, {1 - p01, 0, p01, 0, 1 - p11, 0, p11, 0}), kTol);
  }
}

TEST_CASE("forward: float32 and float64 forwards of the same model agree to 1e-5 relative") {
  // Relative Frobenius error; float32 unit roundoff is 6e-8, so 1e-5 leaves room for depth.
  constexpr double kRel = 1e-5;
  for (const char* name : {"default", "postnorm-transformer", "causal-decoder-layer", "norm-zoo",
                           "prenorm-transformer-rope"}) {
    INFO("name := " << std::string(name));
    const Preset* p = find_preset(name);
    REQUIRE(p != nullptr);
    auto b = build(p->config);
    const Mat x = draw_input(b.config, 0);
    const Mat y64 = run64(b.model, x);
    const MatT<float> y32 = forward<float>(b.model, cast_weights<float>(b.model), MatT<float>(x.cast<float>()));
    const double rel = (y32.cast<double>() - y64).norm() / y64.norm();
    CHECK_LE_TOL(rel, kRel, "relative float32 vs float64 difference");
    CHECK_GT_TOL(y64.norm(), 0.0, "output norm");
  }
}

TEST_CASE("forward: another model's output (run_model, the folds') is its Evaluator's base to the bit") {
  // run_model forwards a folded model without an Evaluator's recordings or its scan of the values;
  // it must give what an Evaluator of the same model, rounded, gives, in both precisions, float32
  // and float64 configs alike. Its values are made not float32 numbers first, as a fold's output
  // is (build_network draws a float32 config's as float32 numbers): run_model must round them,
  // and a float32 config's input, as the Evaluator sees them.
  int float32_configs = 0;
  for (const char* name : {"default", "gpt2-block", "norm-zoo", "qwen2-block", "article1-linear-batchnorm",
                           "article4-layernorm-linear", "whisper-decoder-block", "convnext-block"}) {
    for (const bool as_float32 : {false, true}) {
      INFO("name := " << std::string(name) << ", as float32 := " << as_float32);
      const Preset* p = find_preset(name);
      REQUIRE(p != nullptr);
      std::string text = p->config;
      const size_t at = text.find("\"float64\"");
      if (as_float32 && at != std::string::npos) text.replace(at, 9, "\"float32\"");
      auto b = build(text);
      float32_configs += b.model.dtype == DType::float32;
      Model raw = b.model;
      for (ModelParam& mp : raw.params) mp.value *= 1.0 + 0x1.0p-40;
      Model rounded = raw;
      if (rounded.dtype == DType::float32)
        for (ModelParam& mp : rounded.params) round_to_float(mp.value);
      const Mat x = draw_input(b.config, 0);
      const Eval want = Evaluator(rounded, x).base();
      const Eval got = Evaluator::run_model(std::move(raw), x);
      CHECK(got.dtype == want.dtype);
      CHECK(got.finite == want.finite);
      CHECK_MAX_ABS_LE(got.y, want.y, 0.0);
      CHECK_MAX_ABS_LE(got.y_other, want.y_other, 0.0);
      CHECK(got.rounding == want.rounding);
      CHECK(got.rounding_other == want.rounding_other);
    }
  }
  CHECK(float32_configs == 9);
}

TEST_CASE("forward: stacked points equal forward_from per value, and refuse where samples mix") {
  // Every bias-like parameter of every preset, three values: the stacked pass (the op after the
  // parameter's on three times the samples) against forward_from of each value alone. Products
  // of another size may block their sums otherwise: equal within 1e-12 of the output's scale.
  constexpr double kRel = 1e-12;
  int stacked_params = 0, refused_params = 0, moved = 0;
  for (const Preset& preset : presets()) {
    auto b = build(preset.config);
    const Model& m = b.model;
    const Weights<double> w = cast_weights<double>(m);
    Recording<double> rec;
    const Mat x = draw_input(b.config, 0);
    const Mat base = forward_recording<double>(m, w, x, rec);
    const double scale = std::max(1.0, base.cwiseAbs().maxCoeff());
    for (size_t pi = 0; pi < m.params.size(); ++pi) {
      const ModelParam& p = m.params[pi];
      if (!is_bias_like(p.role)) continue;
      INFO("preset := " << preset.name << ", param := " << p.name);
      bool mixes = false;  // BatchNorm (train) after the parameter's op
      for (size_t i = static_cast<size_t>(p.op) + 1; i < m.ops.size(); ++i)
        mixes = mixes || (m.ops[i].kind == OpKind::norm && m.ops[i].norm == NormKind::batch_train);
      Mat r(p.value.rows(), p.value.cols());  // a fixed direction, not constant (a norm removes that)
      for (Eigen::Index i = 0; i < r.size(); ++i) r.data()[i] = (i % 2 ? -1.0 : 1.0) * double(i % 7 + 1) / 7.0;
      std::vector<Mat> values;
      for (double s : {1e-3, 0.5, 3.0}) values.push_back(p.value + s * r);
      values[1](0, 0) -= 1.0;  // (not a multiple of the others)
      std::vector<const Mat*> at;
      for (const Mat& v : values) at.push_back(&v);
      const std::vector<Mat> ys = forward_from_stacked<double>(m, w, rec, p.op, static_cast<int>(pi), at);
      CHECK(ys.empty() == mixes);
      if (ys.empty()) {
        ++refused_params;
        continue;
      }
      ++stacked_params;
      REQUIRE(ys.size() == values.size());
      for (size_t k = 0; k < values.size(); ++k) {
        const Mat alone = forward_from<double>(m, w, rec, p.op, Override<double>{static_cast<int>(pi), &values[k]});
        REQUIRE(ys[k].rows() == alone.rows());
        REQUIRE(ys[k].cols() == alone.cols());
        CHECK_LE_TOL((ys[k] - alone).cwiseAbs().maxCoeff() / scale, kRel, "stacked vs alone, relative to the output");
        if ((alone - base).cwiseAbs().maxCoeff() > 1e-6 * scale) ++moved;
      }
    }
  }
  // The presets hold both kinds (BatchNorm in train mode after a bias: article1-linear-batchnorm).
  CHECK(stacked_params > 20);
  CHECK(refused_params > 0);
  CHECK(moved > 40);  // (values that move the output: the comparison is not of constants)
}

TEST_CASE("forward: a sweep's points stacked keep run_near's rules and values, point by point") {
  // run_near_stacked against run_near for every bias-like parameter of five presets (float32 and
  // float64), the sweep's eleven sizes along a fixed direction: the same points skipped (over
  // `far`), the same moves, and outputs equal up to rounding: 1e-12 of the output's scale for a
  // float64 output, 1e-6 for a float32 one.
  int compared = 0, skipped_points = 0;
  for (const char* name : {"article2-all-biases", "default", "gpt2-block", "whisper-decoder-block", "qwen2-block"}) {
    const Preset* preset = find_preset(name);
    REQUIRE(preset != nullptr);
    auto b = build(preset->config);
    const Model& m = b.model;
    const Evaluator ev(m, draw_input(b.config, 0));
    const double scale = std::max(1.0, ev.base().y.cwiseAbs().maxCoeff());
    const double tol64 = 1e-12 * scale, tol32 = 1e-6 * scale;
    const double far = 1e6 * kFloorFactor * 2 * ev.base().rounding;  // (the sweep's: kSweepFar)
    for (size_t pi = 0; pi < m.params.size(); ++pi) {
      const ModelParam& p = m.params[pi];
      if (!is_bias_like(p.role)) continue;
      INFO("preset := " << name << ", param := " << p.name);
      Mat r(p.value.rows(), p.value.cols());
      for (Eigen::Index i = 0; i < r.size(); ++i) r.data()[i] = (i % 2 ? -1.0 : 1.0) * double(i % 5 + 1) / 5.0;
      std::vector<Mat> values;
      for (int e = -8; e <= 2; ++e) values.push_back(p.value + std::pow(10.0, e) * r);
      std::vector<double> moved;
      const std::vector<std::optional<Eval>> stacked = run_near_stacked(ev, static_cast<int>(pi), values, far, moved);
      if (stacked.empty()) continue;  // (BatchNorm in train mode after it, or small points on several threads)
      REQUIRE(stacked.size() == values.size());
      for (size_t k = 0; k < values.size(); ++k) {
        double alone_moved = 0;
        const std::optional<Eval> alone = ev.run_near(static_cast<int>(pi), &values[k], far, &alone_moved);
        CHECK(stacked[k].has_value() == alone.has_value());
        const bool f32 = m.dtype == DType::float32;
        if (std::isfinite(alone_moved)) CHECK_LE_TOL(std::abs(moved[k] - alone_moved), f32 ? tol32 : tol64, "moved");
        if (!alone || !stacked[k]) {
          ++skipped_points;
          continue;
        }
        ++compared;
        CHECK(stacked[k]->finite == alone->finite);
        CHECK(stacked[k]->dtype == alone->dtype);
        CHECK_LE_TOL((stacked[k]->y - alone->y).cwiseAbs().maxCoeff(), f32 ? tol32 : tol64, "output");
        CHECK_LE_TOL((stacked[k]->y_other - alone->y_other).cwiseAbs().maxCoeff(), f32 ? tol64 : tol32, "other precision");
      }
    }
  }
  CHECK(compared > 60);
  CHECK(skipped_points > 0);  // (the large sizes: over far, their other precision is not run)
}
