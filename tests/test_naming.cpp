// Parameter names, roles and shapes, in PyTorch state_dict style.
//
// A config layer i at the top level is `layers.i`; a residual's body is `layers.i.body.j`;
// attention projections are `q_proj` / `k_proj` / `v_proj` / `o_proj`. Running statistics are
// buffers, not parameters. Only enabled biases exist.
#include <set>
#include <string>
#include <vector>

#include "folds/folds.hpp"
#include "model/presets.hpp"
#include "support.hpp"

using namespace biaslab;
using biaslab::test::build;
using biaslab::test::json;

namespace {

std::string net(const std::string& layers, int features = 8) {
  return R"({"version": 1, "seed": 1, "shape": {"batch": 2, "tokens": 3, "features": )" +
         std::to_string(features) + R"(}, "layers": [)" + layers + "]}";
}

std::vector<std::string> names(const Model& m) {
  std::vector<std::string> n;
  for (const auto& p : m.params) n.push_back(p.name);
  return n;
}

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += x + " ";
  return s;
}

const ModelParam& param(const Model& m, const std::string& name) {
  return m.params[biaslab::test::param_index(m, name)];
}

}  // namespace

TEST_CASE("naming: top-level layers are layers.<i>, with torch's weight/bias names and (out, in) shapes") {
  auto b = build(net(R"({"type": "linear", "out_features": 5}, {"type": "relu"}, {"type": "linear", "out_features": 3})"));
  INFO(joined(names(b.model)));
  CHECK(names(b.model) == std::vector<std::string>{"layers.0.weight", "layers.0.bias", "layers.2.weight", "layers.2.bias"});
  const ModelParam& w = param(b.model, "layers.2.weight");
  CHECK(w.role == ParamRole::weight);
  CHECK(w.value.rows() == 3);
  CHECK(w.value.cols() == 5);
  const ModelParam& bias = param(b.model, "layers.2.bias");
  CHECK(bias.role == ParamRole::bias);
  CHECK(bias.value.rows() == 3);
  CHECK(bias.value.cols() == 1);
}

TEST_CASE("naming: residual bodies are layers.<i>.body.<j>, attention projections are q/k/v/o_proj") {
  auto b = build(net(R"({"type": "residual", "body": [{"type": "layernorm"}, {"type": "attention", "num_heads": 2}]}, {"type": "linear"})"));
  INFO(joined(names(b.model)));
  CHECK(names(b.model) == std::vector<std::string>{
                              "layers.0.body.0.weight", "layers.0.body.0.bias",
                              "layers.0.body.1.q_proj.weight", "layers.0.body.1.q_proj.bias",
                              "layers.0.body.1.k_proj.weight", "layers.0.body.1.k_proj.bias",
                              "layers.0.body.1.v_proj.weight", "layers.0.body.1.v_proj.bias",
                              "layers.0.body.1.o_proj.weight", "layers.0.body.1.o_proj.bias",
                              "layers.1.weight", "layers.1.bias"});
  CHECK(param(b.model, "layers.0.body.0.weight").role == ParamRole::gain);
  CHECK(param(b.model, "layers.0.body.0.bias").role == ParamRole::shift);
  CHECK(param(b.model, "layers.0.body.1.k_proj.bias").role == ParamRole::bias);
  CHECK(param(b.model, "layers.0.body.1.o_proj.weight").role == ParamRole::weight);
  SUBCASE("nested residuals") {
    auto n = build(net(R"({"type": "relu"}, {"type": "residual", "body": [{"type": "residual", "body": [{"type": "linear"}]}]})"));
    CHECK(names(n.model) == std::vector<std::string>{"layers.1.body.0.body.0.weight", "layers.1.body.0.body.0.bias"});
  }
  SUBCASE("each parameter's op carries its layer's dotted prefix") {
    for (const ModelParam& p : b.model.params) {
      CAPTURE(p.name);
      const std::string layer = b.model.ops.at(static_cast<size_t>(p.op)).layer;
      CHECK(p.name.rfind(layer + ".", 0) == 0);
    }
  }
}

TEST_CASE("naming: batchnorm running statistics are buffers, present in both modes and not counted as parameters") {
  for (const char* mode : {"train", "eval"}) {
    INFO("mode := " << std::string(mode));
    auto b = build(net(std::string(R"({"type": "batchnorm", "mode": ")") + mode + R"("})"));
    CHECK(names(b.model) == std::vector<std::string>{"layers.0.weight", "layers.0.bias", "layers.0.running_mean", "layers.0.running_var"});
    CHECK(param(b.model, "layers.0.running_mean").role == ParamRole::buffer);
    CHECK(param(b.model, "layers.0.running_var").role == ParamRole::buffer);
    CHECK(std::string(param_role_name(ParamRole::buffer)) == "buffer");
    CHECK(count_parameters(b.net) == 16);  // weight + bias, buffers excluded
    CHECK(!is_bias_like(ParamRole::buffer));
  }
  SUBCASE("running variance is positive") {
    auto b = build(net(R"({"type": "batchnorm", "mode": "eval", "affine": false})"));
    CHECK(names(b.model) == std::vector<std::string>{"layers.0.running_mean", "layers.0.running_var"});
    CHECK_GT_TOL(param(b.model, "layers.0.running_var").value.minCoeff(), 0.0, "min running_var");
    CHECK(count_parameters(b.net) == 0);
  }
}

TEST_CASE("naming: only enabled biases and affine parameters exist") {
  struct Case { const char* layer; std::vector<std::string> expected; };
  const std::vector<Case> cases = {
      {R"({"type": "linear", "bias": false})", {"layers.0.weight"}},
      {R"({"type": "layernorm", "bias": false})", {"layers.0.weight"}},
      {R"({"type": "layernorm", "elementwise_affine": false})", {}},
      {R"({"type": "rmsnorm"})", {"layers.0.weight"}},
      {R"({"type": "rmsnorm", "elementwise_affine": false})", {}},
      {R"({"type": "instancenorm"})", {}},
      {R"({"type": "instancenorm", "affine": true})", {"layers.0.weight", "layers.0.bias"}},
      {R"({"type": "groupnorm", "num_groups": 2})", {"layers.0.weight", "layers.0.bias"}},
      {R"({"type": "groupnorm", "num_groups": 2, "affine": false})", {}},
      {R"({"type": "attention", "num_heads": 2, "q_bias": false, "v_bias": false})",
       {"layers.0.q_proj.weight", "layers.0.k_proj.weight", "layers.0.k_proj.bias", "layers.0.v_proj.weight",
        "layers.0.o_proj.weight", "layers.0.o_proj.bias"}},
      {R"({"type": "attention", "num_heads": 2, "k_bias": false, "o_bias": false})",
       {"layers.0.q_proj.weight", "layers.0.q_proj.bias", "layers.0.k_proj.weight", "layers.0.v_proj.weight",
        "layers.0.v_proj.bias", "layers.0.o_proj.weight"}},
      {R"({"type": "relu"})", {}},
      {R"({"type": "gelu"})", {}},
      {R"({"type": "softmax"})", {}},
  };
  for (const Case& c : cases) {
    INFO("c.layer := " << std::string(c.layer));
    auto b = build(net(c.layer));
    INFO("names: " << joined(names(b.model)));
    CHECK(names(b.model) == c.expected);
  }
}

TEST_CASE("naming: names are unique and each name keeps its own random stream") {
  auto small = build(net(R"({"type": "linear"}, {"type": "relu"})"));
  auto large = build(net(R"({"type": "linear"}, {"type": "relu"}, {"type": "linear"}, {"type": "layernorm"})"));
  const std::vector<std::string> n = names(large.model);
  CHECK(std::set<std::string>(n.begin(), n.end()).size() == n.size());
  // Adding layers after layers.0 leaves its values untouched (streams are keyed by name).
  CHECK_MAX_ABS_LE(param(small.model, "layers.0.weight").value, param(large.model, "layers.0.weight").value, 0.0);
  CHECK_MAX_ABS_LE(param(small.model, "layers.0.bias").value, param(large.model, "layers.0.bias").value, 0.0);
  // Different names draw different values.
  CHECK(param(large.model, "layers.0.weight").value != param(large.model, "layers.2.weight").value);
}

TEST_CASE("naming: every bias row of a report names an existing bias-like parameter, and every such parameter has a row") {
  for (const char* name : {"default", "postnorm-transformer", "causal-decoder-layer", "norm-zoo", "article4-layernorm-linear"}) {
    INFO("name := " << std::string(name));
    const std::string text = find_preset(name)->config;
    auto b = build(text);
    const json report = biaslab::test::report_of(text, true, false, false);
    std::set<std::string> rows, expected;
    for (const json& r : report.at("biases")) {
      const std::string p = r.at("param");
      CAPTURE(p);
      CHECK(rows.insert(p).second);  // no duplicate rows
      const int i = b.model.find_param(p);
      REQUIRE(i >= 0);
      CHECK(is_bias_like(b.model.params[i].role));
      CHECK(r.at("size") == b.model.params[i].value.size());
      if (!r.at("absorbed_by").is_null()) {
        INFO("absorbed_by " << r.at("absorbed_by"));
        CHECK(b.model.find_param(r.at("absorbed_by").get<std::string>()) >= 0);
      }
    }
    for (const ModelParam& p : b.model.params)
      if (is_bias_like(p.role)) expected.insert(p.name);
    CHECK(rows == expected);
    // Fold moves name parameters of the analysed network.
    for (const json& f : report.at("folds"))
      for (const json& mv : f.at("moves")) {
        INFO(f.at("rule") << ": " << mv.dump());
        CHECK(b.model.find_param(mv.at("from").get<std::string>()) >= 0);
      }
  }
}

TEST_CASE("naming: the report's layers list every layer and every parameter of the model, in order, with shapes") {
  for (const Preset& p : presets()) {
    CAPTURE(p.name);
    const std::string text = p.config;
    const auto b = build(text);
    const json r = test::report_of(text, /*folds=*/false);
    // Every model parameter (buffers too) appears once, in Model::params order, with torch's shape.
    std::vector<std::string> listed;
    long trainable = 0;
    for (const json& layer : r.at("layers")) {
      CHECK(layer.at("in").get<int>() > 0);
      CHECK(layer.at("out").get<int>() > 0);
      for (const json& q : layer.at("params")) {
        const std::string name = q.at("name");
        CHECK(name.rfind(layer.at("name").get<std::string>() + ".", 0) == 0);
        listed.push_back(name);
        const ModelParam& mp = b.model.params[test::param_index(b.model, name)];
        CHECK(q.at("role") == param_role_name(mp.role));
        const json shape = q.at("shape");
        long size = 1;
        for (const json& d : shape) size *= d.get<long>();
        CHECK(size == mp.value.size());
        // Held with torch's first dimension as rows, except a position table, held flat (T * F, 1).
        if (mp.value.cols() > 1 || shape.size() == 1) CHECK(shape[0].get<long>() == mp.value.rows());
        else CHECK(mp.value.rows() == size);
        if (mp.role != ParamRole::buffer) trainable += size;
      }
    }
    std::vector<std::string> model_names;
    for (const ModelParam& mp : b.model.params) model_names.push_back(mp.name);
    CHECK(listed == model_names);
    CHECK(trainable == r.at("summary").at("parameters").get<long>());
  }
}
