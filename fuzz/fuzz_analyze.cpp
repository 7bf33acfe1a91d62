// Fuzz target: the whole analysis (cpp/analysis/analyze.hpp `analyze`) on small configs, with folds,
// invariances and the sweep on.
//
// Input: any bytes, read as config text. Inputs the parser rejects, and valid configs too big to
// analyse in tens of milliseconds (see kMax* below), are skipped: this target looks for crashes
// in the numerics on the shapes a user can write, not for slow inputs (the limits in config.hpp
// and analyze.cpp bound those). Checks, besides "no crash, no sanitizer report, no hang":
//   - a valid config this small always analyses: the report has ok = true (an internal error, an
//     out-of-memory or a refused limit here is a finding);
//   - the report is well formed: every bias row has a known verdict and 0 <= redundant_dim <=
//     size (or, when undetermined, a null redundant_dim), 0 <= redundant_dim_min <= _max <= size
//     when given, the summary counts the rows, and the report serialises to JSON.
// Byte-level mutations of JSON almost never give a valid config (about 1 in 500), so a custom
// mutator also edits valid inputs as configs (a layer inserted, removed, wrapped in a residual
// block, an option or the shape changed) and prints them back; see LLVMFuzzerCustomMutator.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "check.hpp"
#include "analysis/analyze.hpp"
#include "model/model.hpp"
#include "layers/layer.hpp"
#include "model/config.hpp"

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

void measure(const std::vector<LayerConfig>& layers, long& width, long tokens, Size& s) {
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
      case LayerType::glu: {  // gate, up (f -> hidden) and down (hidden -> f): its hidden width's
        // biases are its largest (hidden directions); the parameter bound keeps them small
        const long h = l.hidden > 0 ? l.hidden : 4 * f;
        s.parameters += 3 * h * f + (l.bias ? 2 * h + f : 0);
        break;
      }
      case LayerType::conv1d:
      case LayerType::conv2d: {
        width = l.out_channels > 0 ? l.out_channels : f;
        const long taps = l.type == LayerType::conv2d ? long(l.kernel_size) * l.kernel_size : l.kernel_size;
        s.parameters += width * (f / std::max(1, l.groups)) * taps + (l.bias ? width : 0);
        break;
      }
      case LayerType::pos_embedding:
        s.parameters += tokens * f;
        break;
      case LayerType::residual:
        measure(l.body, width, tokens, s);
        break;
      case LayerType::parallel:
        for (const auto& branch : l.branches) {
          long w = f;
          measure(branch, w, tokens, s);
        }
        break;
      default:
        s.parameters += 2 * f;  // norms: at most a gain and a shift (or running statistics)
        break;
    }
    if (width > s.widest) s.widest = width;
  }
}

// How many inputs reached the analysis, printed at exit (scripts/fuzz.sh reports it): most
// mutated inputs are not valid configs, and executions alone would overstate the analyses run.
struct Tally {
  long inputs = 0, valid = 0, analysed = 0;
  ~Tally() {
    if (inputs > 0)
      std::fprintf(stderr, "stat::analysed_configs: %ld of %ld inputs (%ld valid configs)\n",
                   analysed, inputs, valid);
  }
} tally;

bool small_enough(const ExperimentConfig& c) {
  // A cross-attention context adds its rows to the input's.
  const long rows = static_cast<long>(c.shape.batch) * (c.shape.tokens + context_tokens(c.layers));
  if (rows > kMaxRows) return false;
  Size s;
  long width = c.shape.features;
  s.widest = width;
  measure(c.layers, width, c.shape.tokens, s);
  return s.widest <= kMaxWidth && s.layers <= kMaxLayers && s.parameters <= kMaxParameters;
}

// ---------------------------------------------------------------------------------------------
// Structure-aware mutation
// ---------------------------------------------------------------------------------------------

// Share of mutations made on the config rather than on its bytes. At 10 %, about 1 input in 80
// is analysed, which already takes most of the time (an analysis takes about 35 ms under the
// sanitizers; a rejected input a few microseconds); 25 % gave no more analyses per minute, only
// fewer executions. A million executions take about 10 minutes on one core.
constexpr unsigned kStructuredPercent = 10;

using Rng = std::minstd_rand;

template <class T, std::size_t N>
T pick(Rng& rng, const T (&values)[N]) {
  return values[rng() % N];
}

bool flip(bool b) { return !b; }

double random_eps(Rng& rng) {
  // The default, the extremes the schema allows (eps in (0, 1]) and a subnormal.
  const double values[] = {1e-5, 1e-6, 1e-12, 0.1, 1.0, 1e-300, 5e-324};
  return pick(rng, values);
}

void mutate_options(LayerConfig& l, Rng& rng) {
  const int widths[] = {0, 1, 2, 3, 4, 6, 8, 12};
  switch (l.type) {
    case LayerType::linear:
      if (rng() % 2) l.out_features = pick(rng, widths);
      else l.bias = flip(l.bias);
      break;
    case LayerType::layernorm:
      switch (rng() % 3) {
        case 0: l.elementwise_affine = flip(l.elementwise_affine); break;
        case 1: l.bias = flip(l.bias); break;
        default: l.eps = random_eps(rng);
      }
      break;
    case LayerType::rmsnorm:
      if (rng() % 2) l.elementwise_affine = flip(l.elementwise_affine);
      else l.eps = random_eps(rng);
      break;
    case LayerType::batchnorm:
      switch (rng() % 3) {
        case 0: l.mode = l.mode == BatchNormMode::train ? BatchNormMode::eval : BatchNormMode::train; break;
        case 1: l.affine = flip(l.affine); break;
        default: l.eps = random_eps(rng);
      }
      break;
    case LayerType::groupnorm:
      switch (rng() % 3) {
        case 0: l.num_groups = 1 + static_cast<int>(rng() % 6); break;
        case 1: l.affine = flip(l.affine); break;
        default: l.eps = random_eps(rng);
      }
      break;
    case LayerType::instancenorm:
      if (rng() % 2) l.affine = flip(l.affine);
      else l.eps = random_eps(rng);
      break;
    case LayerType::attention:
      switch (rng() % 7) {
        case 0: l.num_heads = 1 + static_cast<int>(rng() % 6); break;
        case 1: l.q_bias = flip(l.q_bias); break;
        case 2: l.k_bias = flip(l.k_bias); break;
        case 3: l.v_bias = flip(l.v_bias); break;
        case 4: l.o_bias = flip(l.o_bias); break;
        case 5: l.causal = flip(l.causal); break;
        default: l.rope = flip(l.rope);
      }
      break;
    case LayerType::gelu:
      l.approximate = l.approximate == GeluApprox::none ? GeluApprox::tanh : GeluApprox::none;
      break;
    case LayerType::conv1d:
    case LayerType::conv2d:
      switch (rng() % 5) {
        case 0: l.out_channels = pick(rng, widths); break;
        case 1: l.kernel_size = 1 + static_cast<int>(rng() % 5); break;
        case 2: l.padding = l.padding == ConvPadding::same ? ConvPadding::causal : ConvPadding::same; break;
        case 3: l.groups = 1 + static_cast<int>(rng() % 6); break;
        default: l.bias = flip(l.bias);
      }
      break;
    default:  // kinds without options (relu, silu, softmax) and residual (its body is edited apart)
      break;
  }
}

LayerConfig random_layer(Rng& rng) {
  // Every registered kind but those holding layers (mutate_config builds residual and parallel
  // blocks).
  std::vector<LayerType> types;
  for (const LayerKind* k : layer_kinds())
    if (!k->has_body && k->type != LayerType::parallel) types.push_back(k->type);
  LayerConfig l = make_layer(types[rng() % types.size()]);
  if (rng() % 2) mutate_options(l, rng);
  return l;
}

// Every layer list of the config: the top level, each residual body and each parallel branch.
void layer_lists(std::vector<LayerConfig>& list, std::vector<std::vector<LayerConfig>*>& out) {
  out.push_back(&list);
  for (LayerConfig& l : list) {
    if (layer_kind(l.type).has_body) layer_lists(l.body, out);
    for (auto& branch : l.branches) layer_lists(branch, out);
  }
}

// One edit. Widths and divisibility are not kept on purpose: the parser must reject the misfits.
void mutate_config(ExperimentConfig& c, Rng& rng) {
  std::vector<std::vector<LayerConfig>*> lists;
  layer_lists(c.layers, lists);
  std::vector<LayerConfig>& list = *lists[rng() % lists.size()];
  const std::size_t at = rng() % list.size();  // lists are never empty (parser: min 1 layer)
  const int features[] = {1, 2, 3, 4, 6, 8, 12};
  switch (rng() % 10) {
    case 0:
      switch (rng() % 4) {
        case 0: c.shape.batch = 1 + static_cast<int>(rng() % 3); break;
        case 1: c.shape.tokens = 1 + static_cast<int>(rng() % 6); break;
        case 2:  // an image grid (its tokens follow, or not: the parser must say so), or none
          if (rng() % 3 == 0) {
            c.shape.grid.clear();
          } else {
            c.shape.grid = {1 + static_cast<int>(rng() % 3), 1 + static_cast<int>(rng() % 3)};
            if (rng() % 4) c.shape.tokens = c.shape.grid[0] * c.shape.grid[1];
          }
          break;
        default: c.shape.features = pick(rng, features);
      }
      break;
    case 1:
      if (rng() % 2) c.dtype = c.dtype == DType::float32 ? DType::float64 : DType::float32;
      else c.seed = rng();
      break;
    case 2:
    case 3:
      mutate_options(list[at], rng);
      break;
    case 4:
      list.insert(list.begin() + static_cast<std::ptrdiff_t>(rng() % (list.size() + 1)), random_layer(rng));
      break;
    case 5:
      if (list.size() > 1) list.erase(list.begin() + static_cast<std::ptrdiff_t>(at));
      break;
    case 6: {  // wrap in a residual block, or in a parallel block beside a random layer
      const bool parallel = rng() % 2;
      LayerConfig block = make_layer(parallel ? LayerType::parallel : LayerType::residual);
      if (parallel) {
        block.branches.push_back({std::move(list[at])});
        block.branches.push_back({random_layer(rng)});
      } else {
        block.body.push_back(std::move(list[at]));
      }
      list[at] = std::move(block);
      break;
    }
    case 7:
      list.insert(list.begin() + static_cast<std::ptrdiff_t>(at), list[at]);
      break;
    case 8:
      std::swap(list[at], list[rng() % list.size()]);
      break;
    default:
      list[at] = random_layer(rng);
  }
}

}  // namespace

extern "C" std::size_t LLVMFuzzerMutate(std::uint8_t* data, std::size_t size, std::size_t max_size);

extern "C" std::size_t LLVMFuzzerCustomMutator(std::uint8_t* data, std::size_t size,
                                               std::size_t max_size, unsigned int seed) {
  Rng rng(seed);
  if (rng() % 100 < kStructuredPercent) {
    Result<ExperimentConfig> parsed =
        parse_config_text(std::string(reinterpret_cast<const char*>(data), size));
    if (parsed) {
      ExperimentConfig c = std::move(parsed).value();
      for (unsigned edits = 1 + rng() % 3; edits > 0; --edits) mutate_config(c, rng);
      const std::string text = config_to_json(c).dump();
      if (text.size() <= max_size) {
        std::memcpy(data, text.data(), text.size());
        return text.size();
      }
    }
  }
  return LLVMFuzzerMutate(data, size, max_size);
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  ++tally.inputs;
  const Result<ExperimentConfig> parsed = parse_config_text(text);
  if (!parsed) return 0;
  ++tally.valid;
  if (!small_enough(*parsed)) return 0;
  ++tally.analysed;

  AnalyzeOptions options;  // folds, invariances and sweep all on
  // A ReLU's stopping rule may stack thousands of inputs (a unit active for one input in
  // hundreds), which under ASan/UBSan took over 10 s on a 6-token stack; a budget of 512 inputs
  // keeps every run short and sends such rows down the undetermined path, which is checked too.
  options.structure.max_samples = 512;
  const Json report = analyze(*parsed, options);
  const std::string report_text =
      report.dump(-1, ' ', false, Json::error_handler_t::strict);  // throws on bad UTF-8

  FUZZ_CHECK(report.is_object() && report.contains("ok") && report["ok"].is_boolean(),
             "report without a boolean ok: " + report_text.substr(0, 400));
  FUZZ_CHECK(report["ok"].get<bool>(), "a small valid config fails to analyse: " +
                                           report_text.substr(0, 400) + "\n  config: " + text);
  FUZZ_CHECK(report.contains("biases") && report["biases"].is_array(), "biases is not an array");
  const Json& biases = report["biases"];
  for (const Json& b : biases) {
    FUZZ_CHECK(b.is_object() && b.value("param", Json()).is_string() &&
                   b.value("verdict", Json()).is_string() && b.value("size", Json()).is_number_integer(),
               "a bias row without param, verdict or size: " + b.dump());
    const std::string param = b["param"].get<std::string>(), verdict = b["verdict"].get<std::string>();
    const long n = b["size"].get<long>();
    const auto within = [&](const char* key) {
      const Json v = b.value(key, Json());
      FUZZ_CHECK(v.is_number_integer() && 0 <= v.get<long>() && v.get<long>() <= n,
                 param + ": " + key + " " + v.dump() + " is not an integer in [0, " + std::to_string(n) + "]");
      return v.get<long>();
    };
    // "undetermined": a stopping rule left bounds instead of one answer; redundant_dim is null.
    FUZZ_CHECK(verdict == "redundant" || verdict == "partly_redundant" || verdict == "effective" ||
                   verdict == "undetermined",
               param + ": unknown verdict " + verdict);
    if (verdict == "undetermined")
      FUZZ_CHECK(b.value("redundant_dim", Json(0)).is_null(), param + ": undetermined with a redundant_dim");
    else
      within("redundant_dim");
    if (b.contains("redundant_dim_min") || b.contains("redundant_dim_max"))
      FUZZ_CHECK(within("redundant_dim_min") <= within("redundant_dim_max"), param + ": bounds cross");
  }
  const Json summary = report.value("summary", Json());
  FUZZ_CHECK(summary.is_object() && summary.value("biases", Json()) == biases.size(),
             "summary.biases does not count the rows");
  return 0;
}
