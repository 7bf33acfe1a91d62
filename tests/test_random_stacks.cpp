// Random stacks: every layer type and option, at small and degenerate sizes (1 token, 1 feature,
// batch 1), must analyse without an error, give finite numbers, exact folds and an exact
// minimal model; every invariance probe agrees with the theory. BIASLAB_RANDOM_STACKS=N runs
// N stacks instead of 200. A generated config that the parser rejects is not analysed (the parser's own
// tests cover rejections), but at least most of them must be accepted.
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "analysis/structure.hpp"
#include "support.hpp"

using namespace biaslab;
using json = biaslab::Json;

namespace {

// Draws one layer that keeps width `w` valid; may change w (linear).
json random_layer(std::mt19937& g, int& w, int depth) {
  auto pick = [&](int n) { return static_cast<int>(g() % n); };
  auto coin = [&]() { return pick(2) == 1; };
  // Divisors of w, for heads and groups.
  std::vector<int> divs;
  for (int d = 1; d <= w; ++d)
    if (w % d == 0) divs.push_back(d);
  const int kind = pick(depth < 2 ? 13 : 12);
  switch (kind) {
    case 0: {
      json l = {{"type", "linear"}, {"bias", coin()}};
      if (coin()) {
        w = 1 + pick(8);
        l["out_features"] = w;
      }
      return l;
    }
    case 1: return {{"type", "layernorm"}, {"elementwise_affine", coin()}, {"bias", coin()}};
    case 2: return {{"type", "rmsnorm"}, {"elementwise_affine", coin()}};
    case 3: return {{"type", "batchnorm"}, {"mode", coin() ? "train" : "eval"}, {"affine", coin()}};
    case 4: return {{"type", "groupnorm"}, {"num_groups", divs[pick(static_cast<int>(divs.size()))]}, {"affine", coin()}};
    case 5: return {{"type", "instancenorm"}, {"affine", coin()}};
    case 6:
    case 7: {
      std::vector<int> heads;
      for (int h : divs)
        if ((w / h) % 2 == 0 || true) heads.push_back(h);
      const int h = heads[pick(static_cast<int>(heads.size()))];
      const bool rope = (w / h) % 2 == 0 && coin();
      return {{"type", "attention"}, {"num_heads", h}, {"q_bias", coin()}, {"k_bias", coin()},
              {"v_bias", coin()}, {"o_bias", coin()}, {"causal", coin()}, {"rope", rope}};
    }
    case 8: return {{"type", "relu"}};
    case 9: return {{"type", "gelu"}, {"approximate", coin() ? "tanh" : "none"}};
    case 10: return {{"type", "softmax"}};
    case 11: return {{"type", "pos_embedding"}};
    default: {
      // A residual body must end at the width it started with.
      int inner = w;
      json body = json::array();
      const int n = 1 + pick(3);
      for (int i = 0; i < n; ++i) body.push_back(random_layer(g, inner, depth + 1));
      if (inner != w) body.push_back({{"type", "linear"}, {"out_features", w}});
      return {{"type", "residual"}, {"body", body}};
    }
  }
}

// Analyses one generated config and checks its report: finite numbers, bias rows within their
// bounds, every fold exact unless it says why not, an exact minimal model, every law holding.
void check_generated(const ExperimentConfig& config) {
  AnalyzeOptions opt;
  const json r = analyze(config, opt);
  INFO("report: " << r.dump().substr(0, 2000));
  REQUIRE(r.at("ok") == true);
  for (const json& b : r.at("biases")) {
    INFO(b.dump());
    CHECK(b.at("max_abs_delta").is_number());
    CHECK(b.at("noise_floor").is_number());
    // These stacks are small: every structure is settled within its budget. Only a ReLU on
    // the way leaves bounds: units that no input activated (dead or rare: sampling cannot
    // tell), or null directions that a finite move shows to act (a region no input reached).
    CHECK(b.at("redundant_dim_min").get<int>() >= 0);
    CHECK(b.at("redundant_dim_max").get<int>() <= b.at("size").get<int>());
    if (b.at("verdict") == "undetermined") {
      CHECK(b.at("redundant_dim").is_null());
      CHECK(b.at("structure").at("stop_rule") == "no_gain_kinked");
      const bool dead = b.at("structure").at("inactive_units").get<int>() > 0;
      const bool moved = b.at("undetermined_reason").get<std::string>().rfind("a finite move along", 0) == 0;
      CHECK((dead || moved));
      CHECK(b.at("redundant_dim_min").get<int>() < b.at("redundant_dim_max").get<int>());
      continue;
    }
    REQUIRE(b.at("redundant_dim").is_number());
    CHECK(b.at("redundant_dim_min") == b.at("redundant_dim"));
    CHECK(b.at("redundant_dim_max") == b.at("redundant_dim"));
  }
  for (const json& f : r.at("folds")) {
    INFO(f.dump());
    // A rewrite the theory says is off here (BatchNorm before a padded convolution) says why,
    // and the measurement must see it.
    CHECK(f.at("exact") == !f.contains("inexact_because"));
    // A row agrees with every exact fold on its bias: a bias that a fold centres or drops (part
    // of it moves nowhere) has a redundant part, and its probe measures below the floor.
    const std::string rule = f.at("rule");
    if (f.at("exact") != true ||
        (rule != "drop_key_bias" && rule != "drop_unrotated_key_bias" && rule != "drop_bias_before_norm" &&
         rule != "centre_bias_before_norm" && rule != "centre_writers"))
      continue;
    for (const json& mv : f.at("moves"))
      for (const json& b : r.at("biases")) {
        if (b.at("param") != mv.at("from") || b.at("verdict") == "undetermined") continue;
        INFO("fold " << f.at("rule") << " on " << b.dump());
        CHECK(b.at("redundant_dim").get<int>() > 0);
        CHECK(b.at("verdict") != "effective");
        if (b.contains("parts")) {
          const json& part = b.at("parts").at("redundant_part");
          CHECK_LE_TOL(part.at("max_abs_delta").get<double>(), part.at("noise_floor").get<double>(),
                       "redundant part of a bias an exact fold centres or drops");
        }
      }
  }
  const json& mm = r.at("minimal_model");
  INFO(mm.dump().substr(0, 800));
  CHECK(mm.at("exact") == true);
  CHECK(mm.at("params_after").get<long>() <= mm.at("params_before").get<long>());
  // The minimal model's config is itself valid input.
  const auto again = parse_config(mm.at("config"));
  INFO("minimal config: " << (again ? std::string("ok") : again.error().what()));
  CHECK(again.ok());
  for (const json& p : r.at("invariances")) {
    INFO(p.dump());
    CHECK(p.at("max_abs_delta").is_number());
    if (p.at("law") == true) CHECK(p.at("agrees") == true);  // "changes" rows depend on the input
  }
}

// Parses a generated config and checks its analysis (check_generated); false when the parser
// rejects it (the parser's own tests cover rejections).
bool check_generated_text(const json& cfg) {
  const std::string text = cfg.dump();
  CAPTURE(text);
  const auto parsed = parse_config_text(text);
  if (!parsed) {
    INFO("rejected: " << parsed.error().what());
    return false;
  }
  check_generated(*parsed);
  return true;
}

}  // namespace

TEST_CASE("random stacks: every generated stack analyses with finite numbers, exact folds and an exact minimal model") {
  std::mt19937 g(20261120);
  int analysed = 0;
  const int total = std::getenv("BIASLAB_RANDOM_STACKS") ? std::atoi(std::getenv("BIASLAB_RANDOM_STACKS")) : 200;
  for (int iter = 0; iter < total; ++iter) {
    const int batch = 1 + static_cast<int>(g() % 3), tokens = 1 + static_cast<int>(g() % 5);
    int w = 1 + static_cast<int>(g() % 8);
    const json shape = {{"batch", batch}, {"tokens", tokens}, {"features", w}};
    json layers = json::array();
    const int n = 1 + static_cast<int>(g() % 4);
    for (int i = 0; i < n; ++i) layers.push_back(random_layer(g, w, 0));
    const json cfg = {{"version", 1}, {"seed", iter}, {"dtype", g() % 2 ? "float32" : "float64"},
                      {"shape", shape}, {"layers", layers}};
    if (check_generated_text(cfg)) ++analysed;
  }
  MESSAGE("analysed " << analysed << " of " << total << " generated stacks");
  CHECK(analysed >= total / 2);
}

TEST_CASE("random stacks: cross-attention layers (one shared context) among random layers") {
  // Its own generator, so that the stacks above stay as they were: random layers around one or
  // two cross-attention layers (every option but causal and rope, which it refuses), sometimes
  // inside a residual body, all reading one context of 1 to 5 tokens.
  std::mt19937 g(20261126);
  auto pick = [&](int n) { return static_cast<int>(g() % n); };
  int analysed = 0;
  const int total = std::getenv("BIASLAB_RANDOM_STACKS") ? std::atoi(std::getenv("BIASLAB_RANDOM_STACKS")) / 4 : 50;
  for (int iter = 0; iter < total; ++iter) {
    const int batch = 1 + pick(3), tokens = 1 + pick(5), context = 1 + pick(5);
    int w = 1 + pick(8);
    const json shape = {{"batch", batch}, {"tokens", tokens}, {"features", w}};
    json layers = json::array();
    const int n = 1 + pick(4), crosses = 1 + pick(2);
    std::vector<int> at;
    for (int c = 0; c < crosses; ++c) at.push_back(pick(n + 1));
    for (int i = 0; i <= n; ++i) {
      for (int a : at) {
        if (a != i) continue;
        std::vector<int> heads;
        for (int d = 1; d <= w; ++d)
          if (w % d == 0) heads.push_back(d);
        const int h = heads[pick(static_cast<int>(heads.size()))];
        std::vector<int> kv;
        for (int d = 1; d <= h; ++d)
          if (h % d == 0) kv.push_back(d);
        json l = {{"type", "attention"}, {"num_heads", h}, {"num_kv_heads", kv[pick(static_cast<int>(kv.size()))]},
                  {"q_bias", pick(2) == 1}, {"k_bias", pick(2) == 1}, {"v_bias", pick(2) == 1}, {"o_bias", pick(2) == 1},
                  {"sinks", pick(4) == 0}, {"qk_norm", pick(3) == 0 ? "layernorm" : pick(2) ? "rmsnorm" : "none"},
                  {"context_tokens", context}};
        layers.push_back(pick(3) == 0 ? json{{"type", "residual"}, {"body", json::array({{{"type", "layernorm"}}, l})}} : l);
      }
      if (i < n) layers.push_back(random_layer(g, w, 0));
    }
    const json cfg = {{"version", 1}, {"seed", iter}, {"dtype", pick(2) ? "float32" : "float64"},
                      {"shape", shape}, {"layers", layers}};
    if (check_generated_text(cfg)) ++analysed;
  }
  MESSAGE("analysed " << analysed << " of " << total << " generated stacks with cross-attention");
  CHECK(analysed >= total / 2);
}

namespace {

// A layer of a convolutional stack on an H x W grid of width w: convolutions (1-D over the
// tokens, 2-D over the grid) with every option, the norms of an image network, activations and
// residual blocks. May change w.
json random_conv_layer(std::mt19937& g, int& w, int depth) {
  auto pick = [&](int n) { return static_cast<int>(g() % n); };
  auto coin = [&]() { return pick(2) == 1; };
  std::vector<int> divs;
  for (int d = 1; d <= w; ++d)
    if (w % d == 0) divs.push_back(d);
  switch (pick(depth < 2 ? 8 : 7)) {
    case 0:
    case 1: {
      json l = {{"type", coin() ? "conv2d" : "conv1d"}, {"kernel_size", 1 + pick(4)}, {"bias", coin()},
                {"padding", pick(3) == 0 ? "causal" : "same"}};
      const int groups = divs[pick(static_cast<int>(divs.size()))];
      l["groups"] = groups;
      if (coin()) {
        w = groups * (1 + pick(3));
        l["out_channels"] = w;
      }
      return l;
    }
    case 2: return {{"type", "batchnorm"}, {"mode", coin() ? "train" : "eval"}, {"affine", coin()}};
    case 3: return {{"type", "groupnorm"}, {"num_groups", divs[pick(static_cast<int>(divs.size()))]}, {"affine", coin()}};
    case 4: return {{"type", coin() ? "layernorm" : "instancenorm"}};
    case 5: return {{"type", coin() ? "relu" : "gelu"}};
    case 6: return {{"type", "linear"}, {"bias", coin()}};
    default: {
      int inner = w;
      json body = json::array();
      const int n = 1 + pick(3);
      for (int i = 0; i < n; ++i) body.push_back(random_conv_layer(g, inner, depth + 1));
      if (inner != w) body.push_back({{"type", "conv2d"}, {"kernel_size", 1}, {"out_channels", w}});
      return {{"type", "residual"}, {"body", body}};
    }
  }
}

}  // namespace

TEST_CASE("random stacks: convolutional stacks on image grids pass the same checks") {
  std::mt19937 g(20261125);
  const int total = std::getenv("BIASLAB_RANDOM_STACKS") ? std::atoi(std::getenv("BIASLAB_RANDOM_STACKS")) : 60;
  int analysed = 0;
  for (int iter = 0; iter < total; ++iter) {
    const int H = 1 + static_cast<int>(g() % 4), W = 1 + static_cast<int>(g() % 4);
    int w = 1 + static_cast<int>(g() % 6);
    const json shape = {{"batch", 1 + static_cast<int>(g() % 3)}, {"features", w}, {"grid", {H, W}}};
    json layers = json::array();
    const int n = 1 + static_cast<int>(g() % 4);
    for (int i = 0; i < n; ++i) layers.push_back(random_conv_layer(g, w, 0));
    const json cfg = {{"version", 1}, {"seed", iter}, {"dtype", g() % 2 ? "float32" : "float64"},
                      {"shape", shape}, {"layers", layers}};
    const std::string text = cfg.dump();
    CAPTURE(text);
    const auto parsed = parse_config_text(text);
    INFO("rejected: " << (parsed ? std::string() : parsed.error().what()));
    REQUIRE(parsed.ok());  // every draw keeps the widths and groups valid
    CHECK(parsed->shape.tokens == H * W);
    check_generated(*parsed);
    ++analysed;
  }
  MESSAGE("analysed " << analysed << " convolutional stacks");
}

TEST_CASE("random stacks: token rows give every bias the answer every row gives") {
  // Token rows (analysis/structure.hpp) apply only where their work saving is large, which the
  // small stacks above never reach; here they are forced (no minimum work) on random stacks of
  // 4 to 8 tokens, and each bias they apply to must get the answer every row gives: the same
  // determination, redundant dimension and bounds.
  std::mt19937 g(20261126 + 11);
  int compared = 0, with_null = 0;
  for (int iter = 0; iter < 80; ++iter) {
    const int batch = 1 + static_cast<int>(g() % 2), tokens = 4 + static_cast<int>(g() % 5);
    int w = 2 + static_cast<int>(g() % 7);
    const json shape = {{"batch", batch}, {"tokens", tokens}, {"features", w}};
    json layers = json::array();
    const int n = 2 + static_cast<int>(g() % 4);
    for (int i = 0; i < n; ++i) layers.push_back(random_layer(g, w, 0));
    const json cfg = {{"version", 1}, {"seed", iter}, {"dtype", "float64"}, {"shape", shape}, {"layers", layers}};
    const std::string text = cfg.dump();
    if (!parse_config_text(text)) continue;
    CAPTURE(text);
    auto b = biaslab::test::build(text);
    biaslab::test::RowSolvers solvers(b);
    for (size_t pi = 0; pi < b.model.params.size(); ++pi) {
      const ModelParam& p = b.model.params[pi];
      if (!is_bias_like(p.role)) continue;
      if (plan_rows(b.model, static_cast<int>(pi), static_cast<int>(b.model.ops.size()), 0.0).at < 0) continue;
      CAPTURE(p.name);
      const auto [a, e] = solvers.solve(static_cast<int>(pi));
      CAPTURE(a.stop_note);
      CAPTURE(e.stop_note);
      CHECK(a.determined == e.determined);
      CHECK(a.redundant_dim == e.redundant_dim);
      CHECK(a.redundant_dim_min == e.redundant_dim_min);
      CHECK(a.redundant_dim_max == e.redundant_dim_max);
      ++compared;
      with_null += a.rows_per_sample > 0 && a.redundant_dim > 0;
    }
  }
  MESSAGE("compared " << compared << " biases on token rows, " << with_null << " with a null space checked on every row");
  CHECK(compared >= 40);
  CHECK(with_null >= 5);
}
