// Human-readable renderings of a report: a terminal table and GitHub-flavoured Markdown.
#pragma once

#include <string>

#include "core/json.hpp"

namespace biaslab {

enum class TextFormat { table, markdown };

// Renders every section present in the report (biases, folds, minimal model, invariances).
// An error report ({ok:false}) renders as one line naming the path.
std::string format_report(const Json& report, TextFormat format);

// A bias row's redundant dimension as the tables print it: "k of n", or for an undetermined
// row (a limit stopped its structural analysis) the proven bounds "min-max of n", never one number.
std::string format_redundant(const Json& bias_row);

// A number the way the tables print it: 3 significant digits, scientific when small or large.
std::string format_number(double v);

}  // namespace biaslab
