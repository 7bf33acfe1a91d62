// tanh (cpp/layers/tanh.cpp): values, derivative, schema and script, and a bias before it.
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
  return R"({"version": 1, "seed": 4, "dtype": ")" + dtype +
         R"(", "shape": {"batch": 2, "tokens": 3, "features": 4}, "layers": [)" + layers + "]}";
}

}  // namespace

TEST_CASE("tanh: forward is tanh in float64 and float32, odd and saturating") {
  auto b = build(stack("float64", R"({"type": "tanh"})"));
  const Mat x = mat(1, 4, {-20.0, -0.5, 0.0, 1.0}).replicate(6, 1);
  const Mat y64 = forward<double>(b.model, cast_weights<double>(b.model), x);
  // tanh(1) = 0.76159415595576488812 and tanh(0.5) = 0.46211715726000975850 (20 digits).
  CHECK_MAX_ABS_LE(y64.row(0), mat(1, 4, {-1.0, -0.46211715726000976, 0.0, 0.76159415595576489}), 1e-15);
  const MatT<float> y32 = forward<float>(b.model, cast_weights<float>(b.model), MatT<float>(x.cast<float>()));
  CHECK_MAX_ABS_LE(y32, y64, 1e-6);
}

TEST_CASE("tanh: the JVP of a bias before it matches central differences, and tanh'(0) = 1") {
  auto b = build(stack("float64", R"({"type": "linear"}, {"type": "tanh"}, {"type": "linear", "out_features": 2})"));
  const Model& m = b.model;
  const Mat x = draw_input(b.config, 0);
  const Weights<double> w = cast_weights<double>(m);
  Trace trace;
  forward<double>(m, w, x, {}, &trace);
  const int pi = test::param_index(m, "layers.0.bias");
  const Mat dir = mat(4, 1, {-0.4, 1.1, 0.2, 0.9});
  const Mat d = jvp(m, trace, Seed{pi, Mat(dir.transpose()), true}, 1, static_cast<int>(m.ops.size()));
  const Mat fd = test::central_difference(m, x, pi, dir);
  CHECK_MAX_ABS_LE(d, fd, 1e-7);
  const Mat g = op_jvp(m, m.ops[1], mat(1, 3, {0.0, 2.0, -2.0}), Mat::Ones(1, 3), 1);
  // 1 - tanh(2)^2 = 0.07065082485316446 (sech^2 2).
  CHECK_MAX_ABS_LE(g, mat(1, 3, {1.0, 0.07065082485316446, 0.07065082485316446}), 1e-15);
}

TEST_CASE("tanh: schema, round trip, script line, and an effective bias before it") {
  const ExperimentConfig c = test::config_from(stack("float32", R"({"type": "linear"}, {"type": "tanh"})"));
  CHECK(c.layers[1].type == LayerType::tanh);
  CHECK(layer_to_json(c.layers[1]) == Json{{"type", "tanh"}});
  CHECK(export_torch_script(c).find("        nn.Tanh(),\n") != std::string::npos);
  const Json r = test::report_of(stack("float64", R"({"type": "linear"}, {"type": "tanh"}, {"type": "linear"})"));
  const Json& row = test::bias_row(r, "layers.0.bias");
  INFO(test::row_text(row));
  CHECK(row.at("redundant_dim") == 0);
  CHECK(row.at("verdict") == "effective");
}
