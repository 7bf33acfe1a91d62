// Tests of the text renderings of a report (terminal table, Markdown), on hand-made reports so
// that rows the engine rarely produces (undetermined, inconsistent) are covered exactly.
#include <doctest/doctest.h>

#include <sstream>
#include <string>
#include <vector>

#include "analysis/format.hpp"
#include "core/json.hpp"

using namespace biaslab;
using json = biaslab::Json;

namespace {

// One attention layer, 96 wide: the query bias hit the structural budget (undetermined), the key
// bias is redundant, the value bias is effective but flagged as inconsistent with its structure.
const char* const kReport = R"({
  "ok": true, "format": 1, "biaslab_version": "test",
  "config": {"version": 1, "seed": 1, "dtype": "float64",
             "shape": {"batch": 1, "tokens": 2, "features": 96},
             "layers": [{"type": "attention", "num_heads": 1}]},
  "noise": {"dtype": "float64", "output_rounding": 2.2e-16},
  "summary": {"parameters": 37248, "biases": 3, "redundant": 1, "partly_redundant": 0,
              "effective": 1, "undetermined": 1, "folds": 0, "exact_folds": 0},
  "biases": [
    {"param": "layers.0.q_proj.bias", "size": 96,
     "redundant_dim": null, "redundant_dim_min": 0, "redundant_dim_max": 32,
     "verdict": "undetermined",
     "undetermined_reason": "the structural budget (2 GFLOP) ran out while the rank was still rising: 64 inputs stacked, rank 64 of 96; more inputs could raise it further",
     "max_abs_delta": 0.731, "mean_abs_delta": 0.2, "rel_delta": 0.5, "noise_floor": 3.1e-15,
     "consistent": null, "why": "the structural analysis stopped at a limit", "directions": "undetermined",
     "absorbed_by": null,
     "structure": {"samples": 64, "rank_history": [2, 4, 64], "stop_rule": "budget", "stop_note": "the budget ran out"}},
    {"param": "layers.0.k_proj.bias", "size": 96,
     "redundant_dim": 96, "redundant_dim_min": 96, "redundant_dim_max": 96, "verdict": "redundant",
     "max_abs_delta": 4.4e-16, "mean_abs_delta": 1e-16, "rel_delta": 1e-16, "noise_floor": 3.1e-15,
     "consistent": true, "why": "softmax is shift invariant", "directions": "all", "absorbed_by": null,
     "structure": {"samples": 2, "rank_history": [0, 0], "stop_rule": "no_gain", "stop_note": "no gain"}},
    {"param": "layers.0.v_proj.bias", "size": 96,
     "redundant_dim": 0, "redundant_dim_min": 0, "redundant_dim_max": 0, "verdict": "effective",
     "max_abs_delta": 1.5, "mean_abs_delta": 0.5, "rel_delta": 0.9, "noise_floor": 3.1e-15,
     "consistent": false, "note": "a made-up note", "why": "adds to every token", "directions": "none",
     "absorbed_by": "layers.0.o_proj.bias",
     "structure": {"samples": 2, "rank_history": [96, 96], "stop_rule": "full_rank", "stop_note": "full rank"}}
  ]
})";

// The line of `text` that starts with `prefix` ("" when there is none).
std::string line_starting(const std::string& text, const std::string& prefix) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (line.rfind(prefix, 0) == 0) return line;
  return "";
}

}  // namespace

TEST_CASE("format: an undetermined bias shows its bounds, never a single redundant dimension") {
  const json report = json::parse(kReport);
  const json& q = report["biases"][0];
  CHECK(format_redundant(q) == "0-32 of 96");
  CHECK(format_redundant(report["biases"][1]) == "96 of 96");
  CHECK(format_redundant(report["biases"][2]) == "0 of 96");

  SUBCASE("a row without bounds still shows no number") {
    json bare = q;
    bare.erase("redundant_dim_min");
    bare.erase("redundant_dim_max");
    CHECK(format_redundant(bare) == "?-? of 96");
  }
  SUBCASE("redundant_dim null is undetermined even if the verdict field is missing") {
    json bare = q;
    bare.erase("verdict");
    CHECK(format_redundant(bare) == "0-32 of 96");
  }
}

TEST_CASE("format: the terminal table marks an undetermined row and gives its reason under the table") {
  const json report = json::parse(kReport);
  const std::string text = format_report(report, TextFormat::table);
  INFO(text);
  CHECK(text.find("Biases: 1 redundant, 0 partly redundant, 1 effective, 1 undetermined; 0 of 0 folds exact.") !=
        std::string::npos);

  const std::string header = line_starting(text, "param ");
  const std::string q_row = line_starting(text, "layers.0.q_proj.bias ");
  REQUIRE(!header.empty());
  REQUIRE(!q_row.empty());
  // Columns are padded: each value starts under its header.
  CHECK(q_row.substr(header.find("redundant"), 10) == "0-32 of 96");
  CHECK(q_row.substr(header.find("verdict"), 16) == "undetermined (?)");
  CHECK(q_row.find("0.731") != std::string::npos);  // the measured perturbation is still shown
  CHECK(line_starting(text, "layers.0.k_proj.bias ").substr(header.find("redundant"), 9) == "96 of 96 ");
  CHECK(line_starting(text, "layers.0.v_proj.bias ").find("effective (!)") != std::string::npos);

  CHECK(line_starting(text, "(?) ") ==
        "(?) layers.0.q_proj.bias is undetermined (0-32 of 96 redundant): the structural budget (2 GFLOP) ran out "
        "while the rank was still rising: 64 inputs stacked, rank 64 of 96; more inputs could raise it further");
  CHECK(line_starting(text, "(!) ") == "(!) layers.0.v_proj.bias: a made-up note");
  // No line anywhere claims a single redundant dimension for the query bias.
  CHECK(text.find("null of 96") == std::string::npos);
  CHECK(text.find(" 0 of 96  undetermined") == std::string::npos);
}

TEST_CASE("format: the Markdown table shows the bounds, the verdict and the reason as a quote") {
  const json report = json::parse(kReport);
  const std::string md = format_report(report, TextFormat::markdown);
  INFO(md);
  CHECK(md.find("| param | redundant | verdict |") != std::string::npos);
  CHECK(md.find("| layers.0.q_proj.bias | 0-32 of 96 | undetermined (?) | 0.731 | 3.10e-15 | undetermined | - | "
                "the structural analysis stopped at a limit |") != std::string::npos);
  CHECK(md.find("| layers.0.k_proj.bias | 96 of 96 | redundant |") != std::string::npos);
  CHECK(md.find("\n> layers.0.q_proj.bias is undetermined (0-32 of 96 redundant): the structural budget") !=
        std::string::npos);
  CHECK(md.find("\n> layers.0.v_proj.bias: a made-up note\n") != std::string::npos);
  CHECK(md.find("1 effective, 1 undetermined;") != std::string::npos);
}

TEST_CASE("format: a report without undetermined rows reads as before") {
  json report = json::parse(kReport);
  report["biases"].erase(0);
  report["summary"]["undetermined"] = 0;
  const std::string text = format_report(report, TextFormat::table);
  INFO(text);
  CHECK(text.find("Biases: 1 redundant, 0 partly redundant, 1 effective; 0 of 0 folds exact.") != std::string::npos);
  CHECK(text.find("undetermined") == std::string::npos);
  CHECK(text.find("(?)") == std::string::npos);

  SUBCASE("an older report (no undetermined count, no bounds) too") {
    report["summary"].erase("undetermined");
    for (auto& b : report["biases"]) {
      b.erase("redundant_dim_min");
      b.erase("redundant_dim_max");
    }
    const std::string old = format_report(report, TextFormat::table);
    CHECK(old == text);
  }
}
