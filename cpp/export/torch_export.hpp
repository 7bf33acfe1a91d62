// An experiment as a standalone, readable PyTorch script (torch and numpy only).
//
// The script builds the layer stack from torch.nn modules under the engine's parameter names
// (its state dict keys are Model::params' dotted names), loads the exact weights and input from
// a safetensors file given on its command line (see safetensors.hpp) or draws its own from
// torch's generator, and recomputes the report's core fields in format 1: per bias the
// structural redundant dimension (torch.autograd.functional.jacobian stacked over inputs), the
// perturbation delta against a measured noise floor and the verdict; and every exact fold that
// applies. `--json` prints them as JSON; the parity suite (tests/torch/) compares them with
// `biaslab analyze`.
#pragma once

#include <string>

#include "model/config.hpp"
#include "model/model.hpp"

#include "core/json.hpp"

namespace biaslab {

struct TorchExportOptions {
  std::string title;  // a few words for the docstring (a preset's title); "" for a generic one
};

// The script's text, for a validated config. Never throws; "" only when out of memory.
std::string export_torch_script(const ExperimentConfig& config, const TorchExportOptions& options = {});

// The engine's output for the values as stored (parameters and input rounded to the config's
// dtype), computed in float64: what the exported script's float64 forward must reproduce.
// input: (B*T, F); returns (B*T, F_out).
Mat reference_output(const Network& net, const Mat& input);

// Script and weights together, for front ends that hand both to a user in one step (the page's
// download button): {"ok": true, "script": text, "weights_base64": the safetensors file with the
// seed's parameters, input and the engine's output, base64}, or {"ok": false, "error": {path,
// message}} for a bad config. Never throws.
Json export_torch_bundle(const std::string& config_text, const std::string& title = "");

}  // namespace biaslab
