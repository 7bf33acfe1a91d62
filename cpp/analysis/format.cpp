#include "analysis/format.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <vector>

namespace biaslab {

using json = Json;

std::string format_number(double v) {
  if (!std::isfinite(v)) return "n/a";
  char buf[32];
  const double a = std::fabs(v);
  if (v == 0) return "0";
  if (a >= 1e-3 && a < 1e5) std::snprintf(buf, sizeof buf, "%.4g", v);
  else std::snprintf(buf, sizeof buf, "%.2e", v);
  return buf;
}

namespace {

std::string num(const json& j) {
  if (j.is_number()) return format_number(j.get<double>());
  return "n/a";
}

std::string join(const json& arr, const char* sep) {
  std::string s;
  for (const auto& v : arr) {
    if (!s.empty()) s += sep;
    s += v.is_string() ? v.get<std::string>() : v.dump();
  }
  return s;
}

std::string verdict_text(const std::string& v) {
  if (v == "partly_redundant") return "partly redundant";
  return v;
}

// A report row's field, or null when it is missing (a const json's operator[] may not be used
// for a missing key).
const json& field(const json& row, const char* key) {
  static const json none;
  const auto it = row.find(key);
  return it == row.end() ? none : *it;
}

std::string int_text(const json& j) {
  return j.is_number_integer() ? std::to_string(j.get<long long>()) : "?";
}

bool is_undetermined(const json& b) {
  return field(b, "verdict") == "undetermined" || !field(b, "redundant_dim").is_number_integer();
}

// A table: header + rows of cells; rendered with padded columns or as Markdown.
struct Table {
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;

  std::string render(TextFormat f) const {
    std::ostringstream o;
    if (f == TextFormat::markdown) {
      auto cell = [](std::string s) {
        std::string out;
        for (char c : s) {
          if (c == '|') out += "\\|";
          else out += c;
        }
        return out;
      };
      o << "|";
      for (const auto& h : header) o << " " << cell(h) << " |";
      o << "\n|";
      for (size_t i = 0; i < header.size(); ++i) o << "---|";
      o << "\n";
      for (const auto& r : rows) {
        o << "|";
        for (const auto& c : r) o << " " << cell(c) << " |";
        o << "\n";
      }
      return o.str();
    }
    std::vector<size_t> w(header.size());
    for (size_t i = 0; i < header.size(); ++i) w[i] = header[i].size();
    for (const auto& r : rows)
      for (size_t i = 0; i < r.size() && i < w.size(); ++i) w[i] = std::max(w[i], r[i].size());
    auto line = [&](const std::vector<std::string>& cells) {
      std::string s;
      for (size_t i = 0; i < cells.size(); ++i) {
        s += cells[i];
        if (i + 1 < cells.size()) s += std::string(w[i] - cells[i].size() + 2, ' ');
      }
      while (!s.empty() && s.back() == ' ') s.pop_back();
      return s + "\n";
    };
    o << line(header);
    std::vector<std::string> rule;
    for (size_t i = 0; i < w.size(); ++i) rule.push_back(std::string(w[i], '-'));
    o << line(rule);
    for (const auto& r : rows) o << line(r);
    return o.str();
  }
};

std::string heading(const std::string& title, TextFormat f) {
  if (f == TextFormat::markdown) return "\n### " + title + "\n\n";
  std::string s = "\n" + title + "\n";
  return s;
}

}  // namespace

std::string format_redundant(const json& b) {
  const std::string of = " of " + int_text(field(b, "size"));
  if (!is_undetermined(b)) return int_text(field(b, "redundant_dim")) + of;
  // Never one number for an undetermined row: the bounds the analysis proved before it stopped.
  return int_text(field(b, "redundant_dim_min")) + "-" + int_text(field(b, "redundant_dim_max")) + of;
}

std::string format_report(const json& r, TextFormat f) {
  std::ostringstream o;
  if (!r.value("ok", false)) {
    const json e = r.value("error", json::object());
    const std::string path = e.value("path", "");
    return "error: " + (path.empty() ? "" : path + ": ") + e.value("message", std::string("unknown error")) + "\n";
  }
  const json& c = r["config"];
  const json& s = r["summary"];
  const std::string dtype = c.value("dtype", "float64");
  const json shape = c.value("shape", json::object());
  std::ostringstream head;
  head << "biaslab " << r.value("biaslab_version", "") << ": " << dtype << ", batch "
       << shape.value("batch", 0) << " x tokens " << shape.value("tokens", 0);
  if (shape.contains("grid") && shape["grid"].is_array() && shape["grid"].size() == 2)
    head << " (grid " << shape["grid"][0].get<int>() << " x " << shape["grid"][1].get<int>() << ")";
  head << " x features "
       << shape.value("features", 0) << ", " << s.value("parameters", 0) << " parameters";
  if (f == TextFormat::markdown) o << "**" << head.str() << "**\n\n";
  else o << head.str() << "\n";
  o << "Biases: " << s.value("redundant", 0) << " redundant, " << s.value("partly_redundant", 0)
    << " partly redundant, " << s.value("effective", 0) << " effective";
  // A fourth kind, named only when present: a limit stopped the structural analysis of a bias.
  if (field(s, "undetermined").is_number_integer() && s["undetermined"].get<long long>() > 0)
    o << ", " << s["undetermined"].get<long long>() << " undetermined";
  o << "; " << s.value("exact_folds", 0)
    << " of " << s.value("folds", 0) << " folds exact. Noise: output rounding "
    << num(r["noise"]["output_rounding"]) << " (" << dtype << ", measured)";
  o << (f == TextFormat::markdown ? "\n" : "\n");

  Table biases{{"param", "redundant", "verdict", "max |delta|", "noise floor", "directions", "absorbed by", "why"}, {}};
  // Marks tie a row to its note under the table: (!) measured verdict against the structure,
  // (?) undetermined (a limit stopped the structural analysis; the reason is the note).
  for (const auto& b : r["biases"]) {
    std::string verdict = verdict_text(b.value("verdict", ""));
    if (is_undetermined(b)) verdict = "undetermined (?)";
    else if (field(b, "consistent") == false) verdict += " (!)";
    const json& absorbed = field(b, "absorbed_by");
    biases.rows.push_back({b.value("param", ""), format_redundant(b), verdict, num(field(b, "max_abs_delta")),
                           num(field(b, "noise_floor")), b.value("directions", ""),
                           absorbed.is_string() ? absorbed.get<std::string>() : "-", b.value("why", "")});
  }
  o << heading("Biases (a random perturbation of RMS 1 per entry)", f) << biases.render(f);
  const char* quote = f == TextFormat::markdown ? "\n> " : "";
  for (const auto& b : r["biases"]) {
    const std::string param = b.value("param", "");
    if (is_undetermined(b)) {
      const json& reason = field(b, "undetermined_reason");
      o << quote << (f == TextFormat::markdown ? "" : "(?) ") << param << " is undetermined ("
        << format_redundant(b) << " redundant): "
        << (reason.is_string() ? reason.get<std::string>() : "a limit stopped the structural analysis before its stopping rule held")
        << "\n";
    }
    if (field(b, "note").is_string())
      o << quote << (f == TextFormat::markdown ? "" : "(!) ") << param << ": " << b["note"].get<std::string>() << "\n";
  }

  if (r.contains("folds")) {
    Table folds{{"rule", "where", "params removed", "max |delta|", "noise floor", "exact"}, {}};
    for (const auto& fo : r["folds"])
      folds.rows.push_back({fo.value("rule", ""), join(fo["where"], " + "), std::to_string(fo.value("params_removed", 0)),
                            num(fo["max_abs_delta"]), num(fo["noise_floor"]), fo.value("exact", false) ? "yes" : "NO"});
    o << heading("Folds", f);
    if (folds.rows.empty()) o << "No fold applies to this stack.\n";
    else o << folds.render(f);
    // Markdown: a blank line first, or the note reads as one more row of the table.
    for (const auto& fo : r["folds"])
      if (field(fo, "inexact_because").is_string())
        o << (f == TextFormat::markdown ? "\n" : "(!) ") << fo.value("rule", "") << " at " << join(fo["where"], " + ")
          << " is not exact: " << fo["inexact_because"].get<std::string>() << "\n";
  }
  if (r.contains("minimal_model")) {
    const json& m = r["minimal_model"];
    const long before = m.value("params_before", 0L), after = m.value("params_after", 0L);
    o << heading("Smallest equivalent model", f);
    o << before << " -> " << after << " parameters (" << (before - after) << " removed), max |delta| "
      << num(m["max_abs_delta"]) << " against a noise floor of " << num(m["noise_floor"]) << ": "
      << (m.value("exact", false) ? "exact" : "NOT exact") << "\n";
    for (const auto& a : m["folds_applied"])
      o << (f == TextFormat::markdown ? "- " : "  ") << a.value("rule", "") << " at " << join(a["where"], " + ")
        << " (-" << a.value("params_removed", 0) << ")\n";
  }
  if (r.contains("invariances")) {
    Table inv{{"probe", "layer", "expected", "holds", "max |delta|", "noise floor", "agrees"}, {}};
    for (const auto& p : r["invariances"])
      inv.rows.push_back({p.value("probe", ""), p.value("layer", ""), p.value("expected", ""),
                          p.value("holds", false) ? "yes" : "no", num(p["max_abs_delta"]), num(p["noise_floor"]),
                          p.value("agrees", false) ? "yes" : "NO"});
    o << heading("Invariances", f) << inv.render(f);
  }
  return o.str();
}

}  // namespace biaslab
