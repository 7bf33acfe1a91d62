// The wasm binding: the only file that includes <emscripten/bind.h>. Plain JSON strings cross
// the boundary in both directions (conventions 5); web/src/engine.js turns {ok:false} into a
// typed error. Nothing here throws to JS: analyze_text reports every failure as JSON.
#include <emscripten/bind.h>
#include <emscripten/val.h>

#include <string>

#include <nlohmann/json.hpp>

#include "core/analyze.hpp"
#include "core/config.hpp"
#include "core/folds.hpp"
#include "core/presets.hpp"
#include "core/torch_export.hpp"

namespace {

using emscripten::val;
using nlohmann::json;

// callbacks: undefined, or {progress(step: string, fraction: number), cancelled(): boolean},
// both optional. progress lets a worker post its state while the analysis runs synchronously;
// cancelled is polled between steps (the page uses it only where a worker can see a shared
// flag; otherwise it terminates the worker).
std::string analyze(const std::string& config_json, val callbacks) {
  biaslab::AnalyzeOptions options;
  if (callbacks.isUndefined() || callbacks.isNull()) return biaslab::analyze_text(config_json, options).dump();
  const val progress = callbacks["progress"];
  const val cancelled = callbacks["cancelled"];
  if (progress.typeOf().as<std::string>() == "function")
    options.progress = [progress](const std::string& step, double fraction) { progress(step, fraction); };
  if (cancelled.typeOf().as<std::string>() == "function")
    options.cancelled = [cancelled]() { return cancelled().as<bool>(); };
  return biaslab::analyze_text(config_json, options).dump();
}

std::string analyze_plain(const std::string& config_json) { return biaslab::analyze_text(config_json).dump(); }

std::string presets() {
  json list = json::array();
  for (const auto& p : biaslab::presets())
    list.push_back({{"name", p.name}, {"title", p.title}, {"claim", p.claim}, {"config", p.config}});
  return list.dump();
}

std::string schema() { return biaslab::config_schema().dump(); }

// The PyTorch script and its safetensors weights (base64) for a config, or {ok:false, error}.
std::string export_torch(const std::string& config_json, const std::string& title) {
  return biaslab::export_torch_bundle(config_json, title).dump();
}

std::string version() { return biaslab::biaslab_version(); }

#ifdef BIASLAB_WASM_NODE
// Every fold rule with its LaTeX formula: the page's build typesets these ahead of time (so it
// ships no TeX engine), and a report's fold rows carry the same strings.
std::string fold_rules() {
  json list = json::array();
  for (const auto& r : biaslab::fold_rules())
    list.push_back({{"id", r.id}, {"title", r.title}, {"formula", r.formula}});
  return list.dump();
}
#endif

}  // namespace

EMSCRIPTEN_BINDINGS(biaslab) {
  emscripten::function("analyze", &analyze_plain);
  emscripten::function("analyzeWithCallbacks", &analyze);
  emscripten::function("presets", &presets);
  emscripten::function("schema", &schema);
  emscripten::function("exportTorch", &export_torch);
  emscripten::function("version", &version);
#ifdef BIASLAB_WASM_NODE
  emscripten::function("foldRules", &fold_rules);
#endif
}
