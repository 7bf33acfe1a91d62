// conv1d and conv2d: zero-padded stride-1 convolutions over the tokens (1-D) or the image grid
// (2-D). The forward against a direct loop over the definition (torch's cross-correlation,
// padding "same" = (k - 1) // 2 zeros before, "causal" = k - 1 before), the torch shape of the
// weight, and what a convolution does to the biases around it. The folds with BatchNorm:
// test_folds.cpp; derivatives: test_jvp.cpp; against torch itself: tests/torch.
#include <string>

#include "../support.hpp"
#include "export/safetensors.hpp"

using namespace biaslab;
using namespace biaslab::test;

namespace {

constexpr double kTol = 1e-12;

std::string grid_net(int batch, int H, int W, int features, const std::string& layers) {
  return R"({"version": 1, "seed": 4, "shape": {"batch": )" + std::to_string(batch) + R"(, "features": )" +
         std::to_string(features) + R"(, "grid": [)" + std::to_string(H) + ", " + std::to_string(W) +
         R"(]}, "layers": [)" + layers + "]}";
}

// y[s, (h, w), o] = b[o] + sum over c in o's group, taps (i, j) of W[o, c, i, j] x[s, (h + i - ph, w + j - pw), c]
// with zeros outside the grid; conv1d is the grid 1 x T with a 1 x k kernel.
Mat direct_conv(const Mat& x, const Mat& Wflat, const Mat* b, int samples, int H, int W, int kh, int kw, bool causal,
                int groups) {
  const int in = static_cast<int>(x.cols()), out = static_cast<int>(Wflat.rows());
  const int cin = in / groups, cout = out / groups;
  const int ph = causal ? kh - 1 : (kh - 1) / 2, pw = causal ? kw - 1 : (kw - 1) / 2;
  Mat y = Mat::Zero(x.rows(), out);
  for (int s = 0; s < samples; ++s)
    for (int h = 0; h < H; ++h)
      for (int w = 0; w < W; ++w)
        for (int o = 0; o < out; ++o) {
          double acc = b ? (*b)(o, 0) : 0.0;
          for (int c = 0; c < cin; ++c)
            for (int i = 0; i < kh; ++i)
              for (int j = 0; j < kw; ++j) {
                const int hh = h + i - ph, ww = w + j - pw;
                if (hh < 0 || hh >= H || ww < 0 || ww >= W) continue;
                acc += Wflat(o, (c * kh + i) * kw + j) * x(s * H * W + hh * W + ww, (o / cout) * cin + c);
              }
          y(s * H * W + h * W + w, o) = acc;
        }
  return y;
}

}  // namespace

TEST_CASE("conv: the forward pass is the convolution's definition, in every padding and grouping") {
  struct Case {
    const char* layer;
    int H, W, kh, kw;
    bool causal;
    int groups, features, out;
  };
  const Case cases[] = {
      {R"({"type": "conv1d"})", 1, 7, 1, 3, false, 1, 4, 4},
      {R"({"type": "conv1d", "kernel_size": 4})", 1, 7, 1, 4, false, 1, 4, 4},  // even: one more zero after
      {R"({"type": "conv1d", "kernel_size": 5, "padding": "causal", "out_channels": 6, "groups": 2})", 1, 7, 1, 5, true, 2, 4, 6},
      {R"({"type": "conv1d", "kernel_size": 9})", 1, 7, 1, 9, false, 1, 3, 3},  // wider than the sequence
      {R"({"type": "conv2d", "kernel_size": 3, "groups": 4})", 3, 4, 3, 3, false, 4, 4, 4},  // depthwise
      {R"({"type": "conv2d", "kernel_size": 2, "padding": "causal", "out_channels": 2, "bias": false})", 3, 4, 2, 2, true, 1, 4, 2},
      {R"({"type": "conv2d", "kernel_size": 4, "out_channels": 6, "groups": 2})", 2, 5, 4, 4, false, 2, 4, 6},
  };
  for (const Case& c : cases) {
    CAPTURE(c.layer);
    // conv1d runs over the tokens; its config needs no grid (tokens = H * W with H = 1).
    const std::string text = grid_net(2, c.H, c.W, c.features, c.layer);
    auto b = build(text);
    const Model& m = b.model;
    REQUIRE(m.ops.size() == 1);
    const Mat x = draw_input(b.config, 0);
    const Mat& W = m.params[0].value;
    const Mat* bias = m.params.size() > 1 ? &m.params[1].value : nullptr;
    const Mat expected = direct_conv(x, W, bias, 2, c.H, c.W, c.kh, c.kw, c.causal, c.groups);
    CHECK_MAX_ABS_LE(forward<double>(m, cast_weights<double>(m), x), expected, kTol);
    CHECK(b.net.layers[0].out_width == c.out);
  }
}

TEST_CASE("conv: the weight has torch's shape (out, in / groups, k[, k]) in the state dict") {
  auto b = build(grid_net(1, 2, 3, 8, R"({"type": "conv1d", "kernel_size": 3, "groups": 2, "out_channels": 4},
                                          {"type": "conv2d", "kernel_size": 5, "groups": 4})"));
  const Param& w1 = b.net.layers[0].params[0];
  const Param& w2 = b.net.layers[1].params[0];
  CHECK(w1.dims.list() == std::vector<std::int64_t>{4, 4, 3});
  CHECK(w1.value.rows() == 4);
  CHECK(w1.value.cols() == 4 * 3);
  CHECK(w2.dims.list() == std::vector<std::int64_t>{4, 1, 5, 5});
  CHECK(w2.value.cols() == 25);
  // The tensors file carries the shapes, and reads back.
  ExperimentTensors t{b.net, draw_input(b.config, 0), {}, {}};
  const Result<std::string> bytes = write_experiment_tensors(t);
  REQUIRE(bytes.ok());
  const Result<TensorFile> file = read_safetensors(*bytes);
  REQUIRE(file.ok());
  REQUIRE(file->find("layers.1.weight") != nullptr);
  CHECK(file->find("layers.1.weight")->shape == std::vector<std::int64_t>{4, 1, 5, 5});
  CHECK(file->find("layers.0.bias")->shape == std::vector<std::int64_t>{4});
  const Result<ExperimentTensors> back = read_experiment_tensors(b.config, *bytes);
  REQUIRE(back.ok());
  CHECK_MAX_ABS_LE(back->net.layers[1].params[0].value, w2.value, 0.0);
}

TEST_CASE("conv: the bias before a norm, and the padding of a convolution on the way") {
  // A conv bias is constant over the tokens: BatchNorm (train) removes it whole, GroupNorm each
  // group's mean, LayerNorm (over the channels) its mean.
  SUBCASE("before BatchNorm (train): all of it") {
    const json r = report_of(grid_net(2, 3, 3, 6, R"({"type": "conv2d"}, {"type": "batchnorm"})"));
    const json& b = bias_row(r, "layers.0.bias");
    INFO(row_text(b));
    CHECK(b.at("redundant_dim") == 6);
    CHECK(b.at("verdict") == "redundant");
  }
  SUBCASE("before GroupNorm: the 3 group means") {
    const json r = report_of(grid_net(2, 3, 3, 6, R"({"type": "conv2d"}, {"type": "groupnorm", "num_groups": 3})"));
    const json& b = bias_row(r, "layers.0.bias");
    INFO(row_text(b));
    CHECK(b.at("redundant_dim") == 3);
    CHECK(b.at("directions") == "constant within each of the 3 groups");
  }
  SUBCASE("before LayerNorm over the channels: the mean") {
    const json r = report_of(grid_net(2, 3, 3, 6, R"({"type": "conv1d", "kernel_size": 2}, {"type": "layernorm"})"));
    const json& b = bias_row(r, "layers.0.bias");
    INFO(row_text(b));
    CHECK(b.at("redundant_dim") == 1);
    CHECK(b.at("directions") == "all-ones");
  }
  SUBCASE("a padded convolution between the bias and BatchNorm (train) keeps it") {
    // At the borders the second convolution sees only some of its taps, so the constant bias
    // reaches BatchNorm as a pattern over the tokens, which its mean does not remove. With a
    // 1 x 1 kernel there is no padding and the bias is redundant again.
    const json padded = report_of(grid_net(2, 4, 4, 4, R"({"type": "conv2d"}, {"type": "conv2d"}, {"type": "batchnorm"})"));
    const json& p = bias_row(padded, "layers.0.bias");
    INFO(row_text(p));
    CHECK(p.at("redundant_dim") == 0);
    CHECK(p.at("verdict") == "effective");
    const json pointwise = report_of(grid_net(2, 4, 4, 4, R"({"type": "conv2d"}, {"type": "conv2d", "kernel_size": 1}, {"type": "batchnorm"})"));
    const json& q = bias_row(pointwise, "layers.0.bias");
    INFO(row_text(q));
    CHECK(q.at("redundant_dim") == 4);
    CHECK(q.at("verdict") == "redundant");
  }
}

TEST_CASE("conv: permuting the tokens changes the output, and the report says why") {
  const json r = report_of(grid_net(1, 2, 3, 4, R"({"type": "conv1d"})"), false, true);
  const json& p = probe_row(r, "model: permute tokens");
  INFO(p.dump());
  CHECK(p.at("expected") == "changes");
  CHECK(p.at("note") == "a convolution reads each token's neighbours");
  CHECK(p.at("agrees") == true);
  // A 1 x 1 convolution is a Linear per token: equivariant.
  const json one = report_of(grid_net(1, 2, 3, 4, R"({"type": "conv2d", "kernel_size": 1})"), false, true);
  CHECK(probe_row(one, "model: permute tokens").at("expected") == "equivariant");
}

TEST_CASE("conv: a 1 x 1 convolution passes a bias on like a Linear, and the row blames what cancels it") {
  const json r = report_of(R"({"version": 1, "seed": 4, "shape": {"batch": 2, "tokens": 5, "features": 4}, "layers": [
      {"type": "linear"}, {"type": "conv1d", "kernel_size": 1}, {"type": "layernorm"},
      {"type": "linear"}, {"type": "conv1d", "kernel_size": 1}, {"type": "batchnorm"}]})");
  const json& before_ln = bias_row(r, "layers.0.bias");
  INFO(row_text(before_ln) << " why: " << before_ln.at("why"));
  CHECK(before_ln.at("redundant_dim") == 1);
  CHECK(before_ln.at("why").get<std::string>().find("LayerNorm") != std::string::npos);
  const json& before_bn = bias_row(r, "layers.3.bias");
  INFO(row_text(before_bn) << " why: " << before_bn.at("why"));
  CHECK(before_bn.at("redundant_dim") == 4);
  CHECK(before_bn.at("why").get<std::string>().find("BatchNorm (train)") != std::string::npos);
}
