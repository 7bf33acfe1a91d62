// memory_need (memory.hpp): the analysis's certain allocations, stage by stage. Compiled for each
// wasm module: the first-load engine leaves it out.
#include "analysis/memory.hpp"

#include <algorithm>
#include <cstdio>

#include "analysis/analysis.hpp"
#include "analysis/structure.hpp"
#include "core/cold.hpp"
#include "folds/folds.hpp"

namespace biaslab {

#ifdef BIASLAB_LEAN_ENGINE
MemoryNeed memory_need(const Network&, const Model&, StructureSolver&, bool) { return {}; }
void release_for_folds(analysis::Context&) {}
void memory_json(const MemoryNeed&, double, Json&) {}
std::string memory_refusal(const MemoryNeed&, double) { return {}; }
#else

namespace {
std::string gigabytes(double bytes) {
  char buf[32];
  if (bytes < 1e9) std::snprintf(buf, sizeof buf, "%.0f MB", bytes / 1e6);
  else std::snprintf(buf, sizeof buf, "%.2f GB", bytes / 1e9);
  return buf;
}
}  // namespace

BIASLAB_COLD MemoryNeed memory_need(const Network& net, const Model& m, StructureSolver& solver, bool folds) {
  // P: every tensor's entries (buffers too: the network and the model hold them alike); V: those
  // a fold other than merge_linear_linear can remove (it drops or zeroes vectors, keeps weights).
  double P = 0, V = 0;
  for (const ModelParam& p : m.params) {
    P += double(p.value.size());
    if (p.role != ParamRole::weight) V += double(p.value.size());
  }
  // Held throughout: the compiled model's values (float64; the network lends them, analyze.cpp)
  // and the measurements' float32 copy of every parameter.
  const double held = 12.0 * P;
  MemoryNeed need{held, "layers", "the parameters, held as the compiled model's values and a float32 copy"};
  auto consider = [&](double bytes, std::string path, std::string what) {
    if (bytes > need.bytes) need = {bytes, std::move(path), std::move(what)};
  };
  // The biases: a wide MLP bias's Gram matrix from its layers' factors (n x n), which the solver
  // builds on its first input where that fits its budget; a gated FFN with both biases keeps its
  // factor A (n x n) beside it for the other one.
  for (size_t i = 0; i < m.params.size(); ++i) {
    const ModelParam& p = m.params[i];
    if (!is_bias_like(p.role) || !solver.options().structured_gram) continue;
    const int param = static_cast<int>(i), cut = solver.injective_cut(p.op);
    const double f = structured_gram_flops(m, param, cut), n = double(p.value.size());
    // (the solver builds it where this and the reference JVP before it fit the bias's budget)
    const StructureOptions& so = solver.options();
    const double ref = structural_flops_per_input(m, p, false, so.row_subset_min_flops, cut) / std::max(1.0, n);
    if (!(f > 0 && ref + f <= so.max_flops && so.max_samples > 0)) continue;
    const Op& op = m.ops[static_cast<size_t>(p.op)];
    const bool keeps = op.kind == OpKind::glu && op.bg >= 0 && op.bu >= 0;
    const std::string width = std::to_string(p.value.size());
    consider(held + (keeps ? 16.0 : 8.0) * n * n, analysis::json_path(m.ops[static_cast<size_t>(p.op)].layer),
             "the Gram matrix of " + p.name + " from its layers' factors (" + width + " x " + width +
                 (keeps ? ", and the factor it shares with the other bias of its gated FFN)" : ")"));
  }
  if (folds) {
    // The folds come last, after release_for_folds: the network alone is held then.
    const double net_only = 8.0 * P;
    const std::vector<FoldCandidate> cands = find_folds(net);
    // Each fold copies the whole network; beside it sits that copy in float32 where the copy
    // lends the model its values, else the copy compiled (kFoldsLendValues, measure.hpp).
    // (A fold that only moves vectors leaves at least P - V entries in each.)
    constexpr double kBeside = kFoldsLendValues ? 4.0 : 8.0;
    const char* const beside = kFoldsLendValues ? "the network, a fold's copy of it and that copy in float32"
                                                : "the network, a fold's copy of it and the copy compiled";
    bool any = false, moves_vectors = false, minimal = false;
    for (const FoldCandidate& c : cands) {
      any = true;
      moves_vectors = moves_vectors || std::string(c.rule->id) != "merge_linear_linear";
      minimal = minimal || c.rule->in_minimal;
    }
    if (any) {
      if (moves_vectors && (8.0 + kBeside) * (P - V) > 8.0 * P)
        consider(net_only + (8.0 + kBeside) * (P - V), "layers", beside);
      else
        consider(net_only + 8.0 * P, "layers", "the network and a fold's copy of it");
    }
    // The smallest model works on a copy of the network, and its first step copies that again.
    if (minimal) consider(net_only + 16.0 * P, "layers", "the network, the smallest model's copy of it and the copy its first fold makes");
  }
  return need;
}

BIASLAB_COLD void release_for_folds(analysis::Context& c) {
  c.pool->release();
  c.ev->release_weights();
}

BIASLAB_COLD void memory_json(const MemoryNeed& need, double budget, Json& work) {
  work["memory"] = {{"bound", need.bytes}, {"stage", need.what}, {"budget", budget}};
}

BIASLAB_COLD std::string memory_refusal(const MemoryNeed& need, double budget) {
#if defined(__EMSCRIPTEN__)
  const char* engine = "of WebAssembly memory the page's engine has";
  const char* cli = ", or run the CLI, which can use the machine's memory";
#else
  const char* engine = "this analysis may use (--memory-budget; by default the machine's memory or its control group's limit)";
  const char* cli = "";
#endif
  return "the analysis needs at least " + gigabytes(need.bytes) + " of memory at once (" + need.what +
         "), more than the " + gigabytes(budget) + " " + engine +
         (need.path == "layers" ? "; reduce the width or the number of layers" : "; reduce this layer's width") + cli;
}
#endif

}  // namespace biaslab
