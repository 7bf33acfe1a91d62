// Shared helpers of the doctest suite (a header, so CMake's tests/*.cpp glob does not make it a
// unit of its own).
//
// Numeric checks go through CHECK_MAX_ABS_LE / REQUIRE_* macros below so that every comparison
// names its tolerance and a failure prints the value it measured. "Nothing changed" is always
// max|a - b| <= tol, never an approx comparison against zero (Eigen's isApprox cannot do that).
#pragma once

#include <cmath>
#include <initializer_list>
#include <map>
#include <set>
#include <string>

#include <doctest/doctest.h>

#include "analysis/analyze.hpp"
#include "analysis/structure.hpp"
#include "model/config.hpp"
#include "model/forward.hpp"
#include "core/json.hpp"
#include "model/model.hpp"

namespace biaslab::test {

using json = biaslab::Json;

// Parses a config written as JSON text; a parse error fails the test with its path and message.
inline ExperimentConfig config_from(const std::string& text) {
  const Result<ExperimentConfig> r = parse_config_text(text);
  INFO("config: " << text);
  INFO("parse error: " << (r.ok() ? std::string("none") : r.error().what()));
  REQUIRE(r.ok());
  return r.value();
}

// The report of `text`; the analysis itself must succeed.
inline json report_of(const std::string& text, bool folds = true, bool invariances = false,
                      bool sweep = false) {
  AnalyzeOptions opt;
  opt.folds = folds;
  opt.invariances = invariances;
  opt.sweep = sweep;
  const json r = analyze(config_from(text), opt);
  INFO("report: " << r.dump());
  REQUIRE(r.value("ok", false));
  return r;
}

// The report row of bias `param`; fails the test when the report has no such row.
inline const json& bias_row(const json& report, const std::string& param) {
  for (const json& b : report.at("biases"))
    if (b.at("param") == param) return b;
  std::string names;
  for (const json& b : report.at("biases")) names += b.at("param").get<std::string>() + " ";
  INFO("bias rows: " << names);
  FAIL("the report has no bias row " << param);
  return report;  // unreachable: FAIL throws
}

// The report's invariance probe named `probe` (the first, e.g. "model: permute tokens"); fails the
// test when the report has none.
inline const json& probe_row(const json& report, const std::string& probe) {
  for (const json& p : report.at("invariances"))
    if (p.at("probe") == probe) return p;
  INFO("invariances: " << report.at("invariances").dump());
  FAIL("the report has no probe " << probe);
  return report;  // unreachable: FAIL throws
}

// A report's redundant dimension per bias, and the rules of its folds.
inline std::map<std::string, int> dims(const json& r) {
  std::map<std::string, int> d;
  for (const json& b : r.at("biases")) d[b.at("param").get<std::string>()] = b.at("redundant_dim").get<int>();
  return d;
}
inline std::multiset<std::string> rules(const json& r) {
  std::multiset<std::string> s;
  for (const json& f : r.at("folds")) s.insert(f.at("rule").get<std::string>());
  return s;
}

// Compact one-line summary of a bias row, for INFO messages.
inline std::string row_text(const json& b) {
  std::string s = b.at("param").get<std::string>() + ": redundant_dim " +
                  b.at("redundant_dim").dump() + " of " + b.at("size").dump() + ", verdict " +
                  b.at("verdict").dump() + ", max_abs_delta " + b.at("max_abs_delta").dump() +
                  ", noise_floor " + b.at("noise_floor").dump() + ", directions " +
                  b.at("directions").dump() + ", consistent " + b.at("consistent").dump();
  if (b.contains("note")) s += ", note " + b.at("note").dump();
  return s;
}

// Model compiled from a config, with float64 weights ready for forward<double>.
struct Built {
  ExperimentConfig config;
  Network net;
  Model model;
};
inline Built build(const std::string& text) {
  Built b;
  b.config = config_from(text);
  b.net = build_network(b.config);
  b.model = compile(b.net);
  return b;
}

// Two structure solvers on one model, each with its own inputs: token rows forced on every bias
// they apply to (no minimum work), and never (every row). solve(p) gives both answers.
struct RowSolvers {
  static StructureOptions options(double min_flops) {
    StructureOptions o;
    o.row_subset_min_flops = min_flops;
    return o;
  }
  explicit RowSolvers(const Built& b)
      : pool_rows(b.model, b.config), pool_every(b.model, b.config), rows(b.model, pool_rows, options(0)),
        every(b.model, pool_every, options(INFINITY)) {}
  std::pair<Structure, Structure> solve(int p) { return {rows.solve(p), every.solve(p)}; }
  TracePool pool_rows, pool_every;
  StructureSolver rows, every;
};

// Index of a model parameter by its dotted name; fails the test when it does not exist.
inline int param_index(const Model& m, const std::string& name) {
  const int i = m.find_param(name);
  INFO("parameter " << name);
  REQUIRE(i >= 0);
  return i;
}

// The central difference (f(p + h dir) - f(p - h dir)) / (2 h) of the float64 output with respect
// to parameter `pi` along `dir` (its shape).
inline Mat central_difference(const Model& m, const Mat& x, int pi, const Mat& dir, double h = 1e-6) {
  const Weights<double> w = cast_weights<double>(m);
  const Mat plus = m.params[pi].value + h * dir, minus = m.params[pi].value - h * dir;
  return (forward<double>(m, w, x, {pi, &plus}) - forward<double>(m, w, x, {pi, &minus})) / (2 * h);
}

template <class A, class B>
double max_abs_diff(const A& a, const B& b) {
  if (a.rows() != b.rows() || a.cols() != b.cols()) return HUGE_VAL;
  if (a.size() == 0) return 0.0;
  return (a.template cast<double>() - b.template cast<double>()).cwiseAbs().maxCoeff();
}

// Row-major (rows, cols) double matrix from a brace list, for hand-written values.
inline Mat mat(int rows, int cols, std::initializer_list<double> v) {
  Mat m(rows, cols);
  auto it = v.begin();
  for (int i = 0; i < rows; ++i)
    for (int j = 0; j < cols; ++j) m(i, j) = *it++;
  return m;
}
inline Mat col(std::initializer_list<double> v) { return mat(static_cast<int>(v.size()), 1, v); }

}  // namespace biaslab::test

// max |actual - expected| <= tol, with both matrices and the measured value printed on failure.
#define CHECK_MAX_ABS_LE(actual, expected, tol)                                             \
  do {                                                                                      \
    const double max_abs_err_ = ::biaslab::test::max_abs_diff((actual), (expected));        \
    INFO(#actual " vs " #expected ": max abs diff " << max_abs_err_ << " (tolerance "       \
                                                   << (tol) << ")");                        \
    INFO("actual:\n" << (actual) << "\nexpected:\n" << (expected));                         \
    CHECK(max_abs_err_ <= (tol));                                                           \
  } while (0)

// A scalar bound with the measured value printed: CHECK_LE_TOL(measured, bound, "what").
#define CHECK_LE_TOL(measured, bound, what)                                                  \
  do {                                                                                      \
    const double measured_ = (measured);                                                    \
    const double bound_ = (bound);                                                          \
    INFO(what << ": measured " << measured_ << ", must be <= " << bound_);                 \
    CHECK(measured_ <= bound_);                                                             \
  } while (0)

#define CHECK_GT_TOL(measured, bound, what)                                                  \
  do {                                                                                      \
    const double measured_ = (measured);                                                    \
    const double bound_ = (bound);                                                          \
    INFO(what << ": measured " << measured_ << ", must be > " << bound_);                  \
    CHECK(measured_ > bound_);                                                              \
  } while (0)
