// What conv1d and conv2d share: options, checks, parameters, torch writer, fold traits. What only
// an engine that runs convolutions needs (compile step, arithmetic, sentence) is conv_kernel.cpp.
#include "layers/conv.hpp"

namespace biaslab {

namespace conv_kind {

int out_width(const LayerConfig& c, int in) { return c.out_channels > 0 ? c.out_channels : in; }

std::optional<Error> check(const LayerConfig& c, int in, const std::string& path) {
  const int out = out_width(c, in);
  const bool input = in % c.groups != 0;
  if (!input && out % c.groups == 0) return std::nullopt;
  return Error{path + ".groups", std::string("must divide ") + (input ? "the input width " : "out_channels ") +
                                     std::to_string(input ? in : out) + ", got " + std::to_string(c.groups)};
}

namespace {
// weight (out, in / groups, k...), bias (out); both U(-1/sqrt(fan_in), 1/sqrt(fan_in)) with
// fan_in = in / groups * k... as torch.
void params(const LayerConfig& c, int in, int out, std::vector<ParamSpec>& ps, bool two_d) {
  const int k = c.kernel_size, per = in / c.groups, taps = two_d ? k * k : k;
  ps.push_back({"weight", ParamRole::weight, out, per * taps, Init::fan_in, per * taps});
  if (c.bias) ps.push_back({"bias", ParamRole::bias, out, 1, Init::fan_in, per * taps});
}
}  // namespace

void params1d(const LayerConfig& c, int in, int out, std::vector<ParamSpec>& ps) { params(c, in, out, ps, false); }
void params2d(const LayerConfig& c, int in, int out, std::vector<ParamSpec>& ps) { params(c, in, out, ps, true); }

// The weight's torch shape, (out, in / groups, k) or (out, in / groups, k, k).
TorchShape shape1d(const LayerConfig& c, int in, int out, const std::string& local) {
  if (local != "weight") return {};
  return {3, {out, in / c.groups, c.kernel_size, 0}};
}
TorchShape shape2d(const LayerConfig& c, int in, int out, const std::string& local) {
  if (local != "weight") return {};
  return {4, {out, in / c.groups, c.kernel_size, c.kernel_size}};
}

std::string torch(const LayerNode& n, TorchNeeds& needs, bool two_d) {
  needs.add("conv");
  const LayerConfig& c = n.cfg;
  std::string s = two_d ? "Conv2d(" : "Conv1d(";
  s += std::to_string(n.in_width) + ", " + std::to_string(n.out_width) + ", " + std::to_string(c.kernel_size);
  if (c.padding == ConvPadding::causal) s += ", padding=\"causal\"";
  if (c.groups != 1) s += ", groups=" + std::to_string(c.groups);
  if (!c.bias) s += ", bias=False";
  if (two_d) s += ", grid=(" + std::to_string(needs.shape.grid[0]) + ", " + std::to_string(needs.shape.grid[1]) + ")";
  return s + ")";
}

// The convolution writes its output through its weight's rows and bias, as a Linear does (a
// following norm may cancel or centre the bias; the weight's rows are output channels). It
// declares no reads: a norm's shift before it meets the zero padding.
// Grouped, its weight's rows read different input channels and cannot be centred.
constexpr Projection kWrites{"", &LayerConfig::bias};
bool grouped(const LayerConfig& c) { return c.groups > 1; }
const FoldTraits folds{{}, &kWrites, nullptr, nullptr, nullptr, nullptr, grouped};

}  // namespace conv_kind
}  // namespace biaslab
