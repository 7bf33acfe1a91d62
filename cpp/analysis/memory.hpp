// The memory an analysis holds at once, bounded from below before any work, and the budget it is
// held to: the page's WebAssembly memory (2 GB), natively the machine's.
//
// The bound counts only allocations the analysis is certain to make, and to hold at the same
// time. Until the folds: every parameter as its compiled model's value (8 bytes; the network
// lends the model its values, and has them back for the folds) and the float32 copy the
// measurements run (4), and the Gram matrix a wide MLP bias takes from its
// layers' factors (with the gated FFN's shared factor beside it). The folds come last, with the
// network alone held (release_for_folds): a fold's copy of the whole network and, beside it, its
// float32 copy (where the copy lends the folded model its values: kFoldsLendValues, natively)
// or the compiled folded model (wasm); the smallest model's working copy and the copy its first step makes.
// A config over the budget by this bound would certainly not fit and is refused with the stage
// that needs it; one under it may still run out (an allocation the bound does not count), and
// then the analysis reports that it ran out of memory.
#pragma once

#include <string>

#include "core/json.hpp"

namespace biaslab {

struct Model;
struct Network;
class StructureSolver;
namespace analysis {
struct Context;
}

struct MemoryNeed {
  double bytes = 0;   // a lower bound on the bytes held at once (0: not estimated)
  std::string path;   // where it is needed: a layer (a bias's Gram matrix) or "layers"
  std::string what;   // the stage, in words
};

// The largest of the stages' bounds: the biases (with `solver`'s plans), the folds and the
// smallest model (where `folds`). 0 bytes in the page's first-load engine, which hands a config
// of more than kLeanParameters parameters on to the full engine.
MemoryNeed memory_need(const Network& net, const Model& m, StructureSolver& solver, bool folds);

// Before the folds, the last step (after return_values has given the network its values back):
// frees the structure's traces and the measurements' float32 copy, which the folds (on the
// network) do not use. Nothing in the first-load engine.
void release_for_folds(analysis::Context& c);

// The refusal's message for a need over `budget` bytes.
std::string memory_refusal(const MemoryNeed& need, double budget);

// The report's work.memory: {bound, stage, budget}, the bound and the budget in bytes (budget 0:
// none). Nothing in the first-load engine.
void memory_json(const MemoryNeed& need, double budget, Json& work);

// Parameters over which the first-load engine hands a config on (it has no memory bound).
constexpr long kLeanParameters = 1L << 20;

}  // namespace biaslab
