// pos_embedding: a learned table with one row per position added to the tokens. The forward
// against the definition, the table's torch shape, its bias row before each kind of reader (a
// per-token mean removes each row's mean, GroupNorm each group's mean over the whole table,
// BatchNorm (train) the part shared by every position), the folds that centre it, and the
// token permutation it breaks. Derivatives: test_jvp.cpp; against torch: tests/torch.
#include <string>

#include "../support.hpp"
#include "export/safetensors.hpp"
#include "folds/folds.hpp"

using namespace biaslab;
using namespace biaslab::test;

namespace {

std::string net(int batch, int tokens, int features, const std::string& layers) {
  return R"({"version": 1, "seed": 6, "shape": {"batch": )" + std::to_string(batch) + R"(, "tokens": )" +
         std::to_string(tokens) + R"(, "features": )" + std::to_string(features) + R"(}, "layers": [)" + layers +
         "]}";
}

const json& fold_row(const json& report, const std::string& rule) {
  for (const json& f : report.at("folds"))
    if (f.at("rule") == rule) return f;
  INFO("folds: " << report.at("folds").dump());
  FAIL("the report has no fold " << rule);
  return report;
}

}  // namespace

TEST_CASE("pos_embedding: token t of every sample gets row t of the table, held as torch's (T, F)") {
  auto b = build(net(3, 4, 5, R"({"type": "pos_embedding"})"));
  const Model& m = b.model;
  REQUIRE(m.params.size() == 1);
  const Param& p = b.net.layers[0].params[0];
  CHECK(p.local == "weight");
  CHECK(p.dims.list() == std::vector<std::int64_t>{4, 5});
  CHECK(p.value.rows() == 20);
  const Mat x = draw_input(b.config, 0);
  Mat expected = x;
  for (int s = 0; s < 3; ++s)
    for (int t = 0; t < 4; ++t)
      for (int f = 0; f < 5; ++f) expected(s * 4 + t, f) += p.value(t * 5 + f, 0);
  CHECK_MAX_ABS_LE(forward<double>(m, cast_weights<double>(m), x), expected, 0.0);
  // The tensors file carries the (T, F) shape, and reads back.
  ExperimentTensors t{b.net, x, {}, {}};
  const Result<std::string> bytes = write_experiment_tensors(t);
  REQUIRE(bytes.ok());
  const Result<TensorFile> file = read_safetensors(*bytes);
  REQUIRE(file.ok());
  REQUIRE(file->find("layers.0.weight") != nullptr);
  CHECK(file->find("layers.0.weight")->shape == std::vector<std::int64_t>{4, 5});
  const Result<ExperimentTensors> back = read_experiment_tensors(b.config, *bytes);
  REQUIRE(back.ok());
  CHECK_MAX_ABS_LE(back->net.layers[0].params[0].value, p.value, 0.0);
}

TEST_CASE("pos_embedding: the table has tokens x features entries and takes no options") {
  const Result<ExperimentConfig> bad = parse_config_text(net(1, 3, 4, R"({"type": "pos_embedding", "size": 3})"));
  REQUIRE(!bad.ok());
  CHECK(bad.error().path == "layers[0].size");
  CHECK(bad.error().message.find("pos_embedding takes no options") != std::string::npos);
  const ExperimentConfig c = config_from(net(2, 7, 6, R"({"type": "pos_embedding"}, {"type": "residual", "body": [{"type": "pos_embedding"}]})"));
  CHECK(count_parameters(build_network(c)) == 2 * 7 * 6);
}

TEST_CASE("pos_embedding: what each reader removes from the table") {
  struct Case {
    const char* name;
    std::string text;
    int redundant;
    const char* directions;
    const char* why;  // a phrase of the row's reason
  };
  const Case cases[] = {
      // LayerNorm removes each token's mean, so each position's row loses its mean: T of T x F.
      {"LayerNorm", net(2, 5, 6, R"({"type": "pos_embedding"}, {"type": "layernorm"})"), 5,
       "constant over each position's features", "each position's row of the table loses its mean"},
      {"softmax", net(2, 3, 4, R"({"type": "pos_embedding"}, {"type": "softmax"})"), 3,
       "constant over each position's features", "softmax is shift invariant in each token"},
      // GroupNorm's statistics run over the sample's tokens too: only each group's mean over the table.
      {"GroupNorm", net(2, 3, 6, R"({"type": "pos_embedding"}, {"type": "groupnorm", "num_groups": 3})"), 3,
       "constant within each of the 3 groups, at every position", "GroupNorm"},
      // BatchNorm (train) removes each feature's mean over the batch and the tokens: the part of
      // the table that every position shares, F of T x F.
      {"BatchNorm (train)", net(2, 4, 3, R"({"type": "pos_embedding"}, {"type": "batchnorm"})"), 3,
       "the same at every position", "BatchNorm (train)"},
      // ViT's stream: read only through LayerNorms (each block's first layer, and the last one).
      {"a stream read only by LayerNorms",
       net(2, 4, 8, R"({"type": "pos_embedding"},
           {"type": "residual", "body": [{"type": "layernorm"}, {"type": "attention", "num_heads": 2}]},
           {"type": "residual", "body": [{"type": "layernorm"}, {"type": "linear", "out_features": 16}, {"type": "gelu"}, {"type": "linear", "out_features": 8}]},
           {"type": "layernorm"})"),
       4, "constant over each position's features", "residual stream"},
      {"a nonlinearity", net(2, 3, 4, R"({"type": "pos_embedding"}, {"type": "gelu"}, {"type": "linear"})"), 0, "none",
       "nonlinearity"},
      // One position: the table is a bias, and LayerNorm removes its mean.
      {"one position", net(3, 1, 4, R"({"type": "pos_embedding"}, {"type": "layernorm"})"), 1, "all-ones", "LayerNorm"},
  };
  for (const Case& c : cases) {
    INFO("case: " << c.name);
    const json r = report_of(c.text);
    const json& row = bias_row(r, "layers.0.weight");
    INFO(row_text(row) << " why: " << row.at("why"));
    CHECK(row.at("redundant_dim") == c.redundant);
    CHECK(row.at("directions") == c.directions);
    CHECK(row.at("consistent") == true);
    CHECK(row.at("why").get<std::string>().find(c.why) != std::string::npos);
  }
}

TEST_CASE("pos_embedding: the folds that centre the table are exact and remove its redundant part") {
  SUBCASE("centre_writers: each row of a table that writes into a stream read by LayerNorms") {
    const std::string text = net(2, 4, 8, R"({"type": "pos_embedding"},
        {"type": "residual", "body": [{"type": "layernorm"}, {"type": "linear"}]}, {"type": "layernorm"})");
    const json r = report_of(text);
    const json& f = fold_row(r, "centre_writers");
    INFO(f.dump());
    CHECK(f.at("exact") == true);
    // The folded table's rows have mean zero: centring it again changes nothing.
    Network n = build_network(config_from(text));
    sync_network(n);
    FoldApplied applied;
    for (const auto& c : find_folds(n))
      if (std::string(c.rule->id) == "centre_writers") n = apply_fold(n, c, applied);
    const Mat& t = n.layers[0].params[0].value;
    for (int row = 0; row < 4; ++row) {
      CAPTURE(row);
      CHECK_LE_TOL(std::abs(t.middleRows(row * 8, 8).mean()), 1e-15, "mean of a centred row");
    }
  }
  SUBCASE("centre_writers: a table that closes a block's body writes into the stream too") {
    const json r = report_of(net(2, 4, 8, R"({"type": "residual", "body": [{"type": "layernorm"}, {"type": "pos_embedding"}]},
        {"type": "layernorm"})"));
    const json& f = fold_row(r, "centre_writers");
    INFO(f.dump());
    CHECK(f.at("exact") == true);
    CHECK(f.at("moves").dump().find("layers.0.body.1.weight") != std::string::npos);
    CHECK(f.at("dof_removed") == 4);
  }
  SUBCASE("drop_bias_before_norm: each feature's mean over the positions before BatchNorm (train) or InstanceNorm") {
    for (const std::string norm : {R"({"type": "batchnorm"})", R"({"type": "instancenorm", "affine": true})"}) {
      CAPTURE(norm);
      const json r = report_of(net(2, 3, 5, R"({"type": "pos_embedding"}, )" + norm + R"(, {"type": "gelu"})"));
      const json& f = fold_row(r, "drop_bias_before_norm");
      INFO(f.dump());
      CHECK(f.at("exact") == true);
      CHECK(f.at("dof_removed") == 5);
      CHECK(f.at("params_removed") == 0);
      CHECK(bias_row(r, "layers.0.weight").at("redundant_dim") == 5);
    }
  }
  SUBCASE("centre_bias_before_norm: per row before LayerNorm, per group over the table before GroupNorm") {
    for (const std::string norm : {R"({"type": "layernorm"})", R"({"type": "groupnorm", "num_groups": 2})"}) {
      CAPTURE(norm);
      const json r = report_of(net(2, 3, 4, R"({"type": "pos_embedding"}, )" + norm + R"(, {"type": "gelu"})"));
      const json& f = fold_row(r, "centre_bias_before_norm");
      INFO(f.dump());
      CHECK(f.at("exact") == true);
    }
  }
}

TEST_CASE("pos_embedding: permuting the tokens changes the output, and the report says why") {
  const json r = report_of(net(1, 4, 4, R"({"type": "pos_embedding"}, {"type": "linear"})"), false, true);
  const json& p = probe_row(r, "model: permute tokens");
  INFO(p.dump());
  CHECK(p.at("expected") == "changes");
  CHECK(p.at("note") == "a position embedding gives tokens positions");
  CHECK(p.at("agrees") == true);
  // A LayerNorm over one feature cancels the table whole: the tokens have no positions again.
  const json gone = report_of(net(1, 3, 1, R"({"type": "pos_embedding"}, {"type": "layernorm"})"), false, true);
  const json& q = probe_row(gone, "model: permute tokens");
  INFO(q.dump());
  CHECK(q.at("expected") == "equivariant");
  CHECK(q.at("agrees") == true);
}
