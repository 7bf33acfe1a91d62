// The report's JSON (format v1), from the analyses' typed results (analysis.hpp). Nothing else
// in the core writes report JSON: the analyses return values, and this file lays them out.
#include <algorithm>
#include <string>

#include "analysis/analysis.hpp"
#include "core/cold.hpp"

namespace biaslab::analysis {

BIASLAB_COLD json error_json(const Error& e) {
  return {{"ok", false}, {"error", {{"path", e.path}, {"message", e.message}}}};
}

namespace {

BIASLAB_COLD json bias_row_json(const BiasResult& b, const Structure& st) {
  const int n = st.size, k = st.redundant_dim;
  json row = {{"param", b.param}, {"size", b.size}};
  row["redundant_dim"] = st.determined ? json(k) : json(nullptr);
  row["redundant_dim_min"] = st.redundant_dim_min;
  row["redundant_dim_max"] = st.redundant_dim_max;
  row["verdict"] = b.verdict;
  row.update(delta_json(b.full));
  row["perturbation_rms"] = 1.0;
  if (!st.determined) {
    row["consistent"] = nullptr;
    row["undetermined_reason"] = st.stop_note;
  } else {
    row["consistent"] = b.verdict == verdict_for(k, n);
    if (!b.note.empty()) row["note"] = b.note;
  }
  row["why"] = b.why;
  row["directions"] = b.directions;
  row["absorbed_by"] = nullptr;  // filled in from the exact folds
  if (b.redundant_part) row["parts"] = {{"redundant_part", delta_json(*b.redundant_part)}};
  json structure = {{"samples", st.samples},
                    {"clusters", st.clusters},
                    {"input_independent", st.input_independent},
                    {"rank_history", st.rank_history},
                    {"inputs_history", st.inputs_history},
                    {"stop_rule", stop_rule_name(st.stop)},
                    {"stop_note", st.stop_note},
                    {"null_sigma_max", st.determined ? num(st.null_max) : json(nullptr)},
                    {"kept_sigma_min", st.determined ? num(st.kept_min) : json(nullptr)},
                    {"jacobian_at", b.jacobian_at}};
  token_rows_json(st, structure);
  if (st.kinked) {
    structure["final_run"] = st.final_run;
    structure["inactive_units"] = st.inactive_units;
    structure["rarest_unit_rate"] = num(st.rarest_unit_rate);
  }
  row["structure"] = structure;
  if (st.determined && k > 0 && k < n && k <= 4) {
    json basis = json::array();
    for (int j = 0; j < k; ++j) {
      json v = json::array();
      for (int i = 0; i < n; ++i) v.push_back(st.null_basis(i, j));
      basis.push_back(v);
    }
    row["null_basis"] = basis;
  }
  return row;
}

BIASLAB_COLD json fold_row_json(const FoldResult& f) {
  json moves = json::array();
  for (const auto& mv : f.applied.moves)
    moves.push_back({{"from", mv.from}, {"to", mv.to.empty() ? json(nullptr) : json(mv.to)}});
  json row = {{"rule", f.candidate.rule->id},
              {"title", f.candidate.rule->title},
              {"formula", f.candidate.rule->formula},
              {"where", f.applied.layers},
              {"moves", moves},
              {"params_removed", f.params_removed},
              {"dof_removed", f.applied.dof_removed}};
  row.update(delta_json(f.delta));
  row["exact"] = f.exact();
  // A rewrite the theory says is off here (zero padding) states why; the measurement shows by how much.
  if (!f.applied.inexact.empty()) row["inexact_because"] = f.applied.inexact;
  return row;
}

BIASLAB_COLD json probe_json(const Probe& p) {
  const bool holds = p.delta.finite && !p.delta.above_floor();
  // "invariant"/"equivariant" are laws and must hold; "changes" means no law applies, and the
  // probe shows the change (a degenerate input, e.g. all zeros, may still leave it unchanged).
  const bool law = p.expected != "changes";
  json j = {{"probe", p.probe}, {"layer", p.layer}, {"transform", p.transform},
            {"expected", p.expected}, {"law", law}, {"holds", holds}, {"agrees", holds == law}};
  j.update(delta_json(p.delta));
  if (!p.note.empty()) j["note"] = p.note;
  return j;
}

json numbers(const std::vector<double>& v) {
  json out = json::array();
  for (double x : v) out.push_back(num(x));
  return out;
}

}  // namespace

BIASLAB_COLD json bias_rows_json(const Context& c, const std::vector<BiasResult>& biases) {
  json rows = json::array();
  for (size_t i = 0; i < biases.size(); ++i) rows.push_back(bias_row_json(biases[i], c.structures[i]));
  return rows;
}

BIASLAB_COLD void annotate_bias_rows(json& rows, const json& fold_rows) {
  using str = const std::string&;
  for (const json& f : fold_rows) {
    if (!f["exact"].get<bool>()) continue;
    str rule = f["rule"].get_ref<str>();
    for (const json& mv : f["moves"]) {
      str from = mv["from"].get_ref<str>();
      const json& to = mv["to"];  // null: the fold drops the parameter
      if (to.is_string() && to.get_ref<str>() == from) continue;
      for (json& b : rows) {
        if (b["param"].get_ref<str>() != from) continue;
        if (to.is_string()) {
          if (b["absorbed_by"].is_null()) b["absorbed_by"] = to;
          b["absorbed_into"].push_back(to);
        }
        json& folds = b["folds"];
        if (folds.empty() || folds.back().get_ref<str>() != rule) folds.push_back(rule);
      }
    }
  }
}

BIASLAB_COLD void count_bias_rows(const json& rows, json& report) {
  int red = 0, part = 0, eff = 0, undetermined = 0, samples = 0;
  for (const json& b : rows) {
    const std::string& v = b["verdict"].get_ref<const std::string&>();
    red += v == "redundant";
    part += v == "partly_redundant";
    eff += v == "effective";
    undetermined += v == "undetermined";
    samples = std::max(samples, b["structure"]["samples"].get<int>());
  }
  json& s = report["summary"];
  s["biases"] = rows.size();
  s["redundant"] = red;
  s["partly_redundant"] = part;
  s["effective"] = eff;
  s["undetermined"] = undetermined;
  report["structural"]["max_inputs_per_bias"] = samples;
}

BIASLAB_COLD json fold_rows_json(const std::vector<FoldResult>& folds) {
  json rows = json::array();
  for (const FoldResult& f : folds) rows.push_back(fold_row_json(f));
  return rows;
}

BIASLAB_COLD json minimal_model_json(const MinimalModel& mm) {
  json applied = json::array();
  for (const auto& s : mm.steps)
    applied.push_back({{"rule", s.rule}, {"where", s.layers}, {"params_removed", s.params_removed}});
  json out = {{"params_before", mm.params_before}, {"params_after", mm.params_after}, {"folds_applied", applied}};
  out.update(delta_json(mm.delta));
  out["exact"] = mm.delta.finite && !mm.delta.above_floor();
  out["config"] = config_to_json(mm.config);
  return out;
}

BIASLAB_COLD json invariances_json(const std::vector<Probe>& probes) {
  json rows = json::array();
  for (const auto& p : probes) rows.push_back(probe_json(p));
  return rows;
}

BIASLAB_COLD json sweep_json(const Sweep& sweep) {
  json series = json::array();
  for (const SweepSeries& s : sweep.series) {
    json row = {{"param", s.param}, {"delta", numbers(s.delta)}, {"noise_floor", numbers(s.floor)}};
    if (s.has_redundant) {
      row["delta_redundant"] = numbers(s.delta_redundant);
      row["noise_floor_redundant"] = numbers(s.floor_redundant);
    }
    series.push_back(row);
  }
  return {{"sizes", sweep.sizes},
          {"direction", "random, unit RMS per entry, scaled by size"},
          {"noise_floor_note", "null where the change exceeds 1e6 x the unperturbed model's floor: "
                               "not measured there (it cannot decide anything)"},
          {"series", series}};
}

// Every layer of the tree in order (bodies and branches after their block), with its widths and every
// parameter and buffer it declares: what the page draws, without a second list of declarations.
BIASLAB_COLD void layers_json(const std::vector<LayerNode>& nodes, const std::string& seq_prefix, json& out) {
  for (size_t i = 0; i < nodes.size(); ++i) {
    const LayerNode& n = nodes[i];
    const std::string name = layer_name(seq_prefix, i);
    json params = json::array();
    for (const Param& p : n.params) {
      json shape = json::array();
      if (p.dims.rank)
        for (int d = 0; d < p.dims.rank; ++d) shape.push_back(p.dims.size[d]);
      else if (p.role == ParamRole::weight) shape = json::array({p.value.rows(), p.value.cols()});
      else shape = json::array({p.value.rows()});
      params.push_back({{"name", param_name(name, p.local)}, {"role", param_role_name(p.role)}, {"shape", shape}});
    }
    out.push_back({{"name", name}, {"type", layer_type_name(n.cfg.type)}, {"in", n.in_width},
                   {"out", n.out_width}, {"params", params}});
    for_each_sequence(n, name, [&](const std::vector<LayerNode>& seq, const std::string& prefix, int) { layers_json(seq, prefix, out); });
  }
}

BIASLAB_COLD json report_json(const Context& c, const Results& r, json timing_ms) {
  json report = {{"ok", true}, {"format", 1}, {"biaslab_version", biaslab_version()}};
  report["config"] = config_to_json(c.cfg);
  report["layers"] = json::array();
  layers_json(c.net.layers, kTopLayers, report["layers"]);
  const Eval& base = c.ev->base();
  report["noise"] = {
      {"dtype", dtype_name(c.cfg.dtype)},
      {"output_rounding", num(base.rounding)},
      {"output_max_abs", num(base.y.cwiseAbs().maxCoeff())},
      {"method", c.cfg.dtype == DType::float32
                     ? "max |float32 - float64| of the same forward, measured per comparison; floor = 8 (r1 + r2)"
                     : "max |float32 - float64| of the same forward scaled by 2^-29 (float64/float32 unit roundoff), "
                       "measured per comparison; floor = 8 (r1 + r2), and at least 8 x 2^-29 x the same difference in "
                       "float32 when that is below float32's own floor"}};
  report["biases"] = bias_rows_json(c, r.biases);
  report["folds"] = fold_rows_json(r.folds);
  annotate_bias_rows(report["biases"], report["folds"]);
  if (r.minimal) report["minimal_model"] = minimal_model_json(*r.minimal);
  if (r.invariances) report["invariances"] = invariances_json(*r.invariances);
  if (r.sweep) report["sweep"] = sweep_json(*r.sweep);

  const StructureOptions& so = c.solver->options();
  report["structural"] = {
      {"precision", "float64"},
      {"inputs_made", c.pool->made()},
      {"max_inputs_per_bias", 0},  // (count_bias_rows)
      {"tolerance", "singular value <= 1e-8 x reference (JVP of a random per-token perturbation of the same tensor)"},
      {"stopping_rules",
       "full_rank: the rank reached the bias's size; input_independent: no op on the way treats tokens "
       "differently, so one input decides; no_gain: nothing kinked on the way, and an input added no rank "
       "(the Jacobian is analytic in the input: a further random input that could add rank does so with "
       "probability 1); no_gain_kinked: a ReLU on the way, and a run of at least " +
           std::to_string(so.kink_patience) +
           " inputs (and twice the longest run before the last gain, and 3 / the share of inputs that activate the "
           "rarest unit seen active) added no rank and activated no unit for "
           "the first time (a row is undetermined when some unit was never active, or when a finite move along "
           "its null directions changes the output); budget: a limit ran out first, and the row is "
           "undetermined with the bounds found"},
      {"budget", {{"max_inputs", so.max_samples}, {"max_flops_per_bias", so.max_flops}}},
      {"steps_note", "rank_history holds the rank after each step and inputs_history the inputs stacked by then: "
                     "a step stacks as many inputs as the rate of gain says the rest of the rank needs"},
      {"sigma_note", "null_sigma_max and kept_sigma_min are relative to the reference; inputs that only confirm "
                     "the null space are stacked along it alone, so kept_sigma_min then comes from the inputs before "
                     "them (a lower bound)"}};

  int exact = 0;
  for (const FoldResult& f : r.folds) exact += f.exact();
  report["summary"] = {{"parameters", count_parameters(c.net)},
                       {"biases", 0},
                       {"redundant", 0},
                       {"partly_redundant", 0},
                       {"effective", 0},
                       {"undetermined", 0},
                       {"folds", r.folds.size()},
                       {"exact_folds", exact}};
  count_bias_rows(report["biases"], report);
  report["timing_ms"] = std::move(timing_ms);
  report["work"] = {{"forward_passes", 2 * c.ev->runs() + c.pool->made()},
                    {"forward_flops", c.forward_work},
                    {"structural_flops_estimate", c.structural_estimate},
                    {"limits", {{"structural_flops", kMaxStructuralFlops}, {"jacobian_entries", kMaxJacobianEntries}}}};
  memory_json(c.memory, c.opt.memory_budget, report["work"]);
  return report;
}

}  // namespace biaslab::analysis
