// glu (cpp/layers/glu.cpp): the gated FFN against its formula written out here, its JVP, the
// hidden default and limits, its biases in the report, the folds that read and write through it,
// and the script's module.
#include <cmath>
#include <string>

#include "export/torch_export.hpp"
#include "folds/folds.hpp"
#include "model/presets.hpp"
#include "model/jvp.hpp"
#include "../support.hpp"

using namespace biaslab;
using biaslab::test::build;

namespace {

std::string stack(const std::string& dtype, const std::string& layers, int features = 4) {
  return R"({"version": 1, "seed": 9, "dtype": ")" + dtype + R"(", "shape": {"batch": 2, "tokens": 3, "features": )" +
         std::to_string(features) + R"(}, "layers": [)" + layers + "]}";
}

double silu(double v) { return v / (1 + std::exp(-v)); }
double gelu(double v) { return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))); }
double gelu_tanh(double v) {
  return 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
}

const Mat& value(const test::Built& b, const std::string& name) {
  return b.model.params[test::param_index(b.model, name)].value;
}

}  // namespace

TEST_CASE("glu: y = down_proj(act(gate_proj(x)) * up_proj(x)) for silu, gelu and gelu_tanh") {
  struct Case {
    const char* name;
    double (*f)(double);
  };
  for (const Case& c : {Case{"silu", silu}, Case{"gelu", gelu}, Case{"gelu_tanh", gelu_tanh}}) {
    CAPTURE(c.name);
    const std::string layer = std::string(R"({"type": "glu", "hidden": 6, "bias": true, "activation": ")") + c.name + "\"}";
    auto b = build(stack("float64", layer));
    const Mat x = draw_input(b.config, 0);
    const Mat& Wg = value(b, "layers.0.gate_proj.weight");
    const Mat& Wu = value(b, "layers.0.up_proj.weight");
    const Mat& Wd = value(b, "layers.0.down_proj.weight");
    REQUIRE(Wg.rows() == 6);
    REQUIRE(Wd.cols() == 6);
    Mat expected(x.rows(), 4);
    for (int r = 0; r < x.rows(); ++r) {
      Eigen::VectorXd h(6);
      for (int j = 0; j < 6; ++j) {
        const double g = Wg.row(j).dot(x.row(r)) + value(b, "layers.0.gate_proj.bias")(j, 0);
        const double u = Wu.row(j).dot(x.row(r)) + value(b, "layers.0.up_proj.bias")(j, 0);
        h(j) = c.f(g) * u;
      }
      expected.row(r) = (Wd * h + value(b, "layers.0.down_proj.bias").col(0)).transpose();
    }
    CHECK_MAX_ABS_LE(forward<double>(b.model, cast_weights<double>(b.model), x), expected, 1e-15);
    const MatT<float> y32 = forward<float>(b.model, cast_weights<float>(b.model), MatT<float>(x.cast<float>()));
    CHECK_MAX_ABS_LE(y32, expected, 1e-5);
  }
}

TEST_CASE("glu: hidden defaults to 4 x the input width, bias to false, and the names are LlamaMLP's") {
  auto b = build(stack("float64", R"({"type": "glu"})", 8));
  CHECK(value(b, "layers.0.gate_proj.weight").rows() == 32);
  CHECK(value(b, "layers.0.up_proj.weight").rows() == 32);
  CHECK(value(b, "layers.0.down_proj.weight").cols() == 32);
  CHECK(b.model.find_param("layers.0.gate_proj.bias") < 0);
  CHECK(b.model.find_param("layers.0.down_proj.bias") < 0);
  CHECK(layer_to_json(b.config.layers[0]) == Json{{"type", "glu"}});
  const auto wide = parse_config_text(R"({"shape": {"batch": 64, "tokens": 64, "features": 512}, "layers": [{"type": "glu"}]})");
  REQUIRE_FALSE(wide.ok());
  CHECK(wide.error().what() == "layers[0].hidden: batch * tokens * hidden = 64 * 64 * 2048 = 8388608 exceeds the limit of 2097152 activations");
  const auto too_wide = parse_config_text(R"({"shape": {"batch": 1, "tokens": 1, "features": 4096}, "layers": [{"type": "glu"}]})");
  REQUIRE_FALSE(too_wide.ok());
  CHECK(too_wide.error().path == "layers[0].hidden");
}

TEST_CASE("glu: its gate and up biases and a bias before it match central differences") {
  auto b = build(stack("float64", R"({"type": "linear"}, {"type": "glu", "hidden": 5, "bias": true}, {"type": "glu", "hidden": 3, "activation": "gelu"})"));
  const Model& m = b.model;
  const Mat x = draw_input(b.config, 0);
  const Weights<double> w = cast_weights<double>(m);
  Trace trace;
  forward<double>(m, w, x, {}, &trace);
  int checked = 0;
  for (const char* name : {"layers.0.bias", "layers.1.gate_proj.bias", "layers.1.up_proj.bias", "layers.1.down_proj.bias"}) {
    CAPTURE(name);
    const int pi = test::param_index(m, name);
    const int n = static_cast<int>(m.params[pi].value.size());
    Mat dir(n, 1);
    for (int i = 0; i < n; ++i) dir(i, 0) = 0.3 + 0.4 * i - 0.1 * i * i;
    const Seed seed{pi, Mat(dir.transpose()), true};
    const Mat d = jvp(m, trace, seed, 1, static_cast<int>(m.ops.size()));
    const Mat fd = test::central_difference(m, x, pi, dir);
    CHECK_MAX_ABS_LE(d, fd, 1e-8);
    ++checked;
  }
  CHECK(checked == 4);
}

TEST_CASE("glu: its biases in the report, and the folds through gate, up and down") {
  const Json r = test::report_of(stack("float64", R"({"type": "layernorm"}, {"type": "glu", "hidden": 8, "bias": true},
      {"type": "batchnorm"}, {"type": "rmsnorm"}, {"type": "glu", "hidden": 8})", 4));
  for (const char* name : {"layers.1.gate_proj.bias", "layers.1.up_proj.bias"}) {
    const Json& row = test::bias_row(r, name);
    INFO(test::row_text(row));
    CHECK(row.at("redundant_dim") == 0);
    CHECK(row.at("verdict") == "effective");
  }
  const Json& down = test::bias_row(r, "layers.1.down_proj.bias");
  INFO(test::row_text(down));
  CHECK(down.at("redundant_dim") == 4);  // BatchNorm (train) subtracts it
  int seen = 0;
  for (const Json& f : r.at("folds")) {
    INFO(f.dump());
    CHECK(f.at("exact") == true);
    if (f.at("rule") == "fold_layernorm_affine" || f.at("rule") == "fold_rmsnorm_gain") {
      std::vector<std::string> to;
      for (const Json& mv : f.at("moves")) to.push_back(mv.at("to"));
      const std::string glu = f.at("rule") == "fold_layernorm_affine" ? "layers.1." : "layers.4.";
      CHECK(std::count(to.begin(), to.end(), glu + "gate_proj.weight") == 1);
      CHECK(std::count(to.begin(), to.end(), glu + "up_proj.weight") == 1);
      ++seen;
    }
    if (f.at("rule") == "drop_bias_before_norm") {
      // glu's one `bias` flag also covers gate_proj and up_proj: down_proj.bias is zeroed.
      CHECK(f.at("params_removed") == 0);
      ++seen;
    }
  }
  CHECK(seen == 3);
}

TEST_CASE("glu: the Jacobian of a gate bias is taken at down_proj's input, named as such") {
  // hidden 3 < 4 features: down_proj is injective, so the Jacobian is taken before it.
  const Json r = test::report_of(stack("float64", R"({"type": "glu", "hidden": 3, "bias": true})"));
  for (const char* name : {"layers.0.gate_proj.bias", "layers.0.up_proj.bias"}) {
    const Json& row = test::bias_row(r, name);
    INFO(test::row_text(row));
    CHECK(row.at("structure").at("jacobian_at") == "input of layers.0 down_proj");
    CHECK(row.at("directions") == "none");
  }
}

TEST_CASE("glu: a fold that needs a bias flag on creates every bias it covers, so the config stays exact") {
  // LayerNorm's shift folds into gate_proj and up_proj of a bias-free glu: `bias` turns on, and
  // down_proj.bias must exist as zeros, not be drawn anew when the config is rebuilt.
  const ExperimentConfig c = test::config_from(stack("float64", R"({"type": "layernorm"}, {"type": "glu", "hidden": 8})"));
  const Network net = build_network(c);
  int applied = 0;
  for (const FoldCandidate& cand : find_folds(net)) {
    if (std::string(cand.rule->id) != "fold_layernorm_affine") continue;
    FoldApplied a;
    const Network folded = apply_fold(net, cand, a);
    const LayerNode& g = folded.layers[1];
    CHECK(g.cfg.bias);
    REQUIRE(g.find("down_proj.bias") != nullptr);
    CHECK(g.find("down_proj.bias")->value.cwiseAbs().maxCoeff() == 0.0);
    REQUIRE(g.find("gate_proj.bias") != nullptr);
    CHECK(g.find("gate_proj.bias")->value.cwiseAbs().maxCoeff() > 0.0);
    ++applied;
  }
  CHECK(applied == 1);
}

TEST_CASE("glu: the script builds the module with its options") {
  const std::string s = export_torch_script(test::config_from(stack("float64", R"({"type": "glu", "hidden": 6, "activation": "gelu_tanh", "bias": true})")));
  CHECK(s.find("GLU(4, 6, activation=\"gelu_tanh\", bias=True)") != std::string::npos);
  CHECK(s.find("class GLU(nn.Module)") != std::string::npos);
}

TEST_CASE("presets: llama-block and qwen2-block say what their reports find") {
  const Json llama = test::report_of(find_preset("llama-block")->config);
  CHECK(llama.at("biases").empty());  // "no biases at all"
  std::vector<std::string> rules;
  for (const Json& f : llama.at("folds")) {
    INFO(f.dump());
    CHECK(f.at("exact") == true);
    rules.push_back(f.at("rule"));
  }
  CHECK(rules == std::vector<std::string>{"fold_rmsnorm_gain", "fold_rmsnorm_gain"});
  const Json qwen = test::report_of(find_preset("qwen2-block")->config);
  const Json& k = test::bias_row(qwen, "layers.0.body.1.k_proj.bias");
  INFO(test::row_text(k));
  CHECK(k.at("size") == 16);
  CHECK(k.at("redundant_dim") == 0);  // "under RoPE the key bias is no longer redundant"
  int value_folds = 0;
  for (const Json& f : qwen.at("folds"))
    if (f.at("rule") == "fold_value_bias") {
      INFO(f.dump());
      CHECK(f.at("exact") == true);
      CHECK(f.at("params_removed") == 16 - 112);  // "its 16 numbers would become 112"
      ++value_folds;
    }
  CHECK(value_folds == 1);
}
