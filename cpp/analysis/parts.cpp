// One analysis split over engines that share no memory: the page's Web Workers (analyze.hpp,
// AnalyzeOptions::split_over). The page's engine runs on one thread, and nearly all of a wide
// block's time is its biases' structures and sweeps, which do not depend on one another: each
// engine builds the same model, plans the same groups of biases here, and analyses one group.
// Compiled for each wasm module on its own: the page's first-load engine never splits (a config
// worth splitting goes to the full engine anyway).
#include <algorithm>
#include <bitset>
#include <cmath>
#include <map>
#include <numeric>

#include "analysis/analysis.hpp"
#include "core/cold.hpp"

namespace biaslab {

#ifdef BIASLAB_LEAN_ENGINE
const char* analysis::take_part(analysis::Context& c, analysis::Split&) {
  return c.opt.part_count > 1 ? "this engine does not split an analysis" : nullptr;
}
Json analysis::part_json(analysis::Context&, analysis::Results&, const analysis::Split&, Json,
                         std::chrono::steady_clock::time_point) {
  return analysis::error_json({"", "this engine does not split an analysis"});
}
void analysis::add_pending(const analysis::Context&, const analysis::Split&, Json&) {}
double analysis::analysis_work(const analysis::Context&) { return 0; }  // (one thread here)
Json merge_parts(const Json&, const std::vector<Json>&) {
  return analysis::error_json({"", "this engine does not split an analysis"});
}
#else
namespace analysis {
namespace {

// A split pays for itself from about this much work: each further engine builds the model and
// its base forwards again (about a tenth of a second in the page for a GPT-2-small block).
constexpr double kSplitMinFlops = 4e9;

// The kinds of work run at different speeds in the page's engine, and the plan weighs each flop
// by its kind's time against a Gram matrix's product (flops counted as the estimates count them;
// Node's wasm on the TinyLlama-sized block, 2026-11-29): tangents through the layers (a query
// bias's rows through L, unit directions) ran at about 9 GFLOP/s against the Gram matrices'
// 16 (a gated FFN's gate and up biases), and the sweep's forward passes (float32 first, stacked)
// at about 20.
constexpr double kTangentWeight = 1.7;
constexpr double kSweepWeight = 0.8;

// One sweep point's forward pass from the bias's op on. That op reuses the base run's products
// (forward_from's start_products): a Linear's or a convolution's bias adds nothing but itself,
// attention recomputes its scores and context only, a gated FFN its activation and product.
double sweep_point_flops(const Model& m, int op) {
  const Op& o = m.ops[static_cast<size_t>(op)];
  const double N = double(m.batch) * m.tokens;
  double own = forward_flops(m, op) - forward_flops(m, op + 1);
  if (o.kind == OpKind::linear || o.kind == OpKind::conv) own = 0;
  if (o.kind == OpKind::attention) own = 2 * 2 * N * (o.context > 0 ? o.context : m.tokens) * o.in;
  if (o.kind == OpKind::glu) own = 10 * N * o.out;
  return own + forward_flops(m, op + 1);
}

// The work of one bias, as the plan weighs it: its structure (the structural budget's estimate,
// or the Gram matrix from its layers' factors) and its sweep (11 sizes in two precisions, from
// its op on; twice that with a null space, which is not known yet).
double bias_work(const Context& c, int pi) {
  const ModelParam& p = c.model.params[static_cast<size_t>(pi)];
  const int cut = c.solver->injective_cut(p.op);
  double s = c.solver->options().structured_gram ? structured_gram_flops(c.model, pi, cut) : 0;
  if (s <= 0) s = kTangentWeight * std::min(structural_flops(c.model, p, cut), kMaxBiasFlops);
  return s + kSweepWeight * 2 * 11 * sweep_point_flops(c.model, p.op);
}

// The work the plan weighs a bias by: bias_work with its structure's inputs as expected_inputs
// (structure.hpp) expects them, not structural_flops's three (a Gram matrix from the layers'
// factors takes one input anyway).
double plan_work(const Context& c, int pi) {
  const ModelParam& p = c.model.params[static_cast<size_t>(pi)];
  const int cut = c.solver->injective_cut(p.op);
  if (c.solver->options().structured_gram && structured_gram_flops(c.model, pi, cut) > 0) return bias_work(c, pi);
  const double s = kTangentWeight * std::min(structural_flops(c.model, p, cut), kMaxBiasFlops);
  return bias_work(c, pi) - s * (1 - expected_inputs(c.model, pi, cut) / 3);
}

// A position table's bias stays with part 0: the invariance probes ask whether it cancelled.
bool stays_first(const Context& c, int pi) {
  return c.model.ops[static_cast<size_t>(c.model.params[static_cast<size_t>(pi)].op)].kind == OpKind::position;
}

// Part 0 also runs the invariance probes, the folds and the smallest model: about a tenth of
// the biases' work in the page on the GPT-2-small block (0.6 + 2.3 s against 30 + 14 s).
constexpr double kFirstPartExtra = 0.1;

// Families kept together or apart are tried in every combination up to this many families (a
// block has one per gated FFN); any further family is planned apart.
constexpr int kFamiliesTried = 8;

// The groups of `count` parts, and the heaviest group's work. A position table's bias goes to
// group 0, which starts with kFirstPartExtra of the work; then, heaviest first, each unit to the
// lightest group (the lowest index on a tie). A unit is a bias, or a family of two that share
// work one engine does once for both: a gated FFN's gate and up biases, whose Gram matrices share
// a factor (shared_gram_flops), or an attention's query and key biases, whose rows share their
// matrices (shared_query_rows_flops). Kept together, a family weighs the pair's work less that.
// Each family is tried together and apart, and the plan whose heaviest group is lightest is kept
// (on a tie, the one with fewer families together). Any grouping gives the numbers one engine
// gives: no bias's depend on which ran before it (a shared tail of the structure, a shared Gram
// matrix or a query row's matrix is the same matrices whoever makes it).
std::vector<int> plan(const Context& c, int count, double* heaviest) {
  const size_t n = c.bias_params.size();
  std::vector<int> partner(n, -1);
  std::vector<double> work(n), shared(n, 0.0);
  std::vector<size_t> families;  // the first bias of each family (its partner after it)
  double first_load = 0;
  std::vector<double> alone(n, 0.0);  // work a bias does apart from its family, beyond work[i]
  for (size_t i = 0; i < n; ++i) {
    const int pi = c.bias_params[i];
    work[i] = plan_work(c, pi);
    if (stays_first(c, pi)) first_load += work[i];
    if (stays_first(c, pi)) continue;
    const ModelParam& p = c.model.params[static_cast<size_t>(pi)];
    const int cut = c.solver->injective_cut(p.op);
    int other = -1;
    if (c.solver->options().structured_gram) shared[i] = shared_gram_flops(c.model, pi, cut, &other);
    if (other < 0 && c.solver->options().query_factors) {
      shared[i] = kTangentWeight * shared_query_rows_flops(c.model, pi, cut, &other);
      if (other >= 0) {
        const int key = pi == c.model.ops[static_cast<size_t>(p.op)].bk ? pi : other;
        shared[i] *= expected_inputs(c.model, key, cut) / 3;  // (counted for 3 inputs: the key bias's rows, its query bias's too)
        if (pi == key) alone[i] = shared[i];       // (its structural_flops leaves them to its query bias)
      }
    }
    const auto j = static_cast<size_t>(std::find(c.bias_params.begin(), c.bias_params.end(), other) - c.bias_params.begin());
    if (other >= 0 && j < n && !stays_first(c, other)) {
      partner[i] = static_cast<int>(j);
      if (j > i) families.push_back(i);
    }
  }
  first_load += kFirstPartExtra * std::accumulate(work.begin(), work.end(), 0.0);
  for (size_t i = 0; i < n; ++i) work[i] += alone[i];
  const int tried = std::min(static_cast<int>(families.size()), kFamiliesTried);

  std::vector<int> best_group;
  double best = INFINITY;
  int best_together = 0;
  for (unsigned mask = 0; mask < (1u << tried); ++mask) {
    // The units: (weight, biases); a family kept together is one unit.
    std::vector<std::pair<double, std::vector<size_t>>> units;
    std::vector<bool> in_unit(n, false);
    for (int f = 0; f < tried; ++f)
      if (mask & (1u << f)) {
        const size_t a = families[static_cast<size_t>(f)], b = static_cast<size_t>(partner[a]);
        units.push_back({work[a] + work[b] - shared[a], {a, b}});
        in_unit[a] = in_unit[b] = true;
      }
    for (size_t i = 0; i < n; ++i)
      if (!in_unit[i] && !stays_first(c, c.bias_params[i])) units.push_back({work[i], {i}});
    std::stable_sort(units.begin(), units.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    std::vector<int> group(n, 0);
    std::vector<double> load(static_cast<size_t>(count), 0.0);
    load[0] = first_load;
    for (const auto& [w, biases] : units) {
      const auto g = static_cast<int>(std::min_element(load.begin(), load.end()) - load.begin());
      for (size_t i : biases) group[i] = g;
      load[static_cast<size_t>(g)] += w;
    }
    const double heavy = *std::max_element(load.begin(), load.end());
    const int together = static_cast<int>(std::bitset<32>(mask).count());
    if (heavy < best || (heavy == best && together < best_together)) {
      best = heavy;
      best_group = std::move(group);
      best_together = together;
    }
  }
  if (heaviest) *heaviest = best;
  return best_group;
}

// How many parts the analysis is worth over `engines` engines (1: not split): the fewest whose
// heaviest group is within 10% of the lightest plan's (a further engine that shortens nothing
// only builds the model again), and only as many as fit AnalyzeOptions::split_memory by their
// memory bounds (each engine builds the whole model: a part's bound is the analysis's at most).
int parts_worth(const Context& c, int engines) {
  const double total = analysis_work(c);  // (before take_part keeps a part: every bias)
  if (total < kSplitMinFlops) return 1;
  int most = std::min(engines, static_cast<int>(c.bias_params.size()));
  if (c.memory.bytes > 0) most = std::min(most, static_cast<int>(c.opt.split_memory / c.memory.bytes));
  std::vector<double> heaviest(static_cast<size_t>(std::max(1, most)) + 1, total);
  for (int k = 2; k <= most; ++k) plan(c, k, &heaviest[static_cast<size_t>(k)]);
  const double best = *std::min_element(heaviest.begin() + 1, heaviest.end());
  for (int k = 1; k <= most; ++k)
    if (heaviest[static_cast<size_t>(k)] <= 1.1 * best) return k;
  return 1;
}

}  // namespace

BIASLAB_COLD double analysis_work(const Context& c) {
  double total = 0;
  for (size_t pi = 0; pi < c.model.params.size(); ++pi)
    if (is_bias_like(c.model.params[pi].role)) total += bias_work(c, static_cast<int>(pi));
  return total;
}

BIASLAB_COLD const char* take_part(Context& c, Split& split) {
  const AnalyzeOptions& opt = c.opt;
  split.part = opt.part_index;
  split.parts = std::max(1, opt.part_count);
  split.setup_runs = c.ev->runs();
  if (opt.part_count <= 1 && opt.split_over > 1 && opt.split) {
    split.part = 0;
    split.parts = parts_worth(c, opt.split_over);
    if (split.parts > 1) opt.split(split.parts);
  }
  if (split.part < 0 || split.part >= split.parts) return "internal error: no such part of the analysis";
  if (split.parts == 1) return nullptr;
  const std::vector<int> group = plan(c, split.parts, nullptr);
  std::vector<int> mine;
  for (size_t i = 0; i < c.bias_params.size(); ++i)
    if (group[i] == split.part) mine.push_back(c.bias_params[i]);
  c.bias_params = std::move(mine);
  return nullptr;
}

BIASLAB_COLD json part_json(Context& c, Results& r, const Split& split, json timing,
                            std::chrono::steady_clock::time_point t0) {
  if (c.opt.sweep) r.sweep = analyse_sweep(c);
  const double total = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  timing["sweep"] = total - timing["setup"].get<double>() - timing["biases"].get<double>();
  timing["total"] = total;
  json out = {{"ok", true}, {"format", 1}, {"biaslab_version", biaslab_version()}};
  out["config"] = config_to_json(c.cfg);
  json per_bias = json::object();
  for (const BiasResult& b : r.biases) per_bias[b.param] = b.solve_ms;
  timing["structure_per_bias"] = std::move(per_bias);
  json series = r.sweep ? sweep_json(*r.sweep)["series"] : json::array();
  out["part"] = {{"index", split.part},
                 {"count", split.parts},
                 {"biases", bias_rows_json(c, r.biases)},
                 {"sweep", std::move(series)},
                 {"runs", c.ev->runs() - split.setup_runs},
                 {"inputs_made", c.pool->made()},
                 {"timing_ms", std::move(timing)}};
  if (c.opt.progress) c.opt.progress("done", 1.0);
  return out;
}

BIASLAB_COLD void add_pending(const Context& c, const Split& split, json& report) {
  json order = json::array();  // every bias, in the model's order (c.bias_params holds this part's)
  for (const ModelParam& p : c.model.params)
    if (is_bias_like(p.role)) order.push_back(p.name);
  report["pending"] = {{"count", split.parts}, {"order", std::move(order)}, {"runs", c.ev->runs()}, {"inputs_made", c.pool->made()}};
}

}  // namespace analysis

namespace {

// The entries of `from` and `extra` (the other parts') named in `order` (by their "param"), in
// that order; false if a name has none (unless `optional`: then it is left out).
bool in_order(const Json& order, const Json& from, const Json& extra, Json& out, bool optional = false) {
  std::map<std::string, const Json*> by_name;
  for (const Json* list : {&from, &extra})
    for (const Json& e : *list) by_name[e.at("param").get<std::string>()] = &e;
  out = Json::array();
  for (const Json& name : order) {
    const auto it = by_name.find(name.get<std::string>());
    if (it == by_name.end()) {
      if (optional) continue;
      return false;
    }
    out.push_back(*it->second);
  }
  return true;
}

}  // namespace

BIASLAB_COLD Json merge_parts(const Json& first, const std::vector<Json>& parts) {
  using analysis::error_json;
  try {
    if (!first.is_object() || !first.value("ok", false) || !first.contains("pending")) return first;
    for (const Json& p : parts)
      if (!p.is_object() || !p.value("ok", false)) return p;  // a part's error is the analysis's
    const Json& pending = first.at("pending");
    const int count = pending.at("count").get<int>();
    if (count < 2 || count > 64) return error_json({"", "internal error: no such split of an analysis"});
    std::vector<const Json*> got(static_cast<size_t>(count), nullptr);
    for (const Json& p : parts) {
      const Json& part = p.at("part");
      const int index = part.at("index").get<int>();
      if (p.at("biaslab_version") != first.at("biaslab_version") || p.at("config") != first.at("config") ||
          part.at("count").get<int>() != count || index < 1 || index >= count || got[static_cast<size_t>(index)])
        return error_json({"", "internal error: the parts of this analysis do not belong together"});
      got[static_cast<size_t>(index)] = &p;
    }
    if (std::count(got.begin() + 1, got.end(), nullptr) > 0)
      return error_json({"", "internal error: a part of this analysis is missing"});

    Json report = first;
    report.erase("pending");
    // The other parts' rows: annotated by the folds as part 0's were (each row on its own).
    Json rows = Json::array(), series = Json::array(), solve = Json::object(), timings = Json::array();
    long runs = pending.at("runs").get<long>();
    int made = pending.at("inputs_made").get<int>();
    for (size_t k = 1; k < got.size(); ++k) {
      const Json& part = got[k]->at("part");
      for (const Json& row : part.at("biases")) rows.push_back(row);
      for (const Json& s : part.at("sweep")) series.push_back(s);
      const Json& t = part.at("timing_ms");
      for (auto it = t.at("structure_per_bias").begin(); it != t.at("structure_per_bias").end(); ++it)
        solve[it.key()] = it.value();
      timings.push_back(t);
      runs += part.at("runs").get<long>();
      made = std::max(made, part.at("inputs_made").get<int>());
    }
    analysis::annotate_bias_rows(rows, report["folds"]);
    Json merged;
    if (!in_order(pending.at("order"), report["biases"], rows, merged))
      return error_json({"", "internal error: a bias of this analysis is missing from its parts"});
    report["biases"] = std::move(merged);
    if (report.contains("sweep")) {
      in_order(pending.at("order"), report["sweep"]["series"], series, merged, true);
      report["sweep"]["series"] = std::move(merged);
    }
    analysis::count_bias_rows(report["biases"], report);
    report["structural"]["inputs_made"] = made;
    report["work"]["forward_passes"] = 2 * runs + made;
    Json& timing = report["timing_ms"];
    Json per_bias = Json::object();
    for (const Json& row : report["biases"]) {
      const std::string& name = row["param"].get_ref<const std::string&>();
      per_bias[name] = timing["structure_per_bias"].contains(name) ? timing["structure_per_bias"][name] : solve[name];
    }
    timing["structure_per_bias"] = std::move(per_bias);
    timing["parts"] = std::move(timings);
    return report;
  } catch (const std::exception& e) {
    return error_json({"", std::string("internal error: the parts of this analysis do not fit: ") + e.what()});
  }
}
#endif

}  // namespace biaslab
