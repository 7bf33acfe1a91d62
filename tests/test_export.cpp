// The script + weights bundle that the page downloads.
#include <string>

#include "model/presets.hpp"
#include "export/safetensors.hpp"
#include "export/torch_export.hpp"
#include "support.hpp"

using namespace biaslab;

namespace {

std::string decode_base64(const std::string& s) {
  auto val = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    return c == '+' ? 62 : c == '/' ? 63 : -1;
  };
  std::string out;
  unsigned acc = 0;
  int bits = 0;
  for (char c : s) {
    const int v = val(c);
    if (v < 0) continue;  // '=' padding
    acc = (acc << 6) | static_cast<unsigned>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((acc >> bits) & 0xff);
    }
  }
  return out;
}

}  // namespace

TEST_CASE("export: the bundle's weights read back as the config's own tensors, and the script names them") {
  for (const char* name : {"default", "article4-layernorm-linear", "norm-zoo"}) {
    CAPTURE(name);
    const Preset* p = find_preset(name);
    REQUIRE(p != nullptr);
    const Json b = export_torch_bundle(p->config, p->title);
    REQUIRE(b.at("ok") == true);
    const std::string script = b.at("script");
    CHECK(script.find("import torch") != std::string::npos);
    CHECK(script.find(p->title) != std::string::npos);
    const std::string bytes = decode_base64(b.at("weights_base64"));
    const auto cfg = biaslab::test::config_from(p->config);
    const auto back = read_experiment_tensors(cfg, bytes);
    INFO("read back: " << (back ? std::string("ok") : back.error().what()));
    REQUIRE(back.ok());
    // The values are the seed's: the same network the engine builds.
    const Network net = build_network(cfg);
    const Model a = compile(net), c = compile(back->net);
    REQUIRE(a.params.size() == c.params.size());
    double worst = 0;
    for (size_t i = 0; i < a.params.size(); ++i) {
      CHECK(a.params[i].name == c.params[i].name);
      worst = std::max(worst, (a.params[i].value - c.params[i].value).cwiseAbs().maxCoeff());
    }
    // float32 configs store rounded values: the tolerance is float32's unit roundoff, relative.
    CHECK_MESSAGE(worst <= 1e-6, "max |param - read back| = " << worst);
  }
}

TEST_CASE("export: a bad config gives its path and no script") {
  const Json b = export_torch_bundle(R"({"version": 1, "layers": [{"type": "attention", "num_heads": 5}]})");
  CHECK(b.at("ok") == false);
  CHECK(b.at("error").at("path") == "layers[0].num_heads");
  CHECK_FALSE(b.contains("script"));
}
