// Forward-mode derivatives against central finite differences, and the trailing linear maps.
//
// For a bias p and a direction u (broadcast to every token), jvp() must equal
//   (f(p + h u) - f(p - h u)) / (2 h),  h = 1e-6, in float64.
// The truncation error is O(h^2) ~ 1e-12 and the rounding error ~ 1e-16 |f| / h ~ 1e-10, so a
// tolerance of 1e-6 relative to max(1, max |jvp|) separates a wrong derivative from noise.
#include <string>
#include <vector>

#include "layers/attention.hpp"
#include "model/jvp.hpp"
#include "analysis/structure.hpp"
#include "core/rng.hpp"
#include "support.hpp"

using namespace biaslab;
using biaslab::test::build;
using biaslab::test::param_index;

namespace {

constexpr double kStep = 1e-6;
constexpr double kRelTol = 1e-6;

std::string net(int batch, int tokens, int features, const std::string& layers) {
  return R"({"version": 1, "seed": 5, "shape": {"batch": )" + std::to_string(batch) +
         R"(, "tokens": )" + std::to_string(tokens) + R"(, "features": )" +
         std::to_string(features) + R"(}, "layers": [)" + layers + "]}";
}

// Checks jvp() of every bias-like parameter of the config against central differences, with
// two directions per parameter batched in one call (n = 2).
void check_all_biases(const std::string& text) {
  auto b = build(text);
  const Model& m = b.model;
  const Mat x = draw_input(b.config, 0);
  const Weights<double> w = cast_weights<double>(m);
  Trace trace;
  const Mat y = forward<double>(m, w, x, {}, &trace);
  const Eigen::Index N = Eigen::Index(m.batch) * m.tokens;  // x's rows less a context's
  int checked = 0;
  for (size_t pi = 0; pi < m.params.size(); ++pi) {
    const ModelParam& p = m.params[pi];
    if (!is_bias_like(p.role)) continue;
    CAPTURE(p.name);
    const int n = 2, size = static_cast<int>(p.value.size());
    Rng rng(17, p.name);
    Mat dirs(size, n);
    for (int i = 0; i < size; ++i)
      for (int a = 0; a < n; ++a) dirs(i, a) = rng.normal();
    // A dense seed has a row per token where the parameter enters: the context's for the key and
    // value side of cross-attention.
    const Eigen::Index rows = seed_rows(m, static_cast<int>(pi), N);
    Seed seed{static_cast<int>(pi), Mat(n * rows, size)};
    for (int a = 0; a < n; ++a) seed.values.middleRows(a * rows, rows) = dirs.col(a).transpose().replicate(rows, 1);
    const Mat d = jvp(m, trace, seed, n, static_cast<int>(m.ops.size()));
    REQUIRE(d.rows() == n * N);
    REQUIRE(d.cols() == y.cols());
    // The same directions in broadcast form (one row per direction) give the same tangents.
    const Seed compact{static_cast<int>(pi), Mat(dirs.transpose()), true};
    const Mat db = jvp(m, trace, compact, n, static_cast<int>(m.ops.size()));
    REQUIRE(db.rows() == d.rows());
    const double bc_err = (db - d).cwiseAbs().maxCoeff();
    CHECK_LE_TOL(bc_err, 1e-12 * std::max(1.0, d.cwiseAbs().maxCoeff()), "max |jvp(broadcast seed) - jvp(dense seed)|");
    for (int a = 0; a < n; ++a) {
      CAPTURE(a);
      const Mat plus = p.value + kStep * dirs.col(a), minus = p.value - kStep * dirs.col(a);
      const Mat fd = (forward<double>(m, w, x, {static_cast<int>(pi), &plus}) -
                      forward<double>(m, w, x, {static_cast<int>(pi), &minus})) / (2 * kStep);
      const Mat da = d.middleRows(a * N, N);
      const double scale = std::max(1.0, da.cwiseAbs().maxCoeff());
      const double err = (da - fd).cwiseAbs().maxCoeff();
      INFO("max |jvp| " << da.cwiseAbs().maxCoeff() << ", max |fd| " << fd.cwiseAbs().maxCoeff());
      CHECK_LE_TOL(err, kRelTol * scale, "max |jvp - central difference|");
    }
    ++checked;
  }
  CHECK(checked > 0);
}

}  // namespace

TEST_CASE("jvp: parallel blocks, nested ones and blocks within branches included") {
  // A tangent that enters in one branch reaches the output only through the block's sum; the
  // later branches start again from the block's input.
  check_all_biases(net(2, 3, 4, R"({"type": "parallel", "branches": [
      [{"type": "layernorm"}, {"type": "attention", "num_heads": 2, "causal": true}],
      [{"type": "residual", "body": [{"type": "gelu"}, {"type": "linear"}]},
       {"type": "parallel", "branches": [[{"type": "linear"}], [{"type": "rmsnorm"}, {"type": "glu", "hidden": 6, "bias": true}]]}]]},
    {"type": "layernorm"})"));
}

TEST_CASE("jvp: convolutions, their biases and what they carry to the output") {
  // A bias tangent constant over the tokens stops being so at a padded convolution's borders.
  check_all_biases(R"({"version": 1, "seed": 2, "shape": {"batch": 2, "features": 4, "grid": [3, 3]}, "layers": [
      {"type": "conv2d", "groups": 2}, {"type": "batchnorm"}, {"type": "relu"},
      {"type": "conv1d", "kernel_size": 4, "padding": "causal", "out_channels": 6},
      {"type": "layernorm"}, {"type": "conv2d", "kernel_size": 2, "padding": "causal", "groups": 6},
      {"type": "groupnorm", "num_groups": 3}]})");
}

TEST_CASE("jvp: a position table enters per token, and what it carries to the output") {
  // The table's direction (t, f) moves token t of every sample only; a bias before the table
  // passes it unchanged.
  check_all_biases(net(2, 3, 4, R"({"type": "linear"}, {"type": "pos_embedding"}, {"type": "layernorm"},
      {"type": "residual", "body": [{"type": "pos_embedding"}, {"type": "attention", "num_heads": 2, "causal": true}]},
      {"type": "groupnorm", "num_groups": 2}, {"type": "pos_embedding"}, {"type": "gelu"})"));
}

TEST_CASE("jvp: a linear bias matches central differences through linear, relu and gelu") {
  SUBCASE("linear alone") { check_all_biases(net(2, 3, 4, R"({"type": "linear"})")); }
  SUBCASE("linear, relu, linear") {
    check_all_biases(net(2, 3, 4, R"({"type": "linear", "out_features": 6}, {"type": "relu"}, {"type": "linear"})"));
  }
  SUBCASE("gelu exact") {
    check_all_biases(net(2, 3, 4, R"({"type": "linear"}, {"type": "gelu"}, {"type": "linear", "out_features": 3})"));
  }
  SUBCASE("gelu tanh") {
    check_all_biases(net(2, 3, 4, R"({"type": "linear"}, {"type": "gelu", "approximate": "tanh"}, {"type": "linear"})"));
  }
  SUBCASE("softmax over features") {
    check_all_biases(net(2, 3, 4, R"({"type": "linear"}, {"type": "softmax"}, {"type": "linear"})"));
  }
  SUBCASE("1 feature, 1 token, batch 1") {
    check_all_biases(net(1, 1, 1, R"({"type": "linear"}, {"type": "gelu"}, {"type": "linear"})"));
  }
}

TEST_CASE("jvp: norm shifts and the bias before each norm match central differences") {
  // Linear -> norm -> Linear: the first bias goes through the norm's JVP, the shift enters it.
  auto around = [](const std::string& norm) {
    return R"({"type": "linear"}, )" + norm + R"(, {"type": "linear", "out_features": 5})";
  };
  SUBCASE("layernorm") { check_all_biases(net(2, 3, 8, around(R"({"type": "layernorm"})"))); }
  SUBCASE("rmsnorm (gain only)") { check_all_biases(net(2, 3, 8, around(R"({"type": "rmsnorm"})"))); }
  SUBCASE("batchnorm train") { check_all_biases(net(2, 3, 8, around(R"({"type": "batchnorm"})"))); }
  SUBCASE("batchnorm eval") { check_all_biases(net(2, 3, 8, around(R"({"type": "batchnorm", "mode": "eval"})"))); }
  SUBCASE("groupnorm, 2 groups") { check_all_biases(net(2, 3, 8, around(R"({"type": "groupnorm", "num_groups": 2})"))); }
  SUBCASE("groupnorm, 1 group") { check_all_biases(net(2, 3, 8, around(R"({"type": "groupnorm", "num_groups": 1})"))); }
  SUBCASE("instancenorm with affine") {
    check_all_biases(net(2, 3, 8, around(R"({"type": "instancenorm", "affine": true})")));
  }
  SUBCASE("norms in a row, ending in a norm") {
    check_all_biases(net(3, 2, 4, R"({"type": "linear"}, {"type": "layernorm"}, {"type": "batchnorm"},
                                     {"type": "groupnorm", "num_groups": 2}, {"type": "instancenorm", "affine": true})"));
  }
  SUBCASE("batch 1, 1 token: batch and instance statistics are degenerate") {
    check_all_biases(net(1, 1, 4, R"({"type": "linear"}, {"type": "batchnorm"}, {"type": "linear"},
                                     {"type": "instancenorm", "affine": true}, {"type": "linear"})"));
  }
}

TEST_CASE("jvp: attention q/k/v/o biases match central differences") {
  SUBCASE("plain") { check_all_biases(net(2, 4, 8, R"({"type": "attention", "num_heads": 2})")); }
  SUBCASE("causal") { check_all_biases(net(2, 4, 8, R"({"type": "attention", "num_heads": 2, "causal": true})")); }
  SUBCASE("rope") { check_all_biases(net(2, 4, 8, R"({"type": "attention", "num_heads": 2, "rope": true})")); }
  SUBCASE("causal and rope") {
    check_all_biases(net(2, 4, 8, R"({"type": "attention", "num_heads": 2, "causal": true, "rope": true})"));
  }
  SUBCASE("a bias before attention flows through all of q, k and v") {
    check_all_biases(net(2, 4, 8, R"({"type": "linear"}, {"type": "attention", "num_heads": 4, "rope": true},
                                     {"type": "attention", "num_heads": 1, "causal": true})"));
  }
  SUBCASE("a bias before attention without RoPE (the broadcast path), causal and not") {
    check_all_biases(net(2, 5, 8, R"({"type": "linear"}, {"type": "attention", "num_heads": 2, "causal": true},
                                     {"type": "linear"}, {"type": "attention", "num_heads": 4})"));
  }
  SUBCASE("1 token, batch 1") { check_all_biases(net(1, 1, 4, R"({"type": "attention", "num_heads": 2})")); }
  SUBCASE("grouped-query (4 heads, 2 kv heads), broadcast path and with partial RoPE") {
    check_all_biases(net(2, 4, 16, R"({"type": "linear"}, {"type": "attention", "num_heads": 4, "num_kv_heads": 2},
                                      {"type": "attention", "num_heads": 4, "num_kv_heads": 2, "rope": true, "rotary_dim": 2})"));
  }
  SUBCASE("sinks (their own logits too), causal and not, grouped, with RoPE, after a bias") {
    check_all_biases(net(2, 4, 8, R"({"type": "linear"}, {"type": "attention", "num_heads": 2, "sinks": true},
                                     {"type": "attention", "num_heads": 4, "num_kv_heads": 2, "sinks": true, "causal": true, "rope": true})"));
  }
  SUBCASE("qk_norm (layernorm: its q_norm and k_norm shifts too; rmsnorm), grouped, causal, with RoPE, after a bias") {
    check_all_biases(net(2, 4, 16, R"({"type": "linear"}, {"type": "attention", "num_heads": 4, "num_kv_heads": 2, "qk_norm": "layernorm"},
                                      {"type": "attention", "num_heads": 2, "qk_norm": "layernorm", "causal": true, "rope": true, "rotary_dim": 4},
                                      {"type": "attention", "num_heads": 4, "num_kv_heads": 1, "qk_norm": "rmsnorm", "sinks": true})"));
  }
  SUBCASE("multi-query (1 kv head), causal") {
    check_all_biases(net(2, 3, 8, R"({"type": "attention", "num_heads": 4, "num_kv_heads": 1, "causal": true})"));
  }
}

// The float64 forward trace of a built config's first input.
template <class Built>
Trace first_trace(const Built& b) {
  Trace trace;
  forward<double>(b.model, cast_weights<double>(b.model), draw_input(b.config, 0), {}, &trace);
  return trace;
}

// A key bias direction dk adds q_i . dk to every score of query i: a constant per softmax row,
// which the softmax does not see. Its tangent is then exactly zero, not rounding (the structure
// needs no work for it), unless a sink's logit, which dk does not move, is in the row; RoPE
// rotates dk per key position, so the scores then move by different amounts.
TEST_CASE("jvp: a key bias direction's tangent through softmax attention is exactly zero, but for sinks and RoPE") {
  struct Case {
    const char* attention;
    bool zero;
  };
  for (const Case& c : {Case{R"({"type": "attention", "num_heads": 2})", true},
                        Case{R"({"type": "attention", "num_heads": 4, "num_kv_heads": 2, "causal": true})", true},
                        Case{R"({"type": "attention", "num_heads": 2, "sinks": true})", false},
                        Case{R"({"type": "attention", "num_heads": 2, "rope": true})", false}}) {
    const std::string attention = c.attention;
    CAPTURE(attention);
    auto b = build(net(2, 5, 8, std::string(c.attention) + R"(, {"type": "linear"}, {"type": "layernorm"})"));
    const Model& m = b.model;
    const Trace trace = first_trace(b);
    const int pk = param_index(m, "layers.0.k_proj.bias");
    const int n = static_cast<int>(m.params[pk].value.size());
    const Seed unit{pk, Mat::Identity(n, n), true};
    const Mat d = jvp(m, trace, unit, n, static_cast<int>(m.ops.size()));
    const double largest = d.cwiseAbs().maxCoeff();
    INFO("largest entry of the key bias's tangents: " << largest);
    if (c.zero) CHECK(largest == 0.0);
    else CHECK(largest > 1e-6);
  }
}

// The structure takes a q, k or v bias's tangents at its attention's output block by block
// (attention_bias_blocks); put together they must be the dense JVP's, bit for bit, with every
// entry outside the blocks exactly zero; RoPE and qk_norm are refused (the dense path serves).
TEST_CASE("jvp: attention's tangents block by block are the dense ones, bit for bit") {
  struct Case {
    const char* attention;
    bool blocks;
  };
  for (const Case& c : {Case{R"({"type": "attention", "num_heads": 4, "causal": true})", true},
                        Case{R"({"type": "attention", "num_heads": 4, "num_kv_heads": 2, "sinks": true})", true},
                        Case{R"({"type": "attention", "num_heads": 2, "context_tokens": 3})", true},
                        Case{R"({"type": "attention", "num_heads": 2, "rope": true})", false},
                        Case{R"({"type": "attention", "num_heads": 2, "qk_norm": "rmsnorm"})", false}}) {
    const std::string attention = c.attention;
    CAPTURE(attention);
    auto b = build(net(2, 5, 8, attention));
    const Model& m = b.model;
    const Trace trace = first_trace(b);
    const Eigen::Index N = Eigen::Index(m.batch) * m.tokens;
    const int d = m.ops[0].in / m.ops[0].heads;
    for (const std::string name : {"q_proj.bias", "k_proj.bias", "v_proj.bias"}) {
      CAPTURE(name);
      const int p = param_index(m, "layers.0." + name);
      const int n = static_cast<int>(m.params[p].value.size());
      const Seed unit{p, Mat::Identity(n, n), true};
      const Mat dense = jvp(m, trace, unit, n, 1);  // at the attention's output (o_proj's input)
      Mat put = Mat::Zero(dense.rows(), dense.cols());
      int emitted = 0;
      const bool took = attention_bias_blocks(m, m.ops[0], trace.attention[0], unit, n, [&](int a, int s, int h, const Mat& block) {
        put.block(a * N + Eigen::Index(s) * m.tokens, Eigen::Index(h) * d, m.tokens, d) = block;
        ++emitted;
      });
      REQUIRE(took == c.blocks);
      if (!took) continue;
      // (a key bias without sinks has exactly zero tangents: no block at all)
      const bool zero = std::string(name) == "k_proj.bias" && attention.find("sinks") == std::string::npos;
      CHECK((emitted == 0) == zero);
      const double largest = (put - dense).cwiseAbs().maxCoeff();
      INFO("largest difference from the dense tangents: " << largest);
      CHECK(largest == 0.0);
    }
  }
}

// At each query row the query bias's Jacobian is, head by head, L K (query_bias_factors): the
// structure takes the columns of L (one per key the row weighs, less one without sinks) through
// the layers after attention instead of the d unit directions. It must be the dense JVP's block
// at that row, to rounding.
TEST_CASE("jvp: a query bias's Jacobian at a query row is L K, head by head") {
  constexpr double kTol = 1e-12;  // of the largest entry (at least 1): a different order of sums
  for (const std::string attention : {R"({"type": "attention", "num_heads": 4, "causal": true})",
                                      R"({"type": "attention", "num_heads": 4, "num_kv_heads": 2, "sinks": true})",
                                      R"({"type": "attention", "num_heads": 2, "context_tokens": 3})",
                                      R"({"type": "attention", "num_heads": 2, "rope": true, "causal": true})",
                                      R"({"type": "attention", "num_heads": 2, "rope": true, "rotary_dim": 2, "rope_style": "interleaved"})",
                                      R"({"type": "attention", "num_heads": 4, "num_kv_heads": 2, "rope": true, "qk_norm": "rmsnorm", "sinks": true})",
                                      R"({"type": "attention", "num_heads": 2, "qk_norm": "layernorm", "causal": true})"}) {
    CAPTURE(attention);
    auto b = build(net(2, 5, 8, attention));
    const Model& m = b.model;
    const Trace trace = first_trace(b);
    const Eigen::Index N = Eigen::Index(m.batch) * m.tokens;
    const Op& op = m.ops[0];
    const int p = param_index(m, "layers.0.q_proj.bias"), n = op.in, d = op.in / op.heads;
    const Mat dense = jvp(m, trace, Seed{p, Mat::Identity(n, n), true}, n, 1);
    const double scale = dense.cwiseAbs().maxCoeff();
    double worst = 0;
    for (Eigen::Index r = 0; r < N; ++r) {
      const auto f = query_bias_factors(m, op, trace.attention[0], p, r);
      REQUIRE(f.has_value());
      for (int h = 0; h < op.heads; ++h) {
        // As few columns as the row's weights allow: one per key it weighs, less one where they
        // sum to 1 (no sinks), as the structure pushes each column through the later layers.
        const Eigen::Index T = m.tokens, b = r / T;
        const Mat& P = trace.attention[0].probs[static_cast<size_t>(b * op.heads + h)];
        const auto weighed = static_cast<Eigen::Index>((P.row(r % T).array() != 0).count());
        CHECK((*f)[static_cast<size_t>(h)].L.cols() == (op.sinks >= 0 ? weighed : weighed - 1));
        const Mat LK = (*f)[static_cast<size_t>(h)].L * (*f)[static_cast<size_t>(h)].K;  // (d, d): column e is direction h d + e
        for (int e = 0; e < d; ++e) {
          const Eigen::Index a = Eigen::Index(h) * d + e;
          worst = std::max(worst, (dense.row(a * N + r).segment(Eigen::Index(h) * d, d).transpose() - LK.col(e)).cwiseAbs().maxCoeff());
        }
      }
    }
    INFO("largest difference " << worst << " against entries up to " << scale);
    CHECK(worst <= kTol * std::max(1.0, scale));
  }
}

TEST_CASE("jvp: cross-attention, whose keys and values read the context and not the input") {
  // Queries from 4 tokens, keys and values from a context of 6 (3 with batch 1): the input's
  // tangent reaches q alone; the k and v biases enter on the context's rows.
  SUBCASE("plain, after a linear") {
    check_all_biases(net(2, 4, 8, R"({"type": "linear"}, {"type": "attention", "num_heads": 2, "context_tokens": 6},
                                   {"type": "layernorm"})"));
  }
  SUBCASE("grouped-query, qk_norm layernorm, sinks") {
    check_all_biases(net(2, 4, 16, R"({"type": "linear"}, {"type": "attention", "num_heads": 4, "num_kv_heads": 2,
                                    "qk_norm": "layernorm", "sinks": true, "context_tokens": 3}, {"type": "gelu"}, {"type": "linear"})"));
  }
  SUBCASE("inside a residual after self-attention, as a decoder block; 1 context token") {
    check_all_biases(net(1, 3, 8, R"({"type": "residual", "body": [{"type": "layernorm"}, {"type": "attention", "num_heads": 2, "causal": true}]},
                                   {"type": "residual", "body": [{"type": "layernorm"}, {"type": "attention", "num_heads": 2, "context_tokens": 1}]},
                                   {"type": "residual", "body": [{"type": "layernorm"}, {"type": "attention", "num_heads": 2, "context_tokens": 1}]})"));
  }
}

TEST_CASE("jvp: biases inside residual blocks match central differences") {
  SUBCASE("pre-norm transformer layer") {
    check_all_biases(net(2, 4, 8, R"({"type": "residual", "body": [{"type": "layernorm"}, {"type": "attention", "num_heads": 2}]},
       {"type": "residual", "body": [{"type": "layernorm"}, {"type": "linear", "out_features": 16},
                                     {"type": "gelu"}, {"type": "linear", "out_features": 8}]})"));
  }
  SUBCASE("post-norm transformer layer") {
    check_all_biases(net(2, 4, 8, R"({"type": "residual", "body": [{"type": "attention", "num_heads": 2}]}, {"type": "layernorm"},
       {"type": "residual", "body": [{"type": "linear", "out_features": 16}, {"type": "relu"},
                                     {"type": "linear", "out_features": 8}]}, {"type": "layernorm"})"));
  }
  SUBCASE("nested residuals with rmsnorm") {
    check_all_biases(net(2, 3, 4, R"({"type": "linear"}, {"type": "residual", "body": [{"type": "rmsnorm"},
       {"type": "residual", "body": [{"type": "linear"}, {"type": "softmax"}]}, {"type": "linear"}]}, {"type": "rmsnorm"})"));
  }
}

TEST_CASE("jvp: trailing_cut finds the per-token linear tail and trailing_map is that tail") {
  // A tangent entering at `start` and pushed to the cut, then through A, must equal the tangent
  // pushed to the output: A is the tail's Jacobian per token.
  auto check_map = [](const biaslab::test::Built& b, const std::string& bias, int expected_cut) {
    const Model& m = b.model;
    const int pi = param_index(m, bias);
    const int start = m.params[pi].op;
    const int cut = trailing_cut(m, start);
    CAPTURE(bias);
    CHECK(cut == expected_cut);
    const int end = static_cast<int>(m.ops.size());
    if (cut >= end) return;
    const Mat A = trailing_map(m, start, cut);
    REQUIRE(A.rows() == m.out_features);
    REQUIRE(A.cols() == m.ops[cut].in);
    const Mat x = draw_input(b.config, 0);
    Trace trace;
    forward<double>(m, cast_weights<double>(m), x, {}, &trace);
    Rng rng(3, bias);
    Seed seed{pi, Mat(x.rows(), m.params[pi].value.size())};
    for (Eigen::Index i = 0; i < seed.values.size(); ++i) seed.values.data()[i] = rng.normal();
    const Mat at_cut = jvp(m, trace, seed, 1, cut);
    const Mat at_end = jvp(m, trace, seed, 1, end);
    CHECK_MAX_ABS_LE(Mat(at_cut * A.transpose()), at_end, 1e-12 * std::max(1.0, at_end.cwiseAbs().maxCoeff()));
    return;
  };
  SUBCASE("linear, relu, linear, batchnorm eval, linear: cut after the relu, A = W4 diag(s) W2") {
    auto b = build(net(1, 2, 4, R"({"type": "linear"}, {"type": "relu"}, {"type": "linear", "out_features": 3},
                                   {"type": "batchnorm", "mode": "eval"}, {"type": "linear", "out_features": 2})"));
    check_map(b, "layers.0.bias", 2);
    const Model& m = b.model;
    const Mat& W2 = m.params[param_index(m, "layers.2.weight")].value;
    const Mat& W4 = m.params[param_index(m, "layers.4.weight")].value;
    const Mat& g = m.params[param_index(m, "layers.3.weight")].value;
    const Mat& var = m.params[param_index(m, "layers.3.running_var")].value;
    const Vec s = g.col(0).array() / (var.col(0).array() + 1e-5).sqrt();
    CHECK_MAX_ABS_LE(trailing_map(m, 0, 2), Mat(W4 * s.asDiagonal() * W2), 1e-12);
    // A bias after the relu: the tail starts right after it.
    check_map(b, "layers.2.bias", 3);
    check_map(b, "layers.3.bias", 4);
    // The last op's bias: the tail is empty.
    check_map(b, "layers.4.bias", 5);
  }
  SUBCASE("a residual block after the nonlinearity: A = I + W") {
    auto b = build(net(1, 2, 4, R"({"type": "linear"}, {"type": "relu"}, {"type": "residual", "body": [{"type": "linear"}]})"));
    // ops: 0 linear, 1 relu, 2 begin, 3 linear, 4 end
    check_map(b, "layers.0.bias", 2);
    const Model& m = b.model;
    const Mat& W = m.params[param_index(m, "layers.2.body.0.weight")].value;
    CHECK_MAX_ABS_LE(trailing_map(m, 0, 2), Mat(Mat::Identity(4, 4) + W), 1e-12);
  }
  SUBCASE("a cut inside a residual body would lose the skip path: no cut") {
    auto b = build(net(1, 2, 4, R"({"type": "linear"}, {"type": "relu"}, {"type": "residual", "body": [{"type": "relu"}, {"type": "linear"}]})"));
    check_map(b, "layers.0.bias", static_cast<int>(b.model.ops.size()));
  }
  SUBCASE("a skip pushed before the bias carries no tangent: the tail may start inside the body") {
    auto b = build(net(1, 2, 4, R"({"type": "residual", "body": [{"type": "linear"}, {"type": "relu"}, {"type": "linear"}]},
                                   {"type": "linear", "out_features": 3})"));
    // ops: 0 begin, 1 linear, 2 relu, 3 linear, 4 end, 5 linear; A = W5 W3 (the add gets no tangent)
    check_map(b, "layers.0.body.0.bias", 3);
    const Model& m = b.model;
    const Mat& W3 = m.params[param_index(m, "layers.0.body.2.weight")].value;
    const Mat& W5 = m.params[param_index(m, "layers.1.weight")].value;
    CHECK_MAX_ABS_LE(trailing_map(m, 1, 3), Mat(W5 * W3), 1e-12);
  }
  SUBCASE("a nonlinear last op: no tail") {
    auto b = build(net(1, 2, 4, R"({"type": "linear"}, {"type": "linear"}, {"type": "gelu"})"));
    check_map(b, "layers.0.bias", static_cast<int>(b.model.ops.size()));
  }
}

TEST_CASE("jvp: injective_cut keeps the tail's cut only where the tail's map is injective") {
  // The cut is trailing_cut's where the tail's map A (per token) has full column rank, else the
  // output. Cases the shortcuts decide without making A (residual ends alone: A = kI; a tail
  // wider than tall) beside ones the factorisation decides.
  auto cut_of = [](const std::string& layers, const std::string& bias, int features = 4) {
    auto b = build(net(1, 2, features, layers));
    const Model& m = b.model;
    const int start = m.params[param_index(m, bias)].op;
    return std::pair<int, int>(injective_cut(m, start), static_cast<int>(m.ops.size()));
  };
  SUBCASE("a bias just before the last residual end: A = I, the cut is that end") {
    // ops: 0 begin, 1 linear, 2 relu, 3 linear, 4 end
    const auto [cut, end] = cut_of(R"({"type": "residual", "body": [{"type": "linear"}, {"type": "relu"}, {"type": "linear"}]})",
                                   "layers.0.body.2.bias");
    CHECK(cut == 4);
    CHECK(end == 5);
  }
  SUBCASE("two residual ends after the bias: A = I still (the outer skip was pushed before it)") {
    const auto [cut, end] = cut_of(R"({"type": "residual", "body": [{"type": "relu"}, {"type": "residual", "body": [{"type": "relu"}, {"type": "linear"}]}]})",
                                   "layers.0.body.1.body.1.bias");
    CHECK(cut == end - 2);
  }
  SUBCASE("a tail that narrows (4 -> 3): not injective, the output") {
    const auto [cut, end] = cut_of(R"({"type": "linear"}, {"type": "relu"}, {"type": "linear", "out_features": 3})", "layers.0.bias");
    CHECK(cut == end);
  }
  SUBCASE("a tail that narrows and widens again (4 -> 2 -> 6): rank 2 of 4, the output") {
    const auto [cut, end] = cut_of(R"({"type": "linear"}, {"type": "relu"}, {"type": "linear", "out_features": 2},
                                      {"type": "linear", "out_features": 6})", "layers.0.bias");
    CHECK(cut == end);
  }
  SUBCASE("a square tail (random, invertible) and a widening one: the cut after the relu") {
    CHECK(cut_of(R"({"type": "linear"}, {"type": "relu"}, {"type": "linear"})", "layers.0.bias").first == 2);
    CHECK(cut_of(R"({"type": "linear"}, {"type": "relu"}, {"type": "linear", "out_features": 7})", "layers.0.bias").first == 2);
  }
}

TEST_CASE("jvp: unit bias directions through activations take the one-hot path, with the same values") {
  // A bias followed by an elementwise activation: each unit direction's tangent keeps one
  // nonzero per token, and the next Linear takes one scaled column of its weight per row
  // (model/jvp.cpp, OneHot). The same directions as a per-token seed go the dense way; the two
  // must agree exactly, since the dense product only adds exact zeros to the one nonzero term
  // (a zero may differ in sign, which the difference does not see).
  // Every other op, and the end of the stack, takes the batch in dense form; a Linear right after
  // the bias takes one column of its weight per unit direction (16 directions on).
  auto check = [](const std::string& layers, int stop_from_end) {
    auto b = build(net(2, 3, 5, layers));
    const Model& m = b.model;
    const Mat x = draw_input(b.config, 0);
    Trace trace;
    forward<double>(m, cast_weights<double>(m), x, {}, &trace);
    const Eigen::Index N = x.rows();
    const int pi = param_index(m, "layers.0.bias");
    const int size = static_cast<int>(m.params[pi].value.size());
    // Unit directions, a scaled one, a zero one and one with two nonzeros (which stays dense).
    const int n = size + 3;
    Mat dirs = Mat::Zero(n, size);
    for (int a = 0; a < size; ++a) dirs(a, a) = 1.0;
    dirs(size, 1) = -2.5;
    dirs(size + 2, 0) = 0.75;
    dirs(size + 2, size - 1) = 1.25;
    const int stop = static_cast<int>(m.ops.size()) - stop_from_end;
    for (const bool mixed : {false, true}) {
      CAPTURE(mixed);
      const Mat d = mixed ? dirs : Mat(dirs.topRows(size + 2));
      const int k = static_cast<int>(d.rows());
      const Seed compact{pi, d, true};
      Seed dense{pi, Mat(Eigen::Index(k) * N, size)};
      for (int a = 0; a < k; ++a) dense.values.middleRows(Eigen::Index(a) * N, N) = d.row(a).replicate(N, 1);
      const Mat fast = jvp(m, trace, compact, k, stop);
      const Mat slow = jvp(m, trace, dense, k, stop);
      REQUIRE(fast.rows() == slow.rows());
      REQUIRE(fast.cols() == slow.cols());
      CHECK_LE_TOL((fast - slow).cwiseAbs().maxCoeff(), 0.0, "max |one-hot jvp - dense jvp|");
      CHECK(slow.cwiseAbs().maxCoeff() > 0);
    }
  };
  SUBCASE("linear, gelu, linear, layernorm") {
    check(R"({"type": "linear", "out_features": 7}, {"type": "gelu"}, {"type": "linear"}, {"type": "layernorm"})", 0);
  }
  SUBCASE("two activations in a row, then a residual") {
    check(R"({"type": "linear"}, {"type": "relu"}, {"type": "gelu", "approximate": "tanh"},
             {"type": "residual", "body": [{"type": "linear"}, {"type": "silu"}]}, {"type": "linear"})", 0);
  }
  SUBCASE("an activation at the end, and a cut right after it") {
    check(R"({"type": "linear", "out_features": 6}, {"type": "tanh"})", 0);
    check(R"({"type": "linear", "out_features": 6}, {"type": "gelu"}, {"type": "linear"})", 1);
  }
  SUBCASE("an activation then a norm") {
    check(R"({"type": "linear"}, {"type": "gelu"}, {"type": "rmsnorm"}, {"type": "linear"})", 0);
  }
  SUBCASE("a Linear right after the bias: 16 directions and more pick its weight's columns") {
    check(R"({"type": "linear", "out_features": 20}, {"type": "linear", "out_features": 9}, {"type": "gelu"}, {"type": "linear"})", 0);
  }
}

TEST_CASE("jvp: a gated FFN takes many directions token by token, with the two products' values") {
  // From 32 directions on, a per-token tangent goes through the gated FFN with each token's own
  // matrix diag(act'(g) u) W_gate + diag(act(g)) W_up (glu_jvp_per_token), a block of hidden units
  // at a time. The same directions one at a time take the two products; they must agree to
  // rounding. The hidden width (300) leaves a partial block; the seeds are the query and key
  // biases, through the attention, and a Linear's bias, which the RMSNorm before the FFN makes
  // per token.
  auto b = build(net(2, 3, 8, R"({"type": "residual", "body": [{"type": "rmsnorm"},
      {"type": "attention", "num_heads": 2, "causal": true, "rope": true}]},
      {"type": "linear"}, {"type": "residual", "body": [{"type": "rmsnorm"}, {"type": "glu", "hidden": 300, "activation": "gelu"}]})"));
  const Model& m = b.model;
  const Mat x = draw_input(b.config, 0);
  Trace trace;
  forward<double>(m, cast_weights<double>(m), x, {}, &trace);
  const int stop = static_cast<int>(m.ops.size());
  for (const std::string name : {"layers.0.body.1.q_proj.bias", "layers.0.body.1.k_proj.bias", "layers.1.bias"}) {
    CAPTURE(name);
    const int pi = param_index(m, name);
    const int size = static_cast<int>(m.params[pi].value.size()), n = 40;
    Rng rng(23, name);
    Mat dirs(n, size);
    for (Eigen::Index i = 0; i < dirs.size(); ++i) dirs(i) = rng.normal();
    const Mat all = jvp(m, trace, Seed{pi, dirs, true}, n, stop);
    const Eigen::Index N = all.rows() / n;
    REQUIRE(all.rows() == n * N);
    double err = 0, scale = 0;
    for (int a = 0; a < n; ++a) {
      const Mat one = jvp(m, trace, Seed{pi, Mat(dirs.row(a)), true}, 1, stop);
      REQUIRE(one.rows() == N);
      err = std::max(err, (all.middleRows(a * N, N) - one).cwiseAbs().maxCoeff());
      scale = std::max(scale, one.cwiseAbs().maxCoeff());
    }
    CHECK(scale > 0);
    CHECK_LE_TOL(err, 1e-13 * scale, "max |40 directions at once - one at a time|");
    // On token rows (the structure's rows of a few tokens, from the op after the attention on):
    // the 40 directions at once against one at a time on the same rows, and against those rows
    // of the full tangents.
    const int at = m.params[param_index(m, "layers.0.body.1.q_proj.bias")].op + 1;  // (the attention's)
    const std::vector<Eigen::Index> rows{1, 2, 5};
    const TokenRows sub = take_rows(trace, std::max(at, m.params[pi].op), stop, rows);
    const Eigen::Index k = static_cast<Eigen::Index>(rows.size());
    const Mat part = jvp(m, trace, Seed{pi, dirs, true}, n, stop, nullptr, &sub);
    REQUIRE(part.rows() == n * k);
    double err_rows = 0, err_full = 0;
    for (int a = 0; a < n; ++a) {
      const Mat one = jvp(m, trace, Seed{pi, Mat(dirs.row(a)), true}, 1, stop, nullptr, &sub);
      REQUIRE(one.rows() == k);
      err_rows = std::max(err_rows, (part.middleRows(a * k, k) - one).cwiseAbs().maxCoeff());
      for (Eigen::Index j = 0; j < k; ++j)
        err_full = std::max(err_full, (part.row(a * k + j) - all.row(a * N + rows[static_cast<size_t>(j)])).cwiseAbs().maxCoeff());
    }
    CHECK_LE_TOL(err_rows, 1e-13 * scale, "max |40 directions at once - one at a time|, on token rows");
    CHECK_LE_TOL(err_full, 1e-13 * scale, "max |40 directions on token rows - those rows of all tokens'|");
  }
}

TEST_CASE("jvp: the structure's work estimate counts the one-hot Linear as one column per token") {
  // The limits (analysis/analyze.cpp) and the per-bias budget use this estimate: per direction
  // and token, 10 flops per feature of an elementwise op or norm, and for the Linear after the
  // activation 2 per output (a scaled column), not 2 * in * out. A norm in between makes the
  // tangent dense again, and the Linear is then a full product.
  const double N = 2 * 3;
  auto b = build(net(2, 3, 4, R"({"type": "linear", "out_features": 10}, {"type": "gelu"}, {"type": "linear", "out_features": 6}, {"type": "layernorm"})"));
  const Model& m = b.model;
  const ModelParam& p = m.params[param_index(m, "layers.0.bias")];
  CHECK(structural_flops_per_input(m, p) == doctest::Approx(10 * (10 * N * 10 + 2 * N * 6 + 10 * N * 6)));
  auto c = build(net(2, 3, 4, R"({"type": "linear", "out_features": 10}, {"type": "gelu"}, {"type": "rmsnorm"}, {"type": "linear", "out_features": 6}, {"type": "layernorm"})"));
  const Model& mc = c.model;
  const ModelParam& pc = mc.params[param_index(mc, "layers.0.bias")];
  CHECK(structural_flops_per_input(mc, pc) == doctest::Approx(10 * (10 * N * 10 + 10 * N * 10 + 2 * N * 10 * 6 + 10 * N * 6)));
  // Directions other than the unit ones (the reference, null vectors) take the dense path.
  CHECK(structural_flops_per_input(m, p, false) == doctest::Approx(10 * (10 * N * 10 + 2 * N * 10 * 6 + 10 * N * 6)));
}

TEST_CASE("jvp: with token rows the estimate and the stacked rows count the rows' tokens after the rows' op") {
  // GPT-2's MLP at 768 wide, 2 x 16 tokens: the first bias's 3072 directions need 1.5 x 3072 /
  // 768 = 6 rows of tokens, 3 a sample (at most half the tokens: taken). Every op after the bias
  // acts per token, so the rows start at the bias's own op: the Jacobian stacks 6 rows, not 32,
  // and the GELU, the one-hot Linear and the LayerNorm cost 6 tokens' work.
  auto b = build(net(2, 16, 768, R"({"type": "linear", "out_features": 3072}, {"type": "gelu"}, {"type": "linear", "out_features": 768}, {"type": "layernorm"})"));
  const Model& m = b.model;
  const int pi = param_index(m, "layers.0.bias");
  const RowPlan plan = plan_rows(m, pi, static_cast<int>(m.ops.size()), kRowSubsetMinFlops);
  CHECK(plan.at == m.params[pi].op);
  CHECK(plan.per_sample == 3);
  CHECK(stacked_rows(m, pi) == 6);
  const double rows = 6;
  CHECK(structural_flops_per_input(m, m.params[pi]) == doctest::Approx(3072.0 * (10 * rows * 3072 + 2 * rows * 768 + 10 * rows * 768)));
  CHECK(structural_flops_per_input(m, m.params[pi], true, INFINITY) == doctest::Approx(3072.0 * (10.0 * 32 * 3072 + 2.0 * 32 * 768 + 10.0 * 32 * 768)));
  // One token a sample: no rows to leave out, every row is stacked.
  auto one = build(net(32, 1, 768, R"({"type": "linear", "out_features": 3072}, {"type": "gelu"}, {"type": "linear", "out_features": 768}, {"type": "layernorm"})"));
  CHECK(plan_rows(one.model, pi, static_cast<int>(one.model.ops.size()), kRowSubsetMinFlops).at == -1);
  CHECK(stacked_rows(one.model, pi) == 32);
}

TEST_CASE("jvp: a chunk of directions is sized by the widest op on its way, not the Jacobian's width") {
  // An MLP 4096 wide between 45-wide layers, 512 tokens: at the hidden width one direction's
  // tangent holds 512 * 4096 = 2 M doubles. Sized by the output width (45) or the bias (45), a
  // chunk of 2^20 elements took 45 directions, 94 M doubles (0.75 GB) per copy of the batch.
  auto b = build(net(1, 512, 45, R"({"type": "linear"}, {"type": "gelu"}, {"type": "linear", "out_features": 4096, "bias": false},
      {"type": "gelu"}, {"type": "linear", "out_features": 45}, {"type": "layernorm"})"));
  const Model& m = b.model;
  const int end = static_cast<int>(m.ops.size());
  const long elements = 1L << 20;
  for (int chunk_of : {1, 45}) {
    const int c = chunk_directions(m, 0, end, 45, 512, chunk_of, elements);
    CAPTURE(chunk_of);
    CHECK(c == 1);  // one direction is already 2 M doubles: never fewer than one
  }
  // 8 tokens: 8 * 4096 = 32 K doubles a direction at the hidden width, so 32 directions fit.
  auto s = build(net(1, 8, 45, R"({"type": "linear"}, {"type": "gelu"}, {"type": "linear", "out_features": 4096}, {"type": "gelu"}, {"type": "linear", "out_features": 45})"));
  CHECK(chunk_directions(s.model, 0, static_cast<int>(s.model.ops.size()), 45, 8, 45, elements) == 32);
  // The hidden layer after the cut does not count: up to op 2 (its input), the widest is 45.
  CHECK(chunk_directions(s.model, 0, 2, 45, 8, 45, elements) == 45);
}

TEST_CASE("jvp: token rows give those rows of every tangent, through a shared tail too, and the tail bound holds on every token") {
  // plan_rows picks the op after the last one that mixes tokens; from there jvp() may carry only
  // some tokens' rows. Those rows must be the full tangent's rows (the same ops on fewer rows,
  // to rounding of a product with fewer rows). And tail_bounds must bound every token's stretch
  // through the ops after the rows' op: for random directions, |tangent of t at the output| <=
  // L(t) |tangent of t where the bound starts|. The norms' gains are scaled away from 1 first,
  // so a bound that left a gain out would fail.
  const char* stacks[] = {
      // GPT-2-like, pre-norm, final LayerNorm
      R"({"type": "residual", "body": [{"type": "layernorm"}, {"type": "attention", "num_heads": 2, "causal": true}]},
         {"type": "residual", "body": [{"type": "layernorm"}, {"type": "linear", "out_features": 20}, {"type": "gelu", "approximate": "tanh"}, {"type": "linear", "out_features": 8}]},
         {"type": "layernorm"})",
      // Llama-like: RMSNorm, RoPE and grouped keys, SwiGLU with biases
      R"({"type": "residual", "body": [{"type": "rmsnorm"}, {"type": "attention", "num_heads": 4, "num_kv_heads": 2, "causal": true, "rope": true}]},
         {"type": "residual", "body": [{"type": "rmsnorm"}, {"type": "glu", "hidden": 12, "bias": true}, {"type": "linear"}]},
         {"type": "rmsnorm"})",
      // RMSNorm blocks, then BatchNorm (eval), a residual LayerNorm and two norms in a row: a tail
      // that tail_jacobian composes factor by factor (compose_tail) from every op after the
      // attention, some of them starting with several norms before any Linear
      R"({"type": "residual", "body": [{"type": "rmsnorm"}, {"type": "attention", "num_heads": 2}]},
         {"type": "residual", "body": [{"type": "rmsnorm"}, {"type": "linear", "out_features": 12}, {"type": "silu"}, {"type": "linear", "out_features": 8}]},
         {"type": "batchnorm", "mode": "eval"}, {"type": "residual", "body": [{"type": "layernorm"}]},
         {"type": "layernorm", "elementwise_affine": false}, {"type": "rmsnorm"})",
      // post-norm with ReLU, softmax and BatchNorm (eval) after the attention, and a parallel block in the tail
      R"({"type": "linear"}, {"type": "residual", "body": [{"type": "attention", "num_heads": 2}]}, {"type": "layernorm"},
         {"type": "parallel", "branches": [[{"type": "linear"}, {"type": "relu"}], [{"type": "batchnorm", "mode": "eval"}, {"type": "tanh"}]]},
         {"type": "softmax"}, {"type": "linear", "out_features": 5}, {"type": "silu"})"};
  int planned = 0, tails = 0;
  for (const char* layers : stacks) {
    CAPTURE(layers);
    auto b = build(net(2, 8, 8, layers));
    Model& m = b.model;
    Rng grng(3, "gains");
    for (ModelParam& p : m.params)
      if (p.role == ParamRole::gain)
        for (Eigen::Index i = 0; i < p.value.size(); ++i) p.value(i) = 0.5 + 2.5 * grng.uniform();
    const Mat x = draw_input(b.config, 0);
    Trace trace;
    forward<double>(m, cast_weights<double>(m), x, {}, &trace);
    const Eigen::Index N = x.rows();
    const int end = static_cast<int>(m.ops.size());
    for (size_t pi = 0; pi < m.params.size(); ++pi) {
      const ModelParam& p = m.params[pi];
      if (!is_bias_like(p.role)) continue;
      CAPTURE(p.name);
      const RowPlan plan = plan_rows(m, static_cast<int>(pi), end, 0.0);
      if (plan.at < 0) continue;
      ++planned;
      const int size = static_cast<int>(p.value.size()), n = 3;
      Rng rng(11, p.name);
      Mat dirs(n, size);
      for (Eigen::Index i = 0; i < dirs.size(); ++i) dirs(i) = rng.normal();
      const Seed seed{static_cast<int>(pi), dirs, true};
      const Mat full = jvp(m, trace, seed, n, end);
      std::vector<Eigen::Index> rows;
      for (int s = 0; s < m.batch; ++s)
        for (int t = m.tokens - plan.per_sample; t < m.tokens; ++t) rows.push_back(Eigen::Index(s) * m.tokens + t);
      const TokenRows sub = take_rows(trace, plan.at, end, rows);
      const Mat part = jvp(m, trace, seed, n, end, nullptr, &sub);
      const Eigen::Index k = static_cast<Eigen::Index>(rows.size());
      REQUIRE(part.rows() == n * k);
      double err = 0;
      for (int a = 0; a < n; ++a)
        for (Eigen::Index j = 0; j < k; ++j)
          err = std::max(err, (part.row(a * k + j) - full.row(a * N + rows[static_cast<size_t>(j)])).cwiseAbs().maxCoeff());
      CHECK_LE_TOL(err, 1e-12 * std::max(1.0, full.cwiseAbs().maxCoeff()), "max |jvp on token rows - those rows of jvp|");
      // A shared tail (tail_jacobian) from any op after the seed's and from the rows' op on: the
      // same rows, in the same form (compact where every row is the same). Where an open block's
      // skip carries a tangent past that op, jvp() must run the ops instead; the matrices are
      // made in chunks of one direction on odd ops. A tail counts as taken when doubling its
      // matrices changes the result.
      bool part_bc = false;
      const Mat part_form = jvp(m, trace, seed, n, end, &part_bc, &sub);
      for (int q = std::max(plan.at, p.op + 1); q < end; ++q) {
        CAPTURE(q);
        const std::vector<Mat> A = tail_jacobian(m, trace, take_rows(trace, q, end, rows), q, end, q % 2 ? 1 : 1 << 20);
        TokenRows with = sub;
        with.tail_at = q;
        with.tail = &A;
        const Mat via = jvp(m, trace, seed, n, end, nullptr, &with);
        REQUIRE(via.rows() == n * k);
        CHECK_LE_TOL(test::max_abs_diff(via, part), 1e-12 * std::max(1.0, full.cwiseAbs().maxCoeff()),
                     "max |jvp through a shared tail - jvp op by op|, on the rows");
        bool via_bc = false;
        const Mat via_form = jvp(m, trace, seed, n, end, &via_bc, &with);
        CHECK(via_bc == part_bc);
        CHECK(via_form.rows() == part_form.rows());
        std::vector<Mat> A2 = A;
        for (Mat& a : A2) a *= 2.0;
        with.tail = &A2;
        tails += test::max_abs_diff(jvp(m, trace, seed, n, end, nullptr, &with), part) > 1e-9 * std::max(1.0, full.cwiseAbs().maxCoeff());
      }
      // The bound, from where the seed has entered (after its op when the rows start there).
      const int from = plan.at == p.op ? p.op + 1 : plan.at;
      const Mat mid = jvp(m, trace, seed, n, from);
      const Vec L = tail_bounds(m, trace, from, end);
      double worst = 0;  // the largest |output tangent| / (L |tangent at from|) over tokens and directions
      for (int a = 0; a < n; ++a)
        for (Eigen::Index r = 0; r < N; ++r) {
          const double in = mid.row(a * N + r).norm(), out = full.row(a * N + r).norm();
          if (out > 0) worst = std::max(worst, out / (L(r) * in));
        }
      CHECK_LE_TOL(worst, 1.0, "max |tangent at the output| / (bound x |tangent at the rows' op|)");
    }
  }
  CHECK(planned >= 8);
  CHECK(tails >= 20);
}
