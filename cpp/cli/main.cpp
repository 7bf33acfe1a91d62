// biaslab command-line interface: the same core as the page, natively.
//
//   biaslab analyze FILE|- [--format table|json|markdown] [--no-sweep] [--no-invariances]
//   biaslab analyze --preset NAME [...]
//   biaslab presets | preset NAME | schema | version
//
// Exit codes: 0 success, 2 bad input (config, arguments, unknown preset), 1 internal error.
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "analysis/analyze.hpp"
#include "model/config.hpp"
#include "analysis/format.hpp"
#include "model/presets.hpp"
#include "export_cmd.hpp"
#include "io.hpp"
#include "native_setup.hpp"

namespace {

const char* kUsage = R"(biaslab: which biases and affine parameters does a layer stack need?

usage:
  biaslab analyze FILE|- [--format table|json|markdown] [--no-sweep] [--no-invariances] [--no-folds]
                 [--memory-budget GB]   (refuse what needs more; default: this machine's memory
                                         or its control group's limit)
  biaslab analyze --preset NAME [options as above]
  biaslab export-torch FILE|-|--preset NAME -o SCRIPT.py [--weights FILE.safetensors] [--load FILE]
  biaslab presets              list the presets (the articles' checks)
  biaslab preset NAME          print a preset's config (format v1 JSON)
  biaslab schema               print the config schema (layer types, options, defaults, limits)
  biaslab version

The report lists, per bias, how many of its directions are structurally redundant and what a
real perturbation does against a measured noise floor; every exact fold; the smallest
equivalent model; and the invariances the theory predicts.
)";

int usage_error(const std::string& msg) {
  std::cerr << "error: " << msg << "\n\n" << kUsage;
  return 2;
}

// Progress on stderr once an analysis has run for more than a second.
struct Progress {
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point last = start;
  bool tty = isatty(fileno(stderr));
  bool shown = false;

  void operator()(const std::string& step, double fraction) {
    const auto now = std::chrono::steady_clock::now();
    const double elapsed = std::chrono::duration<double>(now - start).count();
    if (elapsed < 1.0) return;
    if (!tty && std::chrono::duration<double>(now - last).count() < 1.0 && step != "done") return;
    last = now;
    char buf[64];
    std::snprintf(buf, sizeof buf, "[%3d%%] %5.1fs  ", static_cast<int>(fraction * 100), elapsed);
    if (tty) std::cerr << "\r\033[K" << buf << step << std::flush;
    else std::cerr << buf << step << "\n";
    shown = true;
  }
  void finish() {
    if (shown && tty) std::cerr << "\n";
  }
};

int cmd_analyze(const std::vector<std::string>& args) {
  std::string file, preset, format = "table";
  biaslab::AnalyzeOptions opt;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--format" || a == "-f") {
      if (i + 1 >= args.size()) return usage_error("--format needs a value: table, json or markdown");
      format = args[++i];
    } else if (a.rfind("--format=", 0) == 0) {
      format = a.substr(9);
    } else if (a == "--preset") {
      if (i + 1 >= args.size()) return usage_error("--preset needs a name (see `biaslab presets`)");
      preset = args[++i];
    } else if (a == "--no-sweep") {
      opt.sweep = false;
    } else if (a == "--no-invariances") {
      opt.invariances = false;
    } else if (a == "--no-folds") {
      opt.folds = false;
    } else if (a == "--memory-budget") {
      if (i + 1 >= args.size()) return usage_error("--memory-budget needs a size in GB, e.g. 2.147483648 (the page's)");
      char* end = nullptr;
      const double gb = std::strtod(args[++i].c_str(), &end);
      if (end == args[i].c_str() || *end != '\0' || !(gb > 0) || gb > 1e6)
        return usage_error("--memory-budget takes a size in GB above 0, e.g. 2.147483648 (the page's), not '" + args[i] + "'");
      opt.memory_budget = gb * 1e9;
    } else if (a.size() > 1 && a[0] == '-' && a != "-") {
      return usage_error("unknown option " + a);
    } else if (file.empty()) {
      file = a;
    } else {
      return usage_error("analyze takes one config file");
    }
  }
  if (format != "table" && format != "json" && format != "markdown")
    return usage_error("unknown format '" + format + "': use table, json or markdown");
  if (opt.memory_budget == 0) opt.memory_budget = biaslab::machine_memory();
  std::string text;
  if (!preset.empty()) {
    if (!file.empty()) return usage_error("give a config file or --preset, not both");
    const biaslab::Preset* p = biaslab::find_preset(preset);
    if (!p) return usage_error("unknown preset '" + preset + "' (see `biaslab presets`)");
    text = p->config;
  } else {
    if (file.empty()) return usage_error("analyze needs a config file, - for standard input, or --preset NAME");
    if (!biaslab_cli::read_all(file, text)) {
      std::cerr << "error: cannot read " << file << "\n";
      return 2;
    }
  }
  Progress progress;
  opt.progress = [&](const std::string& s, double f) { progress(s, f); };
  const biaslab::Json report = biaslab::analyze_text(text, opt);
  progress.finish();
  const bool ok = report.value("ok", false);
  if (format == "json") {
    // (Strings are UTF-8 by construction; should one not be, U+FFFD rather than an exception.)
    std::cout << report.dump(2, ' ', false, biaslab::Json::error_handler_t::replace) << "\n";
  } else if (ok) {
    std::cout << biaslab::format_report(report, format == "markdown" ? biaslab::TextFormat::markdown
                                                                     : biaslab::TextFormat::table);
  } else {
    std::cerr << biaslab::format_report(report, biaslab::TextFormat::table);
  }
  if (ok) return 0;
  // A config error names a path or is a parse error; anything else is internal.
  const std::string msg = report["error"].value("message", "");
  return msg.rfind("internal error", 0) == 0 ? 1 : 2;
}

}  // namespace

int main(int argc, char** argv) {
  biaslab::tune_native_allocator();
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    std::cout << kUsage;
    return args.empty() ? 2 : 0;
  }
  const std::string cmd = args[0];
  args.erase(args.begin());
  try {
    if (cmd == "analyze") {
      biaslab::reserve_huge_page_heap();
      return cmd_analyze(args);
    }
    if (cmd == "export-torch") return biaslab_cli::cmd_export_torch(args);
    if (cmd == "presets") {
      for (const auto& p : biaslab::presets())
        std::cout << p.name << std::string(p.name.size() < 28 ? 28 - p.name.size() : 1, ' ') << p.title << "\n"
                  << std::string(28, ' ') << p.claim << "\n";
      return 0;
    }
    if (cmd == "preset") {
      if (args.size() != 1) return usage_error("preset takes one name (see `biaslab presets`)");
      const biaslab::Preset* p = biaslab::find_preset(args[0]);
      if (!p) return usage_error("unknown preset '" + args[0] + "' (see `biaslab presets`)");
      std::cout << p->config << "\n";
      return 0;
    }
    if (cmd == "schema") {
      std::cout << biaslab::config_schema().dump(2) << "\n";
      return 0;
    }
    if (cmd == "version" || cmd == "--version") {
      std::cout << "biaslab " << biaslab::biaslab_version() << "\n";
      return 0;
    }
  } catch (const std::exception& e) {
    std::cerr << "internal error: " << e.what() << "\n";
    return 1;
  }
  return usage_error("unknown command '" + cmd + "'");
}
