// Helpers the analyses share (analysis.hpp).
#include <cctype>

#include "analysis/analysis.hpp"
#include "core/cold.hpp"
#include "core/rng.hpp"

namespace biaslab::analysis {

Vec unit_rms_direction(std::uint64_t seed, const std::string& key, int n) {
  Rng rng(seed, key);
  Vec u(n);
  for (int i = 0; i < n; ++i) u(i) = rng.normal();
  return u * (std::sqrt(double(n)) / u.norm());
}

Next next_op(const Model& m, int op_index) {
  Next n;
  for (size_t i = op_index + 1; i < m.ops.size(); ++i) {
    if (m.ops[i].kind == OpKind::branch_next) {  // the next branch reads the block's input
      i = static_cast<size_t>(m.ops[i].partner) - 1;
      continue;
    }
    if (m.ops[i].kind == OpKind::residual_end) {
      n.through_residual = true;
      continue;
    }
    if (m.ops[i].kind == OpKind::position) continue;  // adds a table: a tangent passes unchanged
    n.op = &m.ops[i];
    return n;
  }
  return n;
}

std::string local_name(const Model& m, const ModelParam& p) {
  return p.name.substr(m.ops[p.op].layer.size() + 1);  // "<layer>.<local>"
}

BIASLAB_COLD json delta_json(const Delta& d) {
  return {{"max_abs_delta", d.finite ? num(d.max_abs) : json(nullptr)},
          {"mean_abs_delta", d.finite ? num(d.mean_abs) : json(nullptr)},
          {"rel_delta", d.finite ? num(d.rel) : json(nullptr)},
          {"noise_floor", num(d.floor)}};
}

std::string json_path(const std::string& dotted) {
  std::string out, part;
  std::vector<std::string> parts;
  for (char ch : dotted + ".") {
    if (ch == '.') {
      parts.push_back(part);
      part.clear();
    } else {
      part += ch;
    }
  }
  for (const auto& p : parts) {
    if (!p.empty() && std::isdigit(static_cast<unsigned char>(p[0]))) out += "[" + p + "]";
    else out += (out.empty() ? "" : ".") + p;
  }
  return out;
}

// Where the Gram matrix from the layers' factors can answer on the first input, its work (where it
// does not certify, the stacked rows' work is held to the bias's own budget at run time).
double structural_flops(const Model& m, const ModelParam& p, int cut) {
  if (cut < 0) cut = injective_cut(m, p.op);
  const int param = static_cast<int>(&p - m.params.data());
  if (const double f = structured_gram_flops(m, param, cut); f > 0) return f;
  // A query or key bias whose rows go through its heads' L: their work (query_rows_estimate).
#ifndef BIASLAB_LEAN_ENGINE
  if (const double f = query_rows_estimate(m, param, cut); f > 0) return f;
#endif
  return 3.0 * structural_flops_per_input(m, p, true, kRowSubsetMinFlops, cut);
}

}  // namespace biaslab::analysis
