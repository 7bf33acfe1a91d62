// The wasm binding: the only file that includes <emscripten/bind.h>. Plain JSON strings cross
// the boundary in both directions (conventions 5); web/src/engine.js turns {ok:false} into a
// typed error. Nothing here throws to JS: analyze_text reports every failure as JSON.
#include <emscripten/bind.h>
#include <emscripten/val.h>

#include <string>

#include <nlohmann/json.hpp>

#include "core/analyze.hpp"
#include "core/config.hpp"
#include "core/presets.hpp"

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

std::string version() { return biaslab::biaslab_version(); }

}  // namespace

EMSCRIPTEN_BINDINGS(biaslab) {
  emscripten::function("analyze", &analyze_plain);
  emscripten::function("analyzeWithCallbacks", &analyze);
  emscripten::function("presets", &presets);
  emscripten::function("schema", &schema);
  emscripten::function("version", &version);
}
