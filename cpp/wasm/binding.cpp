// The wasm binding, through embind. Plain JSON text crosses the boundary in both directions
// (conventions 5): every function takes and returns std::string, so embind needs no type beyond
// strings and emscripten::val, and web/src/engine-client.js turns {ok:false} into a typed error.
// Nothing here throws to JS: analyze_text and export_torch_bundle report every failure as JSON.
//
// The module's methods (the same names, arguments and answers as before embind):
//   analyze(config)                                            -> report (Node build only)
//   analyzeWithCallbacks(config[, {progress(step, fraction), cancelled(), workers, split(count),
//                        part, parts}])                      -> report, or one part of it
//   mergeParts(first, parts)                                   -> report (not in the first-load engine)
//   schema(), version()                                        -> text
//   presets()                                                  -> text (Node build only)
//   exportTorch(config[, title])                               -> {ok, script, weights_base64} or {ok:false, error}
//   foldRules()                                                -> the fold rules (Node build only)
// embind checks a call's argument count, so the optional arguments are overloads by arity.
//
// One source, four modules (cpp/wasm/CMakeLists.txt): the page's engine (BIASLAB_WASM_ANALYZE:
// analyses and the schema; without the convolution's arithmetic, its analysis answers a config
// with a convolution with needs_full_engine), the same with it (biaslab-full, fetched for the first
// config with a convolution), the PyTorch export that the page loads only when asked for it
// (BIASLAB_WASM_EXPORT), and the Node build for the tests and the page's build (both, plus
// presets and foldRules, which the page's build turns into page modules). The linker drops what
// a module does not bind.
#include <emscripten/bind.h>
#include <emscripten/heap.h>
#include <emscripten/val.h>

#include <string>

#include "analysis/analyze.hpp"
#include "model/config.hpp"
#include "folds/folds.hpp"
#include "core/json.hpp"
#include "model/presets.hpp"
#include "export/torch_export.hpp"

namespace {

using json = biaslab::Json;
using emscripten::val;

// A report as JSON text. Its strings are UTF-8 by construction (the config parser's messages
// escape what is not); should one not be, it is written with U+FFFD, never thrown to JS.
std::string text(const json& report) { return report.dump(-1, ' ', false, json::error_handler_t::replace); }

#ifdef BIASLAB_WASM_ANALYZE
// The callback named `name` of a JS object, or undefined if it has none (or it is no function).
val callback(const val& callbacks, const char* name) {
  if (callbacks.isUndefined() || callbacks.isNull()) return val::undefined();
  val f = callbacks[name];
  return f.typeOf().as<std::string>() == "function" ? f : val::undefined();
}

// The memory budget: the most the module's memory can grow to (2 GB).
biaslab::AnalyzeOptions budgeted() {
  biaslab::AnalyzeOptions options;
  options.memory_budget = static_cast<double>(emscripten_get_heap_max());
  return options;
}

// progress lets a worker post its state while the analysis runs synchronously; cancelled is
// polled between steps (the page uses it only where a worker can see a shared flag; otherwise
// it terminates the worker).
std::string analyze_with_callbacks(const std::string& config, val callbacks) {
  biaslab::AnalyzeOptions options = budgeted();
  val progress = callback(callbacks, "progress");
  val cancelled = callback(callbacks, "cancelled");
  if (!progress.isUndefined())
    options.progress = [progress](const std::string& step, double fraction) { progress(step, fraction); };
  if (!cancelled.isUndefined()) options.cancelled = [cancelled]() { return cancelled().as<bool>(); };
#ifndef BIASLAB_LEAN_ENGINE
  // A split analysis (analyze.hpp): {workers, split(count)} lets it split over that many workers
  // (the page starts the others when split is called); {part, parts} runs part `part` of `parts`.
  val split = callback(callbacks, "split");
  if (!split.isUndefined() && callbacks["workers"].isNumber()) {
    options.split_over = callbacks["workers"].as<int>();
    options.split = [split](int count) { split(count); };
  }
  if (!callbacks.isUndefined() && !callbacks.isNull() && callbacks["part"].isNumber() && callbacks["parts"].isNumber()) {
    options.part_index = callbacks["part"].as<int>();
    options.part_count = callbacks["parts"].as<int>();
  }
#endif
  return text(biaslab::analyze_text(config, options));
}

#ifndef BIASLAB_LEAN_ENGINE
// The report of a split analysis: part 0's report and the other parts' answers (a JSON array).
std::string merge_parts(const std::string& first, const std::string& parts) {
  const json f = json::parse(first, nullptr, false), p = json::parse(parts, nullptr, false);
  if (f.is_discarded() || !p.is_array())
    return json{{"ok", false}, {"error", {{"path", ""}, {"message", "internal error: the parts of a split analysis are not JSON"}}}}.dump();
  return text(biaslab::merge_parts(f, std::vector<json>(p.begin(), p.end())));
}
#endif

std::string analyze(const std::string& config) { return text(biaslab::analyze_text(config, budgeted())); }

std::string schema() { return biaslab::config_schema().dump(); }
#endif

#ifdef BIASLAB_WASM_NODE
std::string presets() {
  json list = json::array();
  for (const auto& p : biaslab::presets())
    list.push_back({{"name", p.name}, {"title", p.title}, {"claim", p.claim}, {"config", p.config}});
  return list.dump();
}
#endif

#ifdef BIASLAB_WASM_EXPORT
// The PyTorch script and its safetensors weights (base64) for a config, or {ok:false, error}.
std::string export_torch(const std::string& config, const std::string& title) {
  return text(biaslab::export_torch_bundle(config, title));
}
std::string export_torch_untitled(const std::string& config) { return export_torch(config, ""); }
#endif

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
  using emscripten::function;
#ifdef BIASLAB_WASM_ANALYZE
  function("analyzeWithCallbacks", &analyze_with_callbacks);
  function("analyzeWithCallbacks", &analyze);
  function("schema", &schema);
#ifndef BIASLAB_LEAN_ENGINE
  function("mergeParts", &merge_parts);
#endif
#endif
#ifdef BIASLAB_WASM_EXPORT
  function("exportTorch", &export_torch);
  function("exportTorch", &export_torch_untitled);
#endif
  function("version", &version);
#ifdef BIASLAB_WASM_NODE
  // The page's worker calls only analyzeWithCallbacks. The page's build reads the presets from
  // here (web/tools/presets-module.js); the page's engine carries none of their text.
  function("analyze", &analyze);
  function("presets", &presets);
  function("foldRules", &fold_rules);
#endif
}
