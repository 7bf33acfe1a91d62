// Structural redundancy of a bias: the dimension of the space of bias changes that leave the
// output unchanged for EVERY input, i.e. the null space of the Jacobian d(output)/d(bias)
// stacked over independent random inputs until its rank stops growing (one input can fake null
// directions: with few tokens a head sees only T-1 key differences).
//
// Computed in float64 whatever the config's dtype. Cost savers, none of which changes the
// answer: trailing per-token linear maps that are injective are dropped (they cannot create
// null directions); the Jacobian's columns are split into clusters that touch disjoint output
// entries (exact zeros, e.g. one attention head per bias direction), each ranked on its own;
// each cluster keeps only a small triangular factor R between inputs (QR of [R; J_k]); an input
// that would end the loop and leaves the clusters as they were is stacked only along the null
// space found so far (rows cannot lower a rank, so that is where it could grow); and a
// bias whose tangent meets no token-dependent op (e.g. a bias at the end, or before a Linear at
// the end) has a Jacobian 1_N (x) V that is the same for every input: V is ranked once.
#pragma once

#include <functional>
#include <vector>

#include "core/jvp.hpp"

namespace biaslab {

// Forward traces of independent inputs (streams 1, 2, ...), made on demand and shared by all
// biases of one analysis.
class TracePool {
 public:
  TracePool(const Model& m, const ExperimentConfig& cfg) : m_(m), cfg_(cfg) {}
  const Trace& get(int k);
  int made() const { return static_cast<int>(traces_.size()); }

 private:
  const Model& m_;
  const ExperimentConfig& cfg_;
  Weights<double> w_;
  std::vector<Trace> traces_;
};

struct StructureOptions {
  double tol_rel = 1e-8;    // a singular value below tol_rel * reference scale is null
  // Stop once an input adds no rank (with generic random inputs a further input that could
  // add rank does so with probability 1), after at least min_samples inputs.
  int patience = 1;
  int min_samples = 2;
  int max_samples = 64;
  long chunk_elements = 1L << 20;  // tangent batch size in doubles (8 MiB)
};

struct Structure {
  int size = 0;
  int redundant_dim = 0;
  Mat null_basis;            // (size, redundant_dim), orthonormal columns
  int samples = 0;           // inputs stacked
  int clusters = 0;          // independent column groups the rank was split into
  int cut = 0;               // op index where the Jacobian was taken (trailing map dropped)
  double reference = 0;      // Frobenius norm of the JVP of a random per-token perturbation
  double null_max = 0;       // largest singular value counted as null, / reference
  double kept_min = 0;       // smallest singular value counted as non-null, / reference (0: none)
  std::vector<int> rank_history;  // rank after each input
  bool input_independent = false;  // the Jacobian does not depend on the input (one suffices)
};

// Caches per-analysis work shared by biases (trailing maps and their injectivity).
class StructureSolver {
 public:
  StructureSolver(const Model& m, TracePool& pool, StructureOptions opt = {})
      : m_(m), pool_(pool), opt_(opt) {}
  Structure solve(int param, const std::function<bool()>& cancelled = {});

 private:
  int injective_cut(int start);
  const Model& m_;
  TracePool& pool_;
  StructureOptions opt_;
  std::vector<std::pair<int, int>> cut_cache_;  // (start, usable cut)
};

}  // namespace biaslab
