// The analyses and the report (format v1). JSON in, JSON out; nothing here throws to the caller.
#pragma once

#include <functional>
#include <string>

#include "core/json.hpp"

#include "model/config.hpp"
#include "analysis/structure.hpp"

namespace biaslab {

struct AnalyzeOptions {
  bool sweep = true;
  bool invariances = true;
  bool folds = true;
  // Called between steps: a short label and the fraction done (0..1).
  std::function<void(const std::string& step, double fraction)> progress;
  // Polled between steps; true stops the analysis with an error {path:"", message:"cancelled"}.
  std::function<bool()> cancelled;
  // Stopping rules and budgets of the structural dimension (the defaults are the documented ones;
  // the fuzz target lowers the budget so that every input stays fast under the sanitizers).
  StructureOptions structure;
  // Bytes the analysis may hold at once (0: no budget): a config whose certain allocations
  // (analysis/memory.hpp) pass it is refused before any work. The page's engine sets its
  // WebAssembly memory's maximum, the CLI the machine's memory or its control group's limit (or
  // --memory-budget).
  double memory_budget = 0;
};

// The report for a validated config: {"ok": true, "format": 1, "biases": [...], "folds": [...],
// "minimal_model": {...}, "invariances": [...], "sweep": {...}, ...}.
Json analyze(const ExperimentConfig& config, const AnalyzeOptions& options = {});

// Parses, validates and analyses. Bad input gives {"ok": false, "error": {"path", "message"}};
// so does any internal failure (never an exception or abort).
Json analyze_text(const std::string& config_text, const AnalyzeOptions& options = {});

const char* biaslab_version();

}  // namespace biaslab
