// The memory budget (analysis/memory.hpp): the bound on what an analysis holds at once, and the
// refusal, before any work, of a config whose bound passes the budget. (That the bound is below
// what the analysis really holds is checked in wasm, where the module's memory is its peak:
// web/test/node/engine.test.js.)
#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "support.hpp"

namespace biaslab::test {
namespace {

json run(const std::string& text, double budget, bool folds = true) {
  AnalyzeOptions opt;
  opt.sweep = false;
  opt.invariances = false;
  opt.folds = folds;
  opt.memory_budget = budget;
  return analyze(config_from(text), opt);
}

double bound_of(const json& report) {
  INFO("report: " << report.dump().substr(0, 2000));
  REQUIRE(report.value("ok", false));
  return report.at("work").at("memory").at("bound").get<double>();
}

// A LayerNorm before an MLP: its gain and shift fold into the Linear after it (a fold the
// smallest model takes), so every stage copies the parameters.
const char* kMlp = R"({"version": 1, "shape": {"batch": 2, "tokens": 4, "features": 64},
  "layers": [{"type": "layernorm"}, {"type": "linear", "out_features": 256}, {"type": "gelu"},
             {"type": "linear", "out_features": 64}]})";

// A wide MLP's first bias, whose Gram matrix (3072 x 3072, 75 MB) comes from its layers' factors.
const char* kWide = R"({"version": 1, "shape": {"batch": 32, "tokens": 1, "features": 768},
  "layers": [{"type": "linear", "out_features": 3072}, {"type": "gelu"}, {"type": "linear", "out_features": 768},
             {"type": "layernorm"}]})";

}  // namespace

TEST_CASE("memory: the network lends its values to the model compiled without them, and gets them back") {
  const std::string text = R"({"version": 1, "shape": {"batch": 2, "tokens": 3, "features": 8},
    "layers": [{"type": "residual", "body": [{"type": "layernorm"}, {"type": "attention", "num_heads": 2}]},
               {"type": "parallel", "branches": [[{"type": "linear"}], [{"type": "glu", "hidden": 16, "bias": true}]]}]})";
  Built b = build(text);  // b.model: compiled with copies
  Network net = b.net;
  Model lent = compile(net, false);
  REQUIRE(lent.params.size() == b.model.params.size());
  for (const ModelParam& p : lent.params) CHECK(p.value.size() == 0);
  lend_values(lent);
  for (size_t i = 0; i < lent.params.size(); ++i) {
    CAPTURE(lent.params[i].name);
    CHECK(lent.params[i].value == b.model.params[i].value);
    CHECK(lent.params[i].source->value.size() == 0);  // moved, not copied
  }
  return_values(lent);
  for (const ModelParam& p : lent.params) CHECK(p.value.size() == 0);
  const Model again = compile(net);
  for (size_t i = 0; i < again.params.size(); ++i) CHECK(again.params[i].value == b.model.params[i].value);
  // One source lent twice would leave the second parameter empty (and lose the value on its
  // return): refused.
  Model twice = compile(net, false);
  twice.params.push_back(twice.params.front());
  CHECK_THROWS_AS(lend_values(twice), std::logic_error);
}

TEST_CASE("memory: the parameters' copies bound an analysis, which is refused past its budget") {
  const json r = run(kMlp, 0);
  const double bound = bound_of(r);
  const double params = r.at("summary").at("parameters").get<double>();
  // The folds come last, with the network alone held: the smallest model's copy of it and the
  // copy its first fold makes, 8 + 8 + 8 bytes a parameter (more than the 12 held until then).
  INFO("bound " << bound << " bytes, " << params << " parameters");
  CHECK(bound == 24.0 * params);
  CHECK(r.at("work").at("memory").at("budget").get<double>() == 0.0);
  // Without the folds only what is held throughout remains: the compiled model, whose values the
  // network lends it (not a copy of them), and the float32 copy: 8 + 4 bytes a parameter.
  CHECK(bound_of(run(kMlp, 0, false)) == 12.0 * params);

  const json refused = run(kMlp, bound - 1);
  INFO("refused: " << refused.dump());
  REQUIRE_FALSE(refused.value("ok", true));
  CHECK(refused.at("error").at("path") == "layers");
  const std::string msg = refused.at("error").at("message").get<std::string>();
  CHECK(msg.find("the network, the smallest model's copy of it") != std::string::npos);
  CHECK(msg.find("more than the") != std::string::npos);

  const json fits = run(kMlp, bound);
  CHECK(fits.value("ok", false));
  CHECK(fits.at("work").at("memory").at("budget").get<double>() == bound);
}

TEST_CASE("memory: a fold the smallest model does not take copies the network and runs the copy in float32") {
  // A Linear's bias before a LayerNorm: centring it is a fold (its mean goes), but not one the
  // smallest model takes. The network, its copy and that copy in float32 (natively the copy
  // lends the compiled model its values), less the vectors the fold could remove from the last
  // two: 8 P + 12 (P - V).
  const char* centre = R"({"version": 1, "shape": {"batch": 2, "tokens": 4, "features": 64},
    "layers": [{"type": "linear"}, {"type": "layernorm"}]})";
  const json r = run(centre, 0);
  const double bound = bound_of(r);
  double P = 0, V = 0;
  for (const json& layer : r.at("layers"))
    for (const json& p : layer.at("params")) {
      double size = 1;
      for (const json& d : p.at("shape")) size *= d.get<double>();
      P += size;
      if (p.at("role") != "weight") V += size;
    }
  INFO("bound " << bound << " bytes, P " << P << ", V " << V << ", stage " << r.at("work").at("memory").at("stage"));
  std::vector<std::string> rules;
  for (const json& f : r.at("folds")) rules.push_back(f.at("rule").get<std::string>());
  CHECK(std::find(rules.begin(), rules.end(), "centre_bias_before_norm") != rules.end());
  CHECK(bound == 8.0 * P + 12.0 * (P - V));
  CHECK(bound > 16.0 * P);
}

TEST_CASE("memory: a wide bias's Gram matrix is refused with its layer") {
  const json r = run(kWide, 0, false);
  const double bound = bound_of(r);
  const double params = r.at("summary").at("parameters").get<double>();
  INFO("bound " << bound << " bytes, " << params << " parameters");
  CHECK(bound == 12.0 * params + 8.0 * 3072 * 3072);
  CHECK(r.at("work").at("memory").at("stage").get<std::string>().find("Gram matrix of layers.0.bias") != std::string::npos);
  const json refused = run(kWide, bound - 1, false);
  INFO("refused: " << refused.dump());
  REQUIRE_FALSE(refused.value("ok", true));
  CHECK(refused.at("error").at("path") == "layers[0]");
}

TEST_CASE("memory: a gated FFN's first bias keeps the factor it shares beside its Gram matrix") {
  const char* glu = R"({"version": 1, "shape": {"batch": 32, "tokens": 1, "features": 256},
    "layers": [{"type": "glu", "hidden": 2048, "activation": "silu", "bias": true}, {"type": "rmsnorm"}]})";
  const json r = run(glu, 0, false);
  const double bound = bound_of(r);
  const double params = r.at("summary").at("parameters").get<double>();
  INFO("bound " << bound << " bytes, " << params << " parameters, stage " << r.at("work").at("memory").at("stage"));
  CHECK(bound == 12.0 * params + 16.0 * 2048 * 2048);
}

}  // namespace biaslab::test
