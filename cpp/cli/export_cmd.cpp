#include "export_cmd.hpp"
#include "io.hpp"

#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>

#include "model/config.hpp"
#include "model/presets.hpp"
#include "export/safetensors.hpp"
#include "export/torch_export.hpp"

namespace biaslab_cli {

const char* const kExportTorchUsage =
    "  biaslab export-torch FILE|-|--preset NAME -o SCRIPT.py [--weights FILE.safetensors]\n"
    "                       [--structure-inputs K] [--load FILE.safetensors]\n"
    "      the experiment as a standalone PyTorch script (-o - prints it). --weights also writes\n"
    "      its exact parameters, buffers, input and the engine's output for the script to load;\n"
    "      --structure-inputs K adds the engine's first K structural inputs, so the script's\n"
    "      structural analysis sees the same inputs (it draws any further ones itself); --load\n"
    "      takes parameters and input from a .safetensors file instead of the seed.\n";

namespace {

int fail(const std::string& msg) {
  std::cerr << "error: " << msg << "\n\nusage:\n" << kExportTorchUsage;
  return 2;
}

bool write_file(const std::string& path, const std::string& bytes) {
  if (path == "-") {
    std::cout << bytes;
    return static_cast<bool>(std::cout);
  }
  std::ofstream f(path, std::ios::binary);
  f << bytes;
  f.close();
  return static_cast<bool>(f);
}

}  // namespace

int cmd_export_torch(const std::vector<std::string>& args) {
  std::string file, preset, script_path, weights_path, load_path, structure_inputs = "0";
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&](std::string& into) {  // the option's argument; false when there is none
      if (i + 1 >= args.size()) return false;
      into = args[++i];
      return !into.empty();
    };
    if (a == "--preset") {
      if (!value(preset)) return fail("--preset needs a name (see `biaslab presets`)");
    } else if (a == "-o" || a == "--output") {
      if (!value(script_path)) return fail(a + " needs the path of the script to write");
    } else if (a == "--weights") {
      if (!value(weights_path)) return fail("--weights needs the path of the .safetensors file to write");
    } else if (a == "--structure-inputs") {
      if (!value(structure_inputs)) return fail("--structure-inputs needs a count");
    } else if (a == "--load") {
      if (!value(load_path)) return fail("--load needs the path of a .safetensors file to read");
    } else if (a.size() > 1 && a[0] == '-') {
      return fail("unknown option " + a);
    } else if (file.empty()) {
      file = a;
    } else {
      return fail("export-torch takes one config file");
    }
  }
  if (script_path.empty()) return fail("export-torch needs -o SCRIPT.py (or -o - for standard output)");
  if (weights_path == "-") return fail("--weights needs a file path, not standard output");
  int inputs_k = 0;
  {
    char* end = nullptr;
    const long k = std::strtol(structure_inputs.c_str(), &end, 10);
    if (*end != '\0' || k < 0 || k > 64)
      return fail("--structure-inputs takes a count from 0 to 64 (the analysis stacks at most 64), got '" +
                  structure_inputs + "'");
    inputs_k = static_cast<int>(k);
  }
  if (inputs_k > 0 && weights_path.empty()) return fail("--structure-inputs needs --weights (they go into that file)");

  std::string text, title;
  if (!preset.empty()) {
    if (!file.empty()) return fail("give a config file or --preset, not both");
    const biaslab::Preset* p = biaslab::find_preset(preset);
    if (!p) return fail("unknown preset '" + preset + "' (see `biaslab presets`)");
    text = p->config;
    title = std::string(p->name) + " (" + p->title + ")";  // names the preset, as the page does
  } else {
    if (file.empty()) return fail("export-torch needs a config file, - for standard input, or --preset NAME");
    if (!read_all(file, text)) {
      std::cerr << "error: cannot read " << file << "\n";
      return 2;
    }
  }
  const auto cfg = biaslab::parse_config_text(text);
  if (!cfg) {
    std::cerr << "error: " << cfg.error().what() << "\n";
    return 2;
  }

  biaslab::ExperimentTensors tensors;
  if (!load_path.empty()) {
    std::string bytes;
    if (!read_all(load_path, bytes)) {
      std::cerr << "error: cannot read " << load_path << "\n";
      return 2;
    }
    auto loaded = biaslab::read_experiment_tensors(*cfg, bytes);
    if (!loaded) {
      std::cerr << "error: " << load_path << ": " << loaded.error().what() << "\n";
      return 2;
    }
    tensors = std::move(loaded.value());
  } else {
    tensors.net = biaslab::build_network(*cfg);
    biaslab::sync_network(tensors.net);
    tensors.input = biaslab::draw_input(*cfg, 0);
  }
  // The engine's structural inputs are streams 0, 1, ... of the seed (TracePool).
  tensors.structure_inputs.clear();
  for (int k = 0; k < inputs_k; ++k) tensors.structure_inputs.push_back(biaslab::draw_input(*cfg, k));

  const std::string script = biaslab::export_torch_script(*cfg, {title});
  if (script.empty()) {
    std::cerr << "error: out of memory while writing the script\n";
    return 1;
  }
  if (!write_file(script_path, script)) {
    std::cerr << "error: cannot write " << script_path << "\n";
    return 2;
  }
  if (!weights_path.empty()) {
    tensors.output = biaslab::reference_output(tensors.net, tensors.input);
    const auto bytes = biaslab::write_experiment_tensors(tensors);
    if (!bytes) {
      std::cerr << "error: " << bytes.error().what() << "\n";
      return 1;
    }
    if (!write_file(weights_path, *bytes)) {
      std::cerr << "error: cannot write " << weights_path << "\n";
      return 2;
    }
  }
  if (script_path != "-")
    std::cerr << "wrote " << script_path << (weights_path.empty() ? "" : " and " + weights_path)
              << "; run: python3 " << script_path << (weights_path.empty() ? "" : " " + weights_path) << "\n";
  return 0;
}

}  // namespace biaslab_cli
