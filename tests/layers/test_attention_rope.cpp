// RoPE variants of attention (cpp/layers/attention.cpp, attention_kernel.cpp): partial rotation (rotary_dim, as
// GPT-NeoX), interleaved pairs (rope_style, as GPT-J) and the frequency base (rope_base), against
// rotations written out by hand, and what partial RoPE does to the key bias.
#include <cmath>
#include <string>

#include "export/torch_export.hpp"
#include "layers/attention.hpp"
#include "../support.hpp"

using namespace biaslab;
using biaslab::test::mat;

namespace {

constexpr double kTol = 1e-15;
const double c1 = std::cos(1.0), s1 = std::sin(1.0);

Op rope_op(int heads, int width, int rotary_dim, bool interleaved, double base) {
  Op op;
  op.kind = OpKind::attention;
  op.heads = op.kv_heads = heads;
  op.in = op.out = width;
  op.rope = true;
  op.rotary_dim = rotary_dim;
  op.rope_interleaved = interleaved;
  op.rope_base = base;
  return op;
}

}  // namespace

TEST_CASE("rope: partial rotation turns the first rotary_dim dimensions of each head, the rest pass") {
  // 2 heads of d = 4, r = 2: in each head only pair (0, 1) turns, by t * base^0 = t rad.
  Mat z = mat(2, 8, {1, 2, 3, 4, 5, 6, 7, 8,
                     1, 2, 3, 4, 5, 6, 7, 8});
  rope_rotate(z, 1, 2, rope_op(2, 8, 2, false, 10000), 2);
  CHECK_MAX_ABS_LE(z, mat(2, 8, {1, 2, 3, 4, 5, 6, 7, 8,
                                 1 * c1 - 2 * s1, 2 * c1 + 1 * s1, 3, 4, 5 * c1 - 6 * s1, 6 * c1 + 5 * s1, 7, 8}), kTol);
}

TEST_CASE("rope: interleaved pairs (2i, 2i+1) and the frequency base") {
  // 1 head, d = r = 4, base 100: pair 0 turns by t rad, pair 1 by t * 100^(-1/2) = 0.1 t rad.
  const double c2 = std::cos(0.1), s2 = std::sin(0.1);
  SUBCASE("interleaved: (0, 1) and (2, 3)") {
    Mat z = mat(2, 4, {1, 2, 3, 4, 1, 2, 3, 4});
    rope_rotate(z, 1, 2, rope_op(1, 4, 4, true, 100), 1);
    CHECK_MAX_ABS_LE(z, mat(2, 4, {1, 2, 3, 4, 1 * c1 - 2 * s1, 2 * c1 + 1 * s1, 3 * c2 - 4 * s2, 4 * c2 + 3 * s2}), kTol);
  }
  SUBCASE("half: (0, 2) and (1, 3)") {
    Mat z = mat(2, 4, {1, 2, 3, 4, 1, 2, 3, 4});
    rope_rotate(z, 1, 2, rope_op(1, 4, 4, false, 100), 1);
    CHECK_MAX_ABS_LE(z, mat(2, 4, {1, 2, 3, 4, 1 * c1 - 3 * s1, 2 * c2 - 4 * s2, 3 * c1 + 1 * s1, 4 * c2 + 2 * s2}), kTol);
  }
  SUBCASE("the tables use r, not the head dimension, in the exponent (as GPT-NeoX)") {
    Mat ct, st;
    rope_tables(2, 4, ct, st, 100);
    CHECK_MAX_ABS_LE(ct, mat(2, 2, {1, 1, c1, c2}), kTol);
    CHECK_MAX_ABS_LE(st, mat(2, 2, {0, 0, s1, s2}), kTol);
  }
}

TEST_CASE("rope: with partial RoPE the key bias is redundant exactly on the dimensions that do not rotate") {
  // 2 heads of d = 8, r = 4: 2 x (8 - 4) = 8 of 16 key-bias directions shift whole score rows.
  for (const char* style : {"half", "interleaved"}) {
    CAPTURE(style);
    const std::string text = std::string(R"({"version": 1, "seed": 11, "shape": {"batch": 2, "tokens": 6, "features": 16},
        "layers": [{"type": "attention", "num_heads": 2, "rope": true, "rotary_dim": 4, "rope_style": ")") +
        style + R"(", "rope_base": 1000}]})";
    const Json r = test::report_of(text);
    const Json& row = test::bias_row(r, "layers.0.k_proj.bias");
    INFO(test::row_text(row));
    CHECK(row.at("redundant_dim") == 8);
    CHECK(row.at("verdict") == "partly_redundant");
    CHECK(row.at("why").get<std::string>().find("RoPE rotates only the first 4 of each head's 8 dimensions") == 0);
    // Full RoPE for comparison: no direction of the key bias is redundant.
    const Json full = test::report_of(R"({"version": 1, "seed": 11, "shape": {"batch": 2, "tokens": 6, "features": 16},
        "layers": [{"type": "attention", "num_heads": 2, "rope": true}]})");
    CHECK(test::bias_row(full, "layers.0.k_proj.bias").at("redundant_dim") == 0);
  }
}

TEST_CASE("rope: the script passes the non-default RoPE options to its Attention") {
  const ExperimentConfig c = test::config_from(R"({"version": 1, "shape": {"batch": 1, "tokens": 4, "features": 16},
      "layers": [{"type": "attention", "num_heads": 2, "rope": true, "rotary_dim": 4, "rope_style": "interleaved", "rope_base": 500000}]})");
  CHECK(export_torch_script(c).find(", rope=True, rotary_dim=4, rope_style=\"interleaved\", rope_base=5e+05)") !=
        std::string::npos);
  const ExperimentConfig plain = test::config_from(R"({"version": 1, "shape": {"batch": 1, "tokens": 4, "features": 16},
      "layers": [{"type": "attention", "num_heads": 2, "rope": true}]})");
  CHECK(export_torch_script(plain).find(", rope=True)") != std::string::npos);
}

TEST_CASE("rope: the schema says the RoPE options need rope, and the parser names the option") {
  const Json schema = config_schema();
  for (const Json& t : schema.at("layer_types")) {
    if (t.at("name") != "attention") continue;
    int needing = 0;
    for (const Json& o : t.at("options"))
      if (o.contains("requires")) {
        CHECK(o.at("requires") == "rope");
        ++needing;
      }
    CHECK(needing == 3);
  }
  const auto r = parse_config_text(R"({"layers": [{"type": "attention", "rope": false, "rope_style": "interleaved"}]})");
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().what() == "layers[0].rope_style: rope_style needs rope: true");
}
