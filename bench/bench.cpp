// Times the full analysis of every preset natively (single thread) and prints a Markdown table:
// median wall time over repeated runs, forward passes, and the throughput of those passes.
//
//   biaslab_bench [--repeat N] [--preset NAME]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "analysis/analyze.hpp"
#include "model/config.hpp"
#include "model/presets.hpp"
#include "cli/native_setup.hpp"

int main(int argc, char** argv) {
  biaslab::tune_native_allocator();
  biaslab::reserve_huge_page_heap();
  int repeat = 5;
  std::string only;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--repeat") && i + 1 < argc) repeat = std::max(1, std::atoi(argv[++i]));
    else if (!std::strcmp(argv[i], "--preset") && i + 1 < argc) only = argv[++i];
    else {
      std::fprintf(stderr, "usage: biaslab_bench [--repeat N] [--preset NAME]\n");
      return 2;
    }
  }
  std::printf("| preset | median ms | min ms | forward passes | biases ms (last run) | sweep ms (last run) | GFLOP/s (forwards) |\n");
  std::printf("|---|---:|---:|---:|---:|---:|---:|\n");
  for (const auto& p : biaslab::presets()) {
    if (!only.empty() && p.name != only) continue;
    const auto cfg = biaslab::parse_config_text(p.config);
    if (!cfg) {
      std::fprintf(stderr, "%s: %s\n", p.name.c_str(), cfg.error().what().c_str());
      return 1;
    }
    std::vector<double> ms;
    biaslab::Json last;
    for (int r = 0; r < repeat; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      last = biaslab::analyze(*cfg);
      ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      if (!last.value("ok", false)) {
        std::fprintf(stderr, "%s: %s\n", p.name.c_str(), last.dump().c_str());
        return 1;
      }
    }
    std::sort(ms.begin(), ms.end());
    const double med = ms[ms.size() / 2];
    const double passes = last["work"]["forward_passes"].get<double>();
    const double flops = last["work"]["forward_flops"].get<double>();
    std::printf("| %s | %.1f | %.1f | %.0f | %.1f | %.1f | %.2f |\n", p.name.c_str(), med, ms.front(), passes,
                last["timing_ms"]["biases"].get<double>(), last["timing_ms"]["sweep"].get<double>(),
                passes * flops / (med * 1e6));
    std::fflush(stdout);
  }
  return 0;
}
