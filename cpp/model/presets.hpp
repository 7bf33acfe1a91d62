// Presets: the articles' checks and the standard transformer layers, as format-v1 configs.
#pragma once

#include <string>
#include <vector>

namespace biaslab {

struct Preset {
  std::string name;    // kebab-case id, e.g. "article2-key-bias"
  std::string title;   // a few words
  std::string claim;   // one sentence: what the experiment checks
  std::string config;  // format-v1 JSON text
};

const std::vector<Preset>& presets();
const Preset* find_preset(const std::string& name);  // nullptr when unknown

}  // namespace biaslab
