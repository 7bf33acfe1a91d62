// The wasm binding. Plain JSON text crosses the boundary in both directions (conventions 5):
// C functions take and return UTF-8 strings, and cpp/wasm/api.js (linked as --post-js) wraps
// them as the module's methods (analyze, analyzeWithCallbacks, presets, schema, exportTorch,
// version, foldRules); web/src/engine-client.js turns {ok:false} into a typed error. Nothing
// here throws to JS: analyze_text and export_torch_bundle report every failure as JSON.
// (No embind: for a handful of string functions its runtime costs more download than it saves.)
//
// One source, three modules (cpp/wasm/CMakeLists.txt): the page's engine (BIASLAB_WASM_ANALYZE:
// analyses, presets, schema), the PyTorch export that the page loads only when asked for it
// (BIASLAB_WASM_EXPORT), and the Node build for the tests and the page's build (both, plus
// foldRules). The linker drops what a module does not export.
#include <emscripten/emscripten.h>

#include <string>
#include <utility>

#include "core/analyze.hpp"
#include "core/config.hpp"
#include "core/folds.hpp"
#include "core/json.hpp"
#include "core/presets.hpp"
#include "core/torch_export.hpp"

namespace {

using json = biaslab::Json;

// The last answer: api.js copies it into a JS string before the next call.
std::string g_answer;

const char* answer(std::string text) {
  g_answer = std::move(text);
  return g_answer.c_str();
}

}  // namespace

#ifdef BIASLAB_WASM_ANALYZE
// The callbacks of the analysis in progress, set by api.js for the duration of one call.
EM_JS(void, biaslab_js_progress, (const char* step, double fraction), {
  if (Module["biaslabProgress"]) Module["biaslabProgress"](UTF8ToString(step), fraction);
});
EM_JS(int, biaslab_js_cancelled, (), {
  return Module["biaslabCancelled"] && Module["biaslabCancelled"]() ? 1 : 0;
});
#endif

extern "C" {

#ifdef BIASLAB_WASM_ANALYZE
// with_progress, with_cancel: whether api.js set the callbacks. progress lets a worker post its
// state while the analysis runs synchronously; cancelled is polled between steps (the page uses
// it only where a worker can see a shared flag; otherwise it terminates the worker).
EMSCRIPTEN_KEEPALIVE const char* biaslab_analyze(const char* config_json, int with_progress, int with_cancel) {
  biaslab::AnalyzeOptions options;
  if (with_progress)
    options.progress = [](const std::string& step, double fraction) { biaslab_js_progress(step.c_str(), fraction); };
  if (with_cancel) options.cancelled = []() { return biaslab_js_cancelled() != 0; };
  return answer(biaslab::analyze_text(config_json, options).dump());
}

EMSCRIPTEN_KEEPALIVE const char* biaslab_presets() {
  json list = json::array();
  for (const auto& p : biaslab::presets())
    list.push_back({{"name", p.name}, {"title", p.title}, {"claim", p.claim}, {"config", p.config}});
  return answer(list.dump());
}

EMSCRIPTEN_KEEPALIVE const char* biaslab_schema() { return answer(biaslab::config_schema().dump()); }
#endif

#ifdef BIASLAB_WASM_EXPORT
// The PyTorch script and its safetensors weights (base64) for a config, or {ok:false, error}.
EMSCRIPTEN_KEEPALIVE const char* biaslab_export_torch(const char* config_json, const char* title) {
  return answer(biaslab::export_torch_bundle(config_json, title).dump());
}
#endif

EMSCRIPTEN_KEEPALIVE const char* biaslab_version() { return answer(biaslab::biaslab_version()); }

#ifdef BIASLAB_WASM_NODE
// Every fold rule with its LaTeX formula: the page's build typesets these ahead of time (so it
// ships no TeX engine), and a report's fold rows carry the same strings.
EMSCRIPTEN_KEEPALIVE const char* biaslab_fold_rules() {
  json list = json::array();
  for (const auto& r : biaslab::fold_rules())
    list.push_back({{"id", r.id}, {"title", r.title}, {"formula", r.formula}});
  return answer(list.dump());
}
#endif

}  // extern "C"
