// silu (cpp/layers/silu.cpp): its values, its derivative, the schema, the PyTorch script, and a
// bias in front of it. The expected values are written out here, never computed by the engine.
#include <cmath>
#include <string>

#include "export/torch_export.hpp"
#include "model/jvp.hpp"
#include "../support.hpp"

using namespace biaslab;
using biaslab::test::build;
using biaslab::test::mat;

namespace {

std::string stack(const std::string& dtype, const std::string& layers) {
  return R"({"version": 1, "seed": 3, "dtype": ")" + dtype +
         R"(", "shape": {"batch": 2, "tokens": 3, "features": 4}, "layers": [)" + layers + "]}";
}

double silu(double v) { return v / (1 + std::exp(-v)); }

}  // namespace

TEST_CASE("silu: forward is x * sigmoid(x) in float64 and float32") {
  auto b = build(stack("float64", R"({"type": "silu"})"));
  const Mat x = mat(1, 4, {-3.0, -0.5, 0.0, 2.0}).replicate(6, 1);
  Mat expected(x.rows(), x.cols());
  for (int i = 0; i < x.rows(); ++i)
    for (int j = 0; j < x.cols(); ++j) expected(i, j) = x(i, j) * (1 / (1 + std::exp(-x(i, j))));
  const Mat y64 = forward<double>(b.model, cast_weights<double>(b.model), x);
  CHECK_MAX_ABS_LE(y64, expected, 1e-15);
  const MatT<float> y32 = forward<float>(b.model, cast_weights<float>(b.model), MatT<float>(x.cast<float>()));
  CHECK_MAX_ABS_LE(y32, expected, 1e-6);
  // silu(0) = 0 exactly, and silu(-3) = -3 / (1 + e^3) = -0.142277619532700343 (30 digits: Python decimal)
  CHECK(y64(0, 2) == 0.0);
  CHECK_MAX_ABS_LE(mat(1, 1, {y64(0, 0)}), mat(1, 1, {-0.14227761953270034}), 1e-15);
}

TEST_CASE("silu: the JVP of a bias before it matches central differences") {
  auto b = build(stack("float64", R"({"type": "linear"}, {"type": "silu"}, {"type": "linear", "out_features": 3})"));
  const Model& m = b.model;
  const Mat x = draw_input(b.config, 0);
  const Weights<double> w = cast_weights<double>(m);
  Trace trace;
  forward<double>(m, w, x, {}, &trace);
  const int pi = test::param_index(m, "layers.0.bias");
  const Mat dir = mat(4, 1, {0.3, -1.2, 0.7, 0.25});
  const Seed seed{pi, Mat(dir.transpose()), true};
  const Mat d = jvp(m, trace, seed, 1, static_cast<int>(m.ops.size()));
  const Mat fd = test::central_difference(m, x, pi, dir);
  CHECK_MAX_ABS_LE(d, fd, 1e-7);
  // The derivative itself at a few points: sigmoid(v) (1 + v (1 - sigmoid(v))), against
  // central differences of silu.
  const Mat at = mat(1, 4, {-3.0, -0.5, 0.0, 2.0});
  const Mat ones = Mat::Ones(1, 4);
  const Mat g = op_jvp(m, m.ops[1], at, ones, 1);
  Mat g_fd(1, 4);
  for (int j = 0; j < 4; ++j) g_fd(0, j) = (silu(at(0, j) + 1e-6) - silu(at(0, j) - 1e-6)) / 2e-6;
  CHECK_MAX_ABS_LE(g, g_fd, 1e-8);
  CHECK(g(0, 2) == 0.5);  // silu'(0) = 1/2 exactly
}

TEST_CASE("silu: the schema lists it, configs round-trip, and the script builds nn.SiLU()") {
  const Json schema = config_schema();
  bool listed = false;
  for (const Json& t : schema.at("layer_types"))
    if (t.at("name") == "silu") listed = t.at("options").empty();
  CHECK(listed);
  const ExperimentConfig c = test::config_from(stack("float32", R"({"type": "linear"}, {"type": "silu"})"));
  CHECK(c.layers[1].type == LayerType::silu);
  CHECK(layer_to_json(c.layers[1]) == Json{{"type", "silu"}});
  const Result<ExperimentConfig> again = parse_config(config_to_json(c));
  REQUIRE(again.ok());
  CHECK(again.value() == c);
  const Result<ExperimentConfig> bad = parse_config_text(stack("float32", R"({"type": "silu", "beta": 2})"));
  REQUIRE(!bad.ok());
  CHECK(bad.error().path == "layers[0].beta");
  CHECK(bad.error().message == "unknown option \"beta\" for silu; silu takes no options");
  const std::string script = export_torch_script(c);
  CHECK(script.find("        nn.SiLU(),\n") != std::string::npos);
}

TEST_CASE("silu: a Linear bias before it is effective, explained as a nonlinearity") {
  const Json r = test::report_of(stack("float64", R"({"type": "linear"}, {"type": "silu"}, {"type": "linear"})"));
  const Json& row = test::bias_row(r, "layers.0.bias");
  INFO(test::row_text(row));
  CHECK(row.at("redundant_dim") == 0);
  CHECK(row.at("verdict") == "effective");
  CHECK(row.at("why").get<std::string>().find("a nonlinearity follows") != std::string::npos);
}
