// parallel: x + sum of branch_b(x) (GPT-J, Pythia). Its forward against the hand computation, the
// derivative drivers against central differences, the restart of the forward pass inside a branch
// (the sweep's forward_from), the config format, and what the block does to its biases. Its
// derivatives against central differences: test_jvp.cpp.
#include <string>
#include <utility>
#include <vector>

#include "../support.hpp"

using namespace biaslab;
using namespace biaslab::test;

namespace {

constexpr double kTol = 1e-12;

std::string net(int batch, int tokens, int features, const std::string& layers, const char* dtype = "float64") {
  return R"({"version": 1, "seed": 3, "dtype": ")" + std::string(dtype) + R"(", "shape": {"batch": )" +
         std::to_string(batch) + R"(, "tokens": )" + std::to_string(tokens) + R"(, "features": )" +
         std::to_string(features) + R"(}, "layers": [)" + layers + "]}";
}

const Mat& value(const Model& m, const std::string& name) { return m.params[param_index(m, name)].value; }

// x W^T + b, per token.
Mat affine(const Mat& x, const Mat& W, const Mat& b) {
  return (x * W.transpose()).rowwise() + b.col(0).transpose();
}

const char* const kThree = R"({"type": "parallel", "branches": [
    [{"type": "linear"}],
    [{"type": "relu"}],
    [{"type": "linear", "out_features": 6}, {"type": "tanh"}, {"type": "linear", "out_features": 4}]]})";

}  // namespace

TEST_CASE("parallel: the output is x plus every branch applied to x") {
  auto b = build(net(2, 3, 4, kThree));
  const Model& m = b.model;
  const Mat x = draw_input(b.config, 0);
  const std::string p = "layers.0.branches.";
  const Mat expected = x + affine(x, value(m, p + "0.0.weight"), value(m, p + "0.0.bias")) +
                       Mat(x.cwiseMax(0.0)) +
                       affine(Mat(affine(x, value(m, p + "2.0.weight"), value(m, p + "2.0.bias")).array().tanh()),
                              value(m, p + "2.2.weight"), value(m, p + "2.2.bias"));
  CHECK_MAX_ABS_LE(forward<double>(m, cast_weights<double>(m), x), expected, kTol);
}

TEST_CASE("parallel: a forward pass restarted inside a branch gives the full pass's output") {
  // The sweep restarts at the op of the perturbed parameter; inside a later branch, the block's
  // sum must already hold the earlier branches' outputs.
  auto b = build(net(2, 3, 4, std::string(kThree) + R"(, {"type": "layernorm"})"));
  const Model& m = b.model;
  const Mat x = draw_input(b.config, 0);
  const Weights<double> w = cast_weights<double>(m);
  Recording<double> rec;
  forward_recording<double>(m, w, x, rec);
  for (const char* name : {"layers.0.branches.0.0.bias", "layers.0.branches.2.0.bias", "layers.0.branches.2.2.bias",
                           "layers.1.bias"}) {
    CAPTURE(name);
    const int pi = param_index(m, name);
    const Mat moved = m.params[pi].value.array() + 0.5;
    const Mat full = forward<double>(m, w, x, {pi, &moved});
    const Mat restarted = forward_from<double>(m, w, rec, m.params[pi].op, {pi, &moved});
    CHECK_MAX_ABS_LE(restarted, full, kTol);
  }
}

TEST_CASE("parallel: the config format") {
  SUBCASE("printed and read back unchanged") {
    const ExperimentConfig c = config_from(net(1, 2, 4, kThree));
    REQUIRE(c.layers[0].branches.size() == 3);
    CHECK(c.layers[0].branches[2].size() == 3);
    const auto again = parse_config(config_to_json(c));
    REQUIRE(again.ok());
    CHECK(again.value() == c);
  }
  struct Bad {
    const char* layers;
    const char* path;
    const char* says;
  };
  const Bad bad[] = {
      {R"({"type": "parallel"})", "layers[0].branches", "is missing"},
      {R"({"type": "parallel", "branches": []})", "layers[0].branches", "at least 1 layer list"},
      {R"({"type": "parallel", "branches": [{"type": "linear"}]})", "layers[0].branches[0]", "must be an array of layers"},
      {R"({"type": "parallel", "branches": "linear"})", "layers[0].branches", "must be an array of layer lists"},
      {R"({"type": "parallel", "branches": [[{"type": "relu"}], []]})", "layers[0].branches[1]", "at least one layer"},
      {R"({"type": "parallel", "branches": [[{"type": "relu"}], [{"type": "linear", "out_features": 3}]]})",
       "layers[0].branches[1]", "changes the width from 4 to 3"},
      {R"({"type": "parallel", "branches": [[{"type": "relu"}], [{"type": "lineer"}]]})", "layers[0].branches[1][0].type",
       "unknown layer type"},
  };
  for (const Bad& c : bad) {
    CAPTURE(c.layers);
    const auto r = parse_config_text(net(1, 2, 4, c.layers));
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().path == c.path);
    CHECK(r.error().message.find(c.says) != std::string::npos);
  }
}

TEST_CASE("parallel: names follow the state dict, layers.<i>.branches.<b>.<j>") {
  auto b = build(net(1, 2, 4, kThree));
  CHECK(b.model.find_param("layers.0.branches.0.0.weight") >= 0);
  CHECK(b.model.find_param("layers.0.branches.2.2.bias") >= 0);
  CHECK(b.model.params.size() == 6);
  // The report's list of layers (what the page draws) has every branch's layers, after the block.
  const json r = report_of(net(1, 2, 4, kThree), false);
  std::vector<std::string> layers;
  for (const json& l : r.at("layers")) layers.push_back(l.at("name"));
  CHECK(layers == std::vector<std::string>{"layers.0", "layers.0.branches.0.0", "layers.0.branches.1.0", "layers.0.branches.2.0",
                                           "layers.0.branches.2.1", "layers.0.branches.2.2"});
}

TEST_CASE("parallel: a bias in an early branch of a final all-linear block reaches the output") {
  // Nothing after the block can cancel it; a cut inside the block would have lost the branch's sum.
  const json r = report_of(net(2, 3, 4, R"({"type": "parallel", "branches": [[{"type": "linear"}], [{"type": "linear"}]]})"));
  for (const char* name : {"layers.0.branches.0.0.bias", "layers.0.branches.1.0.bias"}) {
    const json& row = bias_row(r, name);
    INFO(row_text(row));
    CHECK(row.at("redundant_dim") == 0);
    CHECK(row.at("verdict") == "effective");
  }
}

TEST_CASE("parallel: Pythia's block with ln_f, each branch read through a LayerNorm") {
  // The branches' output biases reach ln_f through the block's sum: each loses exactly its
  // all-ones direction, and centre_writers centres both branches' writers. Under 25% rotary the
  // key bias is redundant on the non-rotated dimensions; the value bias still folds into o_proj.
  const json r = report_of(net(2, 6, 16, R"({"type": "parallel", "branches": [
      [{"type": "layernorm"}, {"type": "attention", "num_heads": 2, "causal": true, "rope": true, "rotary_dim": 2}],
      [{"type": "layernorm"}, {"type": "linear", "out_features": 32}, {"type": "gelu"}, {"type": "linear", "out_features": 16}]]},
    {"type": "layernorm"})"));
  const std::string a = "layers.0.branches.0.1.", f = "layers.0.branches.1.";
  for (const std::string& name : {a + "o_proj.bias", f + "3.bias"}) {
    const json& row = bias_row(r, name);
    INFO(row_text(row));
    CHECK(row.at("redundant_dim") == 1);
    CHECK(row.at("directions") == "all-ones");
  }
  const json& key = bias_row(r, a + "k_proj.bias");
  INFO(row_text(key));
  CHECK(key.at("redundant_dim") == 2 * (8 - 2));
  CHECK(bias_row(r, a + "v_proj.bias").at("absorbed_by") == a + "o_proj.bias");
  bool centred = false;
  for (const json& fold : r.at("folds"))
    if (fold.at("rule") == "centre_writers") {
      centred = true;
      INFO(fold.dump());
      CHECK(fold.at("exact") == true);
      std::string moved;
      for (const json& mv : fold.at("moves")) moved += mv.at("from").get<std::string>() + " ";
      CHECK(moved.find(a + "o_proj.bias") != std::string::npos);
      CHECK(moved.find(f + "3.bias") != std::string::npos);
    }
  CHECK(centred);
}

TEST_CASE("parallel: before BatchNorm (train) every branch's closing bias is dropped, before LayerNorm centred") {
  // BatchNorm (train) cancels any constant shift of a feature, so each branch's last bias is
  // redundant, and one fold drops all of them; LayerNorm cancels their means.
  const std::string branches = R"({"type": "parallel", "branches": [[{"type": "linear"}], [{"type": "relu"}],
      [{"type": "gelu"}, {"type": "residual", "body": [{"type": "linear"}]}]]})";
  const json bn = report_of(net(2, 4, 6, branches + R"(, {"type": "batchnorm"}, {"type": "linear"})"));
  const std::vector<std::string> closing{"layers.0.branches.0.0.bias", "layers.0.branches.2.1.body.0.bias"};
  for (const std::string& name : closing) CHECK(bias_row(bn, name).at("verdict") == "redundant");
  const json ln = report_of(net(2, 4, 6, branches + R"(, {"type": "layernorm"})"));
  for (const auto& [r, rule] : {std::pair<const json*, std::string>{&bn, "drop_bias_before_norm"}, {&ln, "centre_bias_before_norm"}}) {
    CAPTURE(rule);
    int found = 0;
    for (const json& fold : r->at("folds")) {
      if (fold.at("rule") != rule) continue;
      ++found;
      INFO(fold.dump());
      CHECK(fold.at("exact") == true);
      CHECK(fold.at("moves").size() == closing.size());
      for (size_t k = 0; k < closing.size(); ++k) CHECK(fold.at("moves")[k].at("from") == closing[k]);
    }
    CHECK(found == 1);
  }
  const json& minimal = bn.at("minimal_model");
  CHECK(minimal.at("params_before").get<int>() - minimal.at("params_after").get<int>() == 12);
}

TEST_CASE("parallel: a ReLU in a later branch does not stand in for the ReLU after the block") {
  // The seed's tangent never reaches the ReLU of branch 1 (that branch reads the block's input),
  // so it vanishes there whatever the null space is; the structure must still wait for the ReLU
  // after the block. Found by review: the first kink in op order was taken as the first the
  // tangent meets, and 12 of 40 seeds stopped early with an inconsistent row.
  int inconsistent = 0;
  for (int seed = 1; seed <= 12; ++seed) {
    const json r = report_of(R"({"version": 1, "seed": )" + std::to_string(seed) +
                             R"(, "dtype": "float64", "shape": {"batch": 1, "tokens": 1, "features": 8}, "layers": [
        {"type": "parallel", "branches": [[{"type": "linear"}], [{"type": "relu"}]]}, {"type": "relu"}, {"type": "linear"}]})");
    for (const json& row : r.at("biases")) {
      INFO("seed " << seed << ": " << row_text(row));
      if (row.at("consistent") != true) ++inconsistent;
      CHECK(row.at("consistent") == true);
    }
  }
  CHECK(inconsistent == 0);
}
