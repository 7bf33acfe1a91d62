// The analyses and the report (format v1). JSON in, JSON out; nothing here throws to the caller.
#pragma once

#include <functional>
#include <string>

#include "core/json.hpp"

#include "model/config.hpp"
#include "analysis/structure.hpp"

namespace biaslab {

// What the engines of one split may hold at once by their memory bounds, unless the caller says
// (AnalyzeOptions::split_memory): one engine's budget in the page, 2 GiB.
constexpr double kSplitMemory = 2.0 * 1024 * 1024 * 1024;

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
  // One analysis split over engines that share no memory (the page's Web Workers): each builds
  // the same model and plans the same groups of biases (analysis/parts.cpp). Part 0 analyses its
  // group and everything else (invariances, folds, the smallest model) and answers a report with
  // a "pending" section; part k > 0 answers only its group's bias rows and sweep series (a
  // "part"); merge_parts() puts them together into the report one engine would have given, the
  // same but for timing_ms.
  //   split_over > 1: the caller has that many engines; analyze() splits the analysis into as many
  //   parts as its work is worth (at most split_over, and as many as the memory bound lets run at
  //   once in split_memory bytes), calls split(count) when that is more than one, and goes on as
  //   part 0.
  //   part_count > 1: run part part_index of part_count (a helper engine, or a test).
  int split_over = 1;
  double split_memory = kSplitMemory;
  std::function<void(int count)> split;
  int part_index = 0, part_count = 1;
};

// The report for a validated config: {"ok": true, "format": 1, "biases": [...], "folds": [...],
// "minimal_model": {...}, "invariances": [...], "sweep": {...}, ...}.
Json analyze(const ExperimentConfig& config, const AnalyzeOptions& options = {});

// Parses, validates and analyses. Bad input gives {"ok": false, "error": {"path", "message"}};
// so does any internal failure (never an exception or abort).
Json analyze_text(const std::string& config_text, const AnalyzeOptions& options = {});

// The report of a split analysis: part 0's report (with its "pending" section) and the other
// parts' answers, in any order. Parts of another config, engine version or split give an error.
// Not in the page's first-load engine, which never splits.
Json merge_parts(const Json& first, const std::vector<Json>& parts);

const char* biaslab_version();

}  // namespace biaslab
