// Exact folds: every rule of fold_rules() on a minimal config where it applies.
//
// A fold is checked four ways: find_folds() proposes it; the folded model's output equals the
// original's within the measured noise floor (Evaluator::compare on compile()d models); the
// config it produces prints and parses back to itself; and it removes the expected number of
// parameters (also as reported by analyze()).
#include <set>
#include <string>
#include <vector>

#include "folds/folds.hpp"
#include "analysis/measure.hpp"
#include "model/presets.hpp"
#include "support.hpp"

using namespace biaslab;
using biaslab::test::config_from;
using biaslab::test::json;

namespace {

std::string net(const std::string& layers, const std::string& dtype = "float64", int batch = 2,
                int tokens = 4, int features = 8) {
  return R"({"version": 1, "seed": 9, "dtype": ")" + dtype + R"(", "shape": {"batch": )" +
         std::to_string(batch) + R"(, "tokens": )" + std::to_string(tokens) +
         R"(, "features": )" + std::to_string(features) + R"(}, "layers": [)" + layers + "]}";
}

std::string site_text(const FoldSite& s) {
  std::string t = site_prefix(s) + std::to_string(s.index);
  return t;
}

Network network_of(const ExperimentConfig& c) {
  Network n = build_network(c);
  sync_network(n);
  return n;
}

// Applies `rule` at the site `where` (dotted name of its first layer) and checks it; returns the
// folded network for rule-specific checks.
Network check_fold(const std::string& text, const std::string& rule, const std::string& where,
                   long expected_removed) {
  const ExperimentConfig config = config_from(text);
  const Network original = network_of(config);

  // find_folds proposes it.
  const std::vector<FoldCandidate> cands = find_folds(original);
  std::string proposed;
  const FoldCandidate* cand = nullptr;
  for (const auto& c : cands) {
    proposed += std::string(c.rule->id) + "@" + site_text(c.site) + " ";
    if (c.rule->id == rule && site_text(c.site) == where) cand = &c;
  }
  INFO("proposed: " << proposed);
  REQUIRE(cand != nullptr);

  FoldApplied applied;
  const Network folded = apply_fold(original, *cand, applied);
  CHECK(applied.rule == rule);
  CHECK(!applied.layers.empty());

  // Same output within the measured floor. The floor must be a rounding-sized number, or the
  // comparison would prove nothing.
  const Model m0 = compile(original), m1 = compile(folded);
  const Mat x = draw_input(config, 0);
  Evaluator ev(m0, x);
  const Delta d = Evaluator::compare(ev.base(), Evaluator::run_model(Model(m1), x));
  const double out_scale = ev.base().y.cwiseAbs().maxCoeff();
  INFO("max |output| " << out_scale);
  CHECK(d.finite);
  CHECK_LE_TOL(d.max_abs, d.floor, "max |folded - original output| vs measured floor");
  const double floor_bound = (config.dtype == DType::float64 ? 1e-10 : 1e-3) * std::max(1.0, out_scale);
  CHECK_LE_TOL(d.floor, floor_bound, "the measured floor itself");

  // The fold really changed the model (so the equality above is not vacuous).
  bool changed = m0.params.size() != m1.params.size();
  for (size_t i = 0; !changed && i < m0.params.size(); ++i)
    changed = m0.params[i].name != m1.params[i].name || m0.params[i].value.rows() != m1.params[i].value.rows() ||
              m0.params[i].value.cols() != m1.params[i].value.cols() || m0.params[i].value != m1.params[i].value;
  CHECK(changed);

  // Its config prints and parses back to the same config, and describes the same parameters.
  const std::string printed = config_to_json(folded.config).dump();
  INFO("folded config: " << printed);
  const ExperimentConfig reparsed = config_from(printed);
  CHECK(reparsed == folded.config);
  const Model rebuilt = compile(network_of(reparsed));
  REQUIRE(rebuilt.params.size() == m1.params.size());
  for (size_t i = 0; i < m1.params.size(); ++i) {
    CAPTURE(m1.params[i].name);
    CHECK(rebuilt.params[i].name == m1.params[i].name);
    CHECK(rebuilt.params[i].value.rows() == m1.params[i].value.rows());
    CHECK(rebuilt.params[i].value.cols() == m1.params[i].value.cols());
  }

  // Parameters removed, directly and in the report.
  const long removed = count_parameters(original) - count_parameters(folded);
  CHECK(removed == expected_removed);
  AnalyzeOptions opt;
  opt.sweep = opt.invariances = false;
  const json report = analyze(config, opt);
  REQUIRE(report.value("ok", false));
  bool reported = false;
  for (const json& f : report.at("folds")) {
    if (f.at("rule") != rule || f.at("where").at(0) != where) continue;
    reported = true;
    INFO("report row: " << f.dump());
    CHECK(f.at("exact") == true);
    CHECK(f.at("params_removed") == expected_removed);
    CHECK_LE_TOL(f.at("max_abs_delta").get<double>(), f.at("noise_floor").get<double>(), "reported fold delta vs floor");
  }
  INFO("report folds: " << report.at("folds").dump());
  CHECK(reported);
  return folded;
}

const LayerNode& layer(const Network& n, int i) { return n.layers.at(static_cast<size_t>(i)); }

// The rules that match somewhere in a config.
std::multiset<std::string> rules_at(const std::string& text) {
  std::multiset<std::string> ids;
  for (const auto& f : find_folds(network_of(config_from(text)))) ids.insert(f.rule->id);
  return ids;
}

}  // namespace

TEST_CASE("folds: every rule of fold_rules() is exercised by this file") {
  // Keeps this file honest when a rule is added: the list below names the rules tested here.
  const std::set<std::string> tested = {
      "fold_layernorm_affine", "fold_rmsnorm_gain",    "fuse_linear_batchnorm_eval",
      "fuse_batchnorm_eval_linear", "drop_key_bias",   "drop_unrotated_key_bias", "fold_value_bias",
      "drop_bias_before_norm", "centre_bias_before_norm", "centre_writers", "merge_branch_biases",
      "merge_linear_linear", "layernorm_to_rmsnorm", "fuse_conv_batchnorm_eval", "fuse_batchnorm_eval_conv"};
  std::set<std::string> ids;
  for (const FoldRule& r : fold_rules()) {
    INFO("r.id := " << std::string(r.id));
    ids.insert(r.id);
    CHECK(tested.count(r.id) == 1);
    CHECK(std::string(r.title).size() > 0);
    CHECK(std::string(r.formula).size() > 0);
  }
  CHECK(ids.size() == fold_rules().size());  // ids are unique
}

TEST_CASE("folds: fold_layernorm_affine moves gamma and beta into the next projection") {
  // F = 8: gain 8 + shift 8 = 16 parameters, unless the fold has to create a bias.
  SUBCASE("into a Linear with bias") {
    const Network f = check_fold(net(R"({"type": "layernorm"}, {"type": "linear", "out_features": 6})"),
                                 "fold_layernorm_affine", "layers.0", 16);
    CHECK(layer(f, 0).params.empty());
    CHECK(!layer(f, 0).cfg.elementwise_affine);
  }
  SUBCASE("into a Linear without bias: the fold creates its 6 entries") {
    const Network f = check_fold(net(R"({"type": "layernorm"}, {"type": "linear", "out_features": 6, "bias": false})"),
                                 "fold_layernorm_affine", "layers.0", 16 - 6);
    CHECK(layer(f, 1).cfg.bias);
  }
  SUBCASE("gain only (LayerNorm without bias) into a Linear without bias: none created") {
    check_fold(net(R"({"type": "layernorm", "bias": false}, {"type": "linear", "bias": false})"),
               "fold_layernorm_affine", "layers.0", 8);
  }
  SUBCASE("into the q/k/v projections of attention, inside a residual block") {
    check_fold(net(R"({"type": "residual", "body": [{"type": "layernorm"}, {"type": "attention", "num_heads": 2}]})"),
               "fold_layernorm_affine", "layers.0.body.0", 16);
  }
  SUBCASE("into attention without q/k/v biases: creating 3 x 8 costs more than the 16 it saves") {
    check_fold(net(R"({"type": "layernorm"}, {"type": "attention", "num_heads": 2, "q_bias": false, "k_bias": false, "v_bias": false})"),
               "fold_layernorm_affine", "layers.0", 16 - 24);
  }
  SUBCASE("float32, 1 token, batch 1") {
    check_fold(net(R"({"type": "layernorm"}, {"type": "linear"})", "float32", 1, 1, 8), "fold_layernorm_affine", "layers.0", 16);
  }
}

TEST_CASE("folds: fold_rmsnorm_gain moves gamma into the next projection") {
  SUBCASE("into a Linear") {
    check_fold(net(R"({"type": "rmsnorm"}, {"type": "linear"})"), "fold_rmsnorm_gain", "layers.0", 8);
  }
  SUBCASE("into attention") {
    check_fold(net(R"({"type": "rmsnorm"}, {"type": "attention", "num_heads": 2, "causal": true})"),
               "fold_rmsnorm_gain", "layers.0", 8);
  }
}

TEST_CASE("folds: fuse_linear_batchnorm_eval turns Linear then BatchNorm (eval) into one Linear") {
  SUBCASE("with a Linear bias: the BatchNorm's 2 x 8 go") {
    const Network f = check_fold(net(R"({"type": "linear"}, {"type": "batchnorm", "mode": "eval"})"),
                                 "fuse_linear_batchnorm_eval", "layers.0", 16);
    CHECK(f.layers.size() == 1);
  }
  SUBCASE("without a Linear bias: the fused bias costs 8") {
    check_fold(net(R"({"type": "linear", "bias": false}, {"type": "batchnorm", "mode": "eval"})"),
               "fuse_linear_batchnorm_eval", "layers.0", 8);
  }
  SUBCASE("BatchNorm without affine: only buffers go, 0 trainable parameters") {
    check_fold(net(R"({"type": "linear", "out_features": 5}, {"type": "batchnorm", "mode": "eval", "affine": false})"),
               "fuse_linear_batchnorm_eval", "layers.0", 0);
  }
}

TEST_CASE("folds: fuse_batchnorm_eval_linear turns BatchNorm (eval) then Linear into one Linear") {
  SUBCASE("8 -> 6") {
    const Network f = check_fold(net(R"({"type": "batchnorm", "mode": "eval"}, {"type": "linear", "out_features": 6})"),
                                 "fuse_batchnorm_eval_linear", "layers.0", 16);
    REQUIRE(f.layers.size() == 1);
    CHECK(layer(f, 0).cfg.type == LayerType::linear);
  }
  SUBCASE("into a Linear without bias") {
    check_fold(net(R"({"type": "batchnorm", "mode": "eval"}, {"type": "linear", "bias": false})"),
               "fuse_batchnorm_eval_linear", "layers.0", 8);
  }
}

namespace {
// A config on an H x W grid with 8 channels.
std::string grid_net(const std::string& layers, int H = 3, int W = 4) {
  return R"({"version": 1, "seed": 9, "shape": {"batch": 2, "features": 8, "grid": [)" + std::to_string(H) + ", " +
         std::to_string(W) + R"(]}, "layers": [)" + layers + "]}";
}
}  // namespace

TEST_CASE("folds: fuse_conv_batchnorm_eval turns a convolution then BatchNorm (eval) into one convolution") {
  SUBCASE("conv2d 3 x 3 with bias: gamma and beta go (16)") {
    const Network f = check_fold(grid_net(R"({"type": "conv2d"}, {"type": "batchnorm", "mode": "eval"})"),
                                 "fuse_conv_batchnorm_eval", "layers.0", 16);
    REQUIRE(f.layers.size() == 1);
    CHECK(layer(f, 0).cfg.type == LayerType::conv2d);
    CHECK(layer(f, 0).find("weight")->dims.list() == std::vector<std::int64_t>{8, 8, 3, 3});
  }
  SUBCASE("grouped, causal conv1d without bias: the fused bias costs 6") {
    check_fold(grid_net(R"({"type": "conv1d", "kernel_size": 4, "padding": "causal", "groups": 2, "out_channels": 6, "bias": false},
                           {"type": "batchnorm", "mode": "eval"})"),
               "fuse_conv_batchnorm_eval", "layers.0", 6);
  }
}

TEST_CASE("folds: fuse_batchnorm_eval_conv is exact for a 1 x 1 kernel and off at the borders otherwise") {
  SUBCASE("1 x 1, grouped: exact") {
    check_fold(grid_net(R"({"type": "batchnorm", "mode": "eval"}, {"type": "conv2d", "kernel_size": 1, "groups": 4})"),
               "fuse_batchnorm_eval_conv", "layers.0", 16);
  }
  SUBCASE("3 x 3 after a BatchNorm without a shift (beta = s mu): nothing for the padding to miss") {
    const ExperimentConfig config = config_from(grid_net(R"({"type": "batchnorm", "mode": "eval", "affine": false}, {"type": "conv2d"})"));
    Network original = network_of(config);
    original.layers[0].find("running_mean")->value.setZero();
    const auto cands = find_folds(original);
    REQUIRE(cands.size() == 1);
    FoldApplied applied;
    const Network folded = apply_fold(original, cands[0], applied);
    CHECK(applied.inexact.empty());
    const Mat x = draw_input(config, 0);
    const Model m0 = compile(original), m1 = compile(folded);
    CHECK_MAX_ABS_LE(forward<double>(m1, cast_weights<double>(m1), x), forward<double>(m0, cast_weights<double>(m0), x), 1e-12);
  }
  SUBCASE("3 x 3, zero padding: reported as not exact, exact inside the grid") {
    const std::string text = grid_net(R"({"type": "batchnorm", "mode": "eval"}, {"type": "conv2d", "groups": 2, "out_channels": 4})", 4, 5);
    const ExperimentConfig config = config_from(text);
    const Network original = network_of(config);
    const FoldCandidate* cand = nullptr;
    const auto cands = find_folds(original);
    for (const auto& c : cands)
      if (std::string(c.rule->id) == "fuse_batchnorm_eval_conv") cand = &c;
    REQUIRE(cand != nullptr);
    FoldApplied applied;
    const Network folded = apply_fold(original, *cand, applied);
    CHECK(applied.inexact.find("zero padding") != std::string::npos);
    const Mat x = draw_input(config, 0);
    const Mat y0 = forward<double>(compile(original), cast_weights<double>(compile(original)), x);
    const Mat y1 = forward<double>(compile(folded), cast_weights<double>(compile(folded)), x);
    // Positions (h, w) with 1 <= h <= 2, 1 <= w <= 3 see every tap of the 3 x 3 kernel.
    double inside = 0, border = 0;
    for (int s = 0; s < 2; ++s)
      for (int h = 0; h < 4; ++h)
        for (int w = 0; w < 5; ++w) {
          const double d = (y0.row(s * 20 + h * 5 + w) - y1.row(s * 20 + h * 5 + w)).cwiseAbs().maxCoeff();
          (h >= 1 && h <= 2 && w >= 1 && w <= 3 ? inside : border) = std::max(h >= 1 && h <= 2 && w >= 1 && w <= 3 ? inside : border, d);
        }
    CHECK_LE_TOL(inside, 1e-12, "max |folded - original| inside the grid");
    CHECK_GT_TOL(border, 1e-3, "max |folded - original| at the borders");
    // The report measures it, says why, and the smallest model leaves it out.
    const json r = biaslab::test::report_of(text);
    bool seen = false;
    for (const json& f : r.at("folds")) {
      if (f.at("rule") != "fuse_batchnorm_eval_conv") continue;
      seen = true;
      INFO(f.dump());
      CHECK(f.at("exact") == false);
      CHECK(f.at("inexact_because").get<std::string>().find("border tokens") != std::string::npos);
      CHECK_GT_TOL(f.at("max_abs_delta").get<double>(), f.at("noise_floor").get<double>(), "reported delta vs floor");
    }
    CHECK(seen);
    CHECK(r.at("minimal_model").at("exact") == true);
    CHECK(r.at("minimal_model").at("folds_applied").empty());
  }
}

TEST_CASE("folds: drop_key_bias removes the key bias when there is no RoPE") {
  SUBCASE("plain") { check_fold(net(R"({"type": "attention", "num_heads": 2})"), "drop_key_bias", "layers.0", 8); }
  SUBCASE("causal") {
    check_fold(net(R"({"type": "attention", "num_heads": 4, "causal": true})"), "drop_key_bias", "layers.0", 8);
  }
  SUBCASE("float32, 1 head, 1 feature") {
    check_fold(net(R"({"type": "attention", "num_heads": 1})", "float32", 2, 3, 1), "drop_key_bias", "layers.0", 1);
  }
  SUBCASE("inside a residual body") {
    check_fold(net(R"({"type": "linear"}, {"type": "residual", "body": [{"type": "attention", "num_heads": 2}]})"),
               "drop_key_bias", "layers.1.body.0", 8);
  }
}

TEST_CASE("folds: drop_unrotated_key_bias zeroes the key bias where partial RoPE does not rotate") {
  SUBCASE("2 heads of 4, 2 rotate") {
    const Network folded = check_fold(net(R"({"type": "attention", "num_heads": 2, "rope": true, "rotary_dim": 2})"),
                                      "drop_unrotated_key_bias", "layers.0", 0);
    const Mat& b = layer(folded, 0).find("k_proj.bias")->value;
    for (int h = 0; h < 2; ++h) {
      CHECK(b.block(h * 4, 0, 2, 1).cwiseAbs().minCoeff() > 0);  // the rotated part stays
      CHECK(b.block(h * 4 + 2, 0, 2, 1).isZero(0));              // the rest is zeroed
    }
  }
  SUBCASE("grouped-query, interleaved, causal") {
    check_fold(net(R"({"type": "attention", "num_heads": 4, "num_kv_heads": 2, "rope": true, "rotary_dim": 2,
                       "rope_style": "interleaved", "causal": true})",
                   "float64", 2, 4, 16),
               "drop_unrotated_key_bias", "layers.0", 0);
  }
  SUBCASE("not with full RoPE, sinks or QK-norm") {
    CHECK(rules_at(net(R"({"type": "attention", "num_heads": 2, "rope": true})")).count("drop_unrotated_key_bias") == 0);
    CHECK(rules_at(net(R"({"type": "attention", "num_heads": 2, "rope": true, "rotary_dim": 2, "sinks": true})"))
              .count("drop_unrotated_key_bias") == 0);
    CHECK(rules_at(net(R"({"type": "attention", "num_heads": 2, "rope": true, "rotary_dim": 2, "qk_norm": "layernorm"})"))
              .count("drop_unrotated_key_bias") == 0);
  }
}

TEST_CASE("folds: fold_value_bias moves W_O b_V into the output bias") {
  SUBCASE("with an output bias") {
    check_fold(net(R"({"type": "attention", "num_heads": 2})"), "fold_value_bias", "layers.0", 8);
  }
  SUBCASE("without an output bias: one is created, nothing is saved") {
    const Network f = check_fold(net(R"({"type": "attention", "num_heads": 2, "o_bias": false, "causal": true, "rope": true})"),
                                 "fold_value_bias", "layers.0", 0);
    CHECK(layer(f, 0).cfg.o_bias);
    CHECK(!layer(f, 0).cfg.v_bias);
  }
}

TEST_CASE("folds: drop_bias_before_norm drops a bias that BatchNorm (train) or InstanceNorm subtracts") {
  SUBCASE("Linear bias before BatchNorm train") {
    check_fold(net(R"({"type": "linear"}, {"type": "batchnorm"})"), "drop_bias_before_norm", "layers.0", 8);
  }
  SUBCASE("Linear bias before InstanceNorm") {
    check_fold(net(R"({"type": "linear"}, {"type": "instancenorm"})"), "drop_bias_before_norm", "layers.0", 8);
  }
  SUBCASE("LayerNorm shift before BatchNorm train") {
    check_fold(net(R"({"type": "layernorm"}, {"type": "batchnorm"})"), "drop_bias_before_norm", "layers.0", 8);
  }
  SUBCASE("attention output bias through a residual add") {
    check_fold(net(R"({"type": "residual", "body": [{"type": "attention", "num_heads": 2}]}, {"type": "batchnorm"})"),
               "drop_bias_before_norm", "layers.0", 8);
  }
  SUBCASE("a BatchNorm shift is tied to its gain by `affine`: zeroed, 0 parameters removed") {
    const Network f = check_fold(net(R"({"type": "batchnorm", "mode": "eval"}, {"type": "instancenorm"})"),
                                 "drop_bias_before_norm", "layers.0", 0);
    const Param* shift = layer(f, 0).find("bias");
    REQUIRE(shift != nullptr);
    CHECK_LE_TOL(shift->value.cwiseAbs().maxCoeff(), 0.0, "max |BatchNorm shift| after the fold");
  }
}

TEST_CASE("folds: centre_writers centres every layer writing into a stream only LayerNorms read") {
  // GPT-2's shape: an embedding-like Linear, two pre-norm blocks, the final LayerNorm.
  const std::string gpt2 = R"({"type": "linear"},
      {"type": "residual", "body": [{"type": "layernorm"}, {"type": "attention", "num_heads": 2}]},
      {"type": "residual", "body": [{"type": "layernorm"}, {"type": "linear", "out_features": 16}, {"type": "gelu"},
                                    {"type": "linear", "out_features": 8}]},
      {"type": "layernorm"}, {"type": "linear", "out_features": 3})";
  SUBCASE("the embedding, o_proj and the second FFN Linear") {
    const Network f = check_fold(net(gpt2), "centre_writers", "layers.0", 0);
    auto column_means = [](const Mat& W) { return W.colwise().mean().cwiseAbs().maxCoeff(); };
    CHECK(column_means(layer(f, 0).find("weight")->value) < 1e-15);
    CHECK(column_means(layer(f, 1).body.at(1).find("o_proj.weight")->value) < 1e-15);
    CHECK(std::abs(layer(f, 1).body.at(1).find("o_proj.bias")->value.mean()) < 1e-15);
    CHECK(column_means(layer(f, 2).body.at(3).find("weight")->value) < 1e-15);
    CHECK(column_means(layer(f, 2).body.at(1).find("weight")->value) > 1e-3);  // it writes inside the block
    CHECK(column_means(layer(f, 4).find("weight")->value) > 1e-3);            // it reads the final norm
  }
  SUBCASE("a glu writes through down_proj, in float32") {
    check_fold(net(R"({"type": "residual", "body": [{"type": "layernorm"}, {"type": "glu", "hidden": 8, "bias": true}]},
                      {"type": "layernorm"})", "float32"),
               "centre_writers", "layers.0", 0);
  }
  SUBCASE("not when something else reads the stream") {
    // RMSNorm does not ignore a shift; a body without a norm first reads the raw stream; without
    // a norm after the run the output itself is the stream.
    CHECK(rules_at(net(R"({"type": "residual", "body": [{"type": "rmsnorm"}, {"type": "linear"}]}, {"type": "layernorm"})"))
              .count("centre_writers") == 0);
    CHECK(rules_at(net(R"({"type": "residual", "body": [{"type": "layernorm"}, {"type": "linear"}]},
                          {"type": "residual", "body": [{"type": "linear"}]}, {"type": "layernorm"})"))
              .count("centre_writers") == 0);
    CHECK(rules_at(net(R"({"type": "residual", "body": [{"type": "layernorm"}, {"type": "linear"}]})")).count("centre_writers") == 0);
  }
}

TEST_CASE("folds: centre_bias_before_norm projects out what the next norm cancels") {
  auto max_group_mean = [](const Network& f, int groups) {
    const Mat& b = layer(f, 0).find("bias")->value;
    const int per = static_cast<int>(b.rows()) / groups;
    double worst = 0;
    for (int g = 0; g < groups; ++g) worst = std::max(worst, std::abs(b.middleRows(g * per, per).mean()));
    return worst;
  };
  SUBCASE("before LayerNorm: the mean") {
    const Network f = check_fold(net(R"({"type": "linear"}, {"type": "layernorm"})"), "centre_bias_before_norm", "layers.0", 0);
    CHECK_LE_TOL(max_group_mean(f, 1), 1e-15, "|mean of the centred bias|");
  }
  SUBCASE("before softmax: the mean") {
    const Network f = check_fold(net(R"({"type": "linear"}, {"type": "softmax"})"), "centre_bias_before_norm", "layers.0", 0);
    CHECK_LE_TOL(max_group_mean(f, 1), 1e-15, "|mean of the centred bias|");
  }
  SUBCASE("before GroupNorm with 2 groups: each group's mean") {
    const Network f = check_fold(net(R"({"type": "linear"}, {"type": "groupnorm", "num_groups": 2})"),
                                 "centre_bias_before_norm", "layers.0", 0);
    CHECK_LE_TOL(max_group_mean(f, 2), 1e-15, "max |group mean of the centred bias|");
  }
}

TEST_CASE("folds: merge_branch_biases keeps one bias for the branches of a parallel block") {
  SUBCASE("a Linear, an attention's o_proj and a residual's Linear: two of three biases go") {
    const Network f = check_fold(net(R"({"type": "parallel", "branches": [[{"type": "linear"}],
        [{"type": "attention", "num_heads": 2}], [{"type": "relu"}], [{"type": "residual", "body": [{"type": "linear"}]}]]},
        {"type": "gelu"})"), "merge_branch_biases", "layers.0", 2 * 8);
    const Network original = network_of(config_from(net(R"({"type": "parallel", "branches": [[{"type": "linear"}],
        [{"type": "attention", "num_heads": 2}], [{"type": "relu"}], [{"type": "residual", "body": [{"type": "linear"}]}]]},
        {"type": "gelu"})")));
    const LayerNode& before = layer(original, 0);
    const Mat sum = before.branches[0][0].find("bias")->value + before.branches[1][0].find("o_proj.bias")->value +
                    before.branches[3][0].body[0].find("bias")->value;
    CHECK_MAX_ABS_LE(layer(f, 0).branches[0][0].find("bias")->value, sum, 1e-15);
    CHECK(layer(f, 0).branches[1][0].find("o_proj.bias") == nullptr);
    CHECK_FALSE(layer(f, 0).branches[1][0].cfg.o_bias);
    CHECK(layer(f, 0).branches[3][0].body[0].find("bias") == nullptr);
  }
  SUBCASE("a norm's shift tied to its gain keeps the sum; two that can only be zeroed, in float32") {
    const Network f = check_fold(net(R"({"type": "parallel", "branches": [[{"type": "linear"}], [{"type": "groupnorm", "num_groups": 2, "affine": true}]]})", "float32"),
                                 "merge_branch_biases", "layers.0", 8);
    CHECK(layer(f, 0).branches[0][0].find("bias") == nullptr);
    const Network g = check_fold(net(R"({"type": "parallel", "branches": [[{"type": "instancenorm", "affine": true}], [{"type": "groupnorm", "num_groups": 2, "affine": true}]]})", "float32"),
                                 "merge_branch_biases", "layers.0", 0);
    CHECK(layer(g, 0).branches[1][0].find("bias")->value.cwiseAbs().maxCoeff() == 0.0);
  }
  SUBCASE("not with fewer than two closing biases") {
    CHECK(rules_at(net(R"({"type": "parallel", "branches": [[{"type": "linear"}], [{"type": "relu"}]]})")).count("merge_branch_biases") == 0);
    CHECK(rules_at(net(R"({"type": "parallel", "branches": [[{"type": "linear"}]]})")).count("merge_branch_biases") == 0);
  }
}

TEST_CASE("folds: merge_linear_linear turns two Linears into one") {
  // F = 8 -> 6 -> 3. Before: 6*8 + 6 + 3*6 + 3 = 75; after: 3*8 + 3 = 27.
  SUBCASE("both with bias") {
    const Network f = check_fold(net(R"({"type": "linear", "out_features": 6}, {"type": "linear", "out_features": 3})"),
                                 "merge_linear_linear", "layers.0", 75 - 27);
    REQUIRE(f.layers.size() == 1);
    CHECK(layer(f, 0).out_width == 3);
  }
  SUBCASE("neither with bias: 66 -> 24") {
    check_fold(net(R"({"type": "linear", "out_features": 6, "bias": false}, {"type": "linear", "out_features": 3, "bias": false})"),
               "merge_linear_linear", "layers.0", 66 - 24);
  }
  SUBCASE("only the first with bias: 72 -> 27") {
    check_fold(net(R"({"type": "linear", "out_features": 6}, {"type": "linear", "out_features": 3, "bias": false})"),
               "merge_linear_linear", "layers.0", 72 - 27);
  }
  SUBCASE("widening pair 8 -> 2 -> 8 gets larger when merged: 18 + 24 = 42 -> 72") {
    check_fold(net(R"({"type": "linear", "out_features": 2}, {"type": "linear", "out_features": 8})"),
               "merge_linear_linear", "layers.0", 42 - 72);
  }
}

TEST_CASE("folds: layernorm_to_rmsnorm swaps a shift-free LayerNorm for RMSNorm after centring its writer") {
  SUBCASE("after a Linear") {
    const Network f = check_fold(net(R"({"type": "linear"}, {"type": "layernorm", "bias": false})"),
                                 "layernorm_to_rmsnorm", "layers.0", 0);
    CHECK(layer(f, 1).cfg.type == LayerType::rmsnorm);
    CHECK(layer(f, 1).cfg.eps == 1e-5);  // the LayerNorm's eps is kept, not RMSNorm's default
  }
  SUBCASE("after attention, LayerNorm without affine") {
    check_fold(net(R"({"type": "attention", "num_heads": 2}, {"type": "layernorm", "elementwise_affine": false})"),
               "layernorm_to_rmsnorm", "layers.0", 0);
  }
}

TEST_CASE("folds: rules do not match where the identity they rely on fails") {
  SUBCASE("no drop_key_bias with RoPE") {
    CHECK(rules_at(net(R"({"type": "attention", "num_heads": 2, "rope": true})")).count("drop_key_bias") == 0);
  }
  SUBCASE("no LayerNorm affine fold without affine parameters, nor into a norm") {
    const auto ids = rules_at(net(R"({"type": "layernorm", "elementwise_affine": false}, {"type": "linear"}, {"type": "layernorm"}, {"type": "rmsnorm"})"));
    CHECK(ids.count("fold_layernorm_affine") == 0);
  }
  SUBCASE("no BatchNorm fuse in train mode; no drop before BatchNorm eval or RMSNorm") {
    const auto ids = rules_at(net(R"({"type": "linear"}, {"type": "batchnorm"}, {"type": "linear"}, {"type": "batchnorm", "mode": "eval"}, {"type": "relu"}, {"type": "linear"}, {"type": "rmsnorm"})"));
    CHECK(ids.count("fuse_linear_batchnorm_eval") == 1);  // only layers.2 -> 3
    CHECK(ids.count("drop_bias_before_norm") == 1);       // only layers.0 -> 1
    CHECK(ids.count("centre_bias_before_norm") == 0);
  }
  SUBCASE("no LayerNorm -> RMSNorm when the LayerNorm has a shift") {
    CHECK(rules_at(net(R"({"type": "linear"}, {"type": "layernorm"})")).count("layernorm_to_rmsnorm") == 0);
  }
  SUBCASE("no Linear merge across a nonlinearity") {
    CHECK(rules_at(net(R"({"type": "linear"}, {"type": "gelu"}, {"type": "linear"})")).count("merge_linear_linear") == 0);
  }
}

TEST_CASE("folds: the minimal model of the default preset is exact, smaller, and cannot shrink further") {
  const Preset* p = find_preset("default");
  REQUIRE(p != nullptr);
  AnalyzeOptions opt;
  opt.sweep = opt.invariances = false;
  const json report = analyze(config_from(p->config), opt);
  REQUIRE(report.value("ok", false));
  const json& mm = report.at("minimal_model");
  INFO("minimal_model: " << mm.dump());
  CHECK(mm.at("exact") == true);
  CHECK_LE_TOL(mm.at("max_abs_delta").get<double>(), mm.at("noise_floor").get<double>(), "minimal model delta vs floor");
  const long before = mm.at("params_before"), after = mm.at("params_after");
  // LayerNorm gain + shift (2 x 64), the key bias (64) and the value bias (64, into b_O).
  CHECK(before - after == 256);
  CHECK(after < before);
  // Its config parses, builds to `after` parameters, and no fold of the minimal set shrinks it.
  const ExperimentConfig minimal = config_from(mm.at("config").dump());
  const Network n = network_of(minimal);
  CHECK(count_parameters(n) == after);
  for (const auto& c : find_folds(n)) {
    if (!c.rule->in_minimal) continue;
    FoldApplied a;
    INFO("c.rule->id := " << std::string(c.rule->id));
    CHECK(count_parameters(apply_fold(n, c, a)) >= after);
  }
}

TEST_CASE("folds: merge_branch_biases removes parameters whatever the branches' order") {
  // A glu's bias covers its three projections and a norm's shift is tied to its gain: those can
  // only be zeroed, so they keep the sum and the removable Linear bias goes, in either order.
  for (const char* branches : {R"([[{"type": "glu", "hidden": 4, "bias": true}], [{"type": "linear"}]])",
                               R"([[{"type": "linear"}], [{"type": "glu", "hidden": 4, "bias": true}]])",
                               R"([[{"type": "linear"}], [{"type": "batchnorm", "mode": "eval"}]])"}) {
    CAPTURE(branches);
    check_fold(net(std::string(R"({"type": "parallel", "branches": )") + branches + "}"), "merge_branch_biases",
               "layers.0", 8);
  }
}
