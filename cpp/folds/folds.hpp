// Exact folds: re-parameterisations that leave the output unchanged, as rewrite rules on the
// layer tree. Each rule matches a layer and its successor in one sequence (the top level, a
// residual body or a parallel's branch) and rewrites parameter values and the config together.
#pragma once

#include <string>
#include <vector>

#include "model/model.hpp"

namespace biaslab {

// One step down the layer tree: layer `layer` of the current sequence, then its body (branch -1)
// or its branch `branch` (parallel).
struct FoldStep {
  int layer = 0;
  int branch = -1;
};

struct FoldSite {
  std::vector<FoldStep> path;  // from the top level to the sequence
  int index = 0;               // the first layer the rule matches, in that sequence
};
// The sequence `site` lives in.
std::vector<LayerNode>& site_sequence(std::vector<LayerNode>& top, const FoldSite& site);
const std::vector<LayerNode>& site_sequence(const std::vector<LayerNode>& top, const FoldSite& site);

struct ParamMove {
  std::string from;  // dotted name in the original network
  std::string to;    // where its effect goes; "" = dropped (or projected away)
};

struct FoldApplied {
  std::string rule;
  std::vector<std::string> layers;  // dotted layer names involved
  std::vector<ParamMove> moves;
  int dof_removed = 0;              // degrees of freedom removed (also for centring)
  // Why the rewrite is not exact here (zero padding at the borders), "" when it is. The
  // analysis still measures it; the smallest model never uses it.
  std::string inexact;
};

struct FoldRule {
  const char* id;
  const char* title;
  const char* formula;  // LaTeX
  bool in_minimal;      // used when building the smallest equivalent model
  bool (*match)(const std::vector<LayerNode>& seq, int i);
  void (*apply)(std::vector<LayerNode>& seq, int i, const std::string& prefix, FoldApplied& out);
};

const std::vector<FoldRule>& fold_rules();

struct FoldCandidate {
  const FoldRule* rule;
  FoldSite site;
};
// Every (rule, site) that applies, in document order.
std::vector<FoldCandidate> find_folds(const Network& net);
// Applies one fold to a copy of `net` (names in `out` refer to `net`).
Network apply_fold(const Network& net, const FoldCandidate& c, FoldApplied& out);

std::string site_prefix(const FoldSite& site);  // "layers.0.body." for path {{0, -1}}

}  // namespace biaslab
