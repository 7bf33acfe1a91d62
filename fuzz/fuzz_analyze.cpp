// Fuzz target: the whole analysis (cpp/core/analyze.hpp `analyze`) on small configs, with folds,
// invariances and the sweep on.
//
// Input: any bytes, read as config text. Inputs the parser rejects, and valid configs too big to
// analyse in a few milliseconds (see kMax* below), are skipped: this target looks for crashes in
// the numerics on the shapes a user can write, not for slow inputs (the limits in config.hpp and
// analyze.cpp bound those). Checks, besides "no crash, no sanitizer report, no hang":
//   - a valid config this small always analyses: the report has ok = true (an internal error, an
//     out-of-memory or a refused limit here is a finding);
//   - the report is well formed: one bias row per bias-like parameter with a known verdict and
//     0 <= redundant_dim <= size, a summary that counts the rows, and it serialises to JSON.
#include <cstddef>
#include <cstdint>
#include <string>

#include "check.hpp"
#include "core/analyze.hpp"
#include "core/config.hpp"

using namespace biaslab;

namespace {

// The pre-filter. An analysis is dominated by the structural JVPs: about (bias entries) x
// (batch * tokens * width) per layer, times a few inputs. These bounds keep one run in the
// low milliseconds under ASan/UBSan while still covering every layer type, nesting, float32,
// 1 token, 1 feature and batch 1.
constexpr long kMaxRows = 12;        // batch * tokens
constexpr long kMaxWidth = 12;       // widest layer, input included
constexpr long kMaxLayers = 8;       // counted through residual bodies
constexpr long kMaxParameters = 800;

struct Size {
  long layers = 0, widest = 0, parameters = 0;
};

void measure(const std::vector<LayerConfig>& layers, long& width, Size& s) {
  for (const LayerConfig& l : layers) {
    ++s.layers;
    const long f = width;
    switch (l.type) {
      case LayerType::linear:
        width = l.out_features > 0 ? l.out_features : f;
        s.parameters += width * f + width;
        break;
      case LayerType::attention:
        s.parameters += 4 * f * f + 4 * f;
        break;
      case LayerType::residual:
        measure(l.body, width, s);
        break;
      default:
        s.parameters += 2 * f;  // norms: at most a gain and a shift (or running statistics)
        break;
    }
    if (width > s.widest) s.widest = width;
  }
}

bool small_enough(const ExperimentConfig& c) {
  const long rows = static_cast<long>(c.shape.batch) * c.shape.tokens;
  if (rows > kMaxRows) return false;
  Size s;
  long width = c.shape.features;
  s.widest = width;
  measure(c.layers, width, s);
  return s.widest <= kMaxWidth && s.layers <= kMaxLayers && s.parameters <= kMaxParameters;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const Result<ExperimentConfig> parsed = parse_config_text(text);
  if (!parsed || !small_enough(*parsed)) return 0;

  AnalyzeOptions options;  // folds, invariances and sweep all on
  const Json report = analyze(*parsed, options);
  const std::string report_text =
      report.dump(-1, ' ', false, Json::error_handler_t::strict);  // throws on bad UTF-8

  FUZZ_CHECK(report.is_object() && report.contains("ok") && report["ok"].is_boolean(),
             "report without a boolean ok: " + report_text.substr(0, 400));
  FUZZ_CHECK(report["ok"].get<bool>(), "a small valid config fails to analyse: " +
                                           report_text.substr(0, 400) + "\n  config: " + text);
  const Json& biases = report.at("biases");
  FUZZ_CHECK(biases.is_array(), "biases is not an array");
  for (const Json& b : biases) {
    const std::string param = b.at("param").get<std::string>();
    const std::string verdict = b.at("verdict").get<std::string>();
    FUZZ_CHECK(verdict == "redundant" || verdict == "partly_redundant" || verdict == "effective",
               param + ": unknown verdict " + verdict);
    const long n = b.at("size").get<long>(), dim = b.at("redundant_dim").get<long>();
    FUZZ_CHECK(0 <= dim && dim <= n, param + ": redundant_dim " + std::to_string(dim) +
                                         " outside [0, " + std::to_string(n) + "]");
  }
  FUZZ_CHECK(report.at("summary").at("biases").get<std::size_t>() == biases.size(),
             "summary.biases does not count the rows");
  return 0;
}
