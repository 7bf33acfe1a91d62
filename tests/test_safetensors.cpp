// Tests of the safetensors reader and writer: round trips, the byte layout, and every way a file
// can be wrong (each must give an Error naming the problem, never a crash).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>

#include "model/config.hpp"
#include "export/safetensors.hpp"

using namespace biaslab;

namespace {

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

std::string le64(std::uint64_t v) {
  std::string s;
  for (int i = 0; i < 8; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  return s;
}

// A file from a header text and a data section, as a hand-made or damaged file would be.
std::string file_of(const std::string& header, const std::string& data) {
  return le64(header.size()) + header + data;
}

std::string f64_bytes(double v) {
  std::uint64_t bits;
  std::memcpy(&bits, &v, 8);
  return le64(bits);
}

Error read_error(const std::string& bytes) {
  const auto r = read_safetensors(bytes);
  REQUIRE_FALSE(r.ok());
  return r.error();
}

// batch 2, tokens 3, features 4: linear 4 -> 5, batchnorm (with buffers), attention is too big
// to read by eye, so a residual layernorm stands in for nesting.
const char* const kSmall = R"({"version": 1, "seed": 5, "dtype": "float64",
  "shape": {"batch": 2, "tokens": 3, "features": 4},
  "layers": [{"type": "linear", "out_features": 6}, {"type": "batchnorm", "mode": "eval"},
             {"type": "residual", "body": [{"type": "layernorm", "bias": false}]}]})";

ExperimentConfig small_config(DType dtype = DType::float64) {
  auto c = parse_config_text(kSmall);
  REQUIRE(c.ok());
  ExperimentConfig cfg = *c;
  cfg.dtype = dtype;
  return cfg;
}

}  // namespace

TEST_CASE("safetensors: a written file reads back with the same tensors, dtypes and metadata") {
  TensorFile f;
  f.metadata = {{"format", "pt"}};
  f.tensors.push_back({"a", TensorDType::f64, {2, 3}, {1, -2, 3.25, 1e-300, 0, 7}});
  f.tensors.push_back({"b.bias", TensorDType::f32, {3}, {0.1, -0.5, 2}});
  f.tensors.push_back({"empty", TensorDType::f64, {0, 4}, {}});
  f.tensors.push_back({"scalar", TensorDType::f64, {}, {42}});
  const auto bytes = write_safetensors(f);
  REQUIRE(bytes.ok());
  std::uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | static_cast<unsigned char>((*bytes)[i]);
  CHECK((8 + header_len) % 8 == 0);  // the header is padded so the data is 8-byte aligned
  const auto back = read_safetensors(*bytes);
  REQUIRE(back.ok());
  REQUIRE(back->tensors.size() == 4);
  const Tensor* a = back->find("a");
  REQUIRE(a);
  CHECK(a->dtype == TensorDType::f64);
  CHECK(a->shape == std::vector<std::int64_t>{2, 3});
  CHECK(a->values == f.tensors[0].values);  // F64 is exact
  const Tensor* b = back->find("b.bias");
  REQUIRE(b);
  CHECK(b->dtype == TensorDType::f32);
  CHECK(b->values[0] == static_cast<double>(0.1f));  // F32 rounds once, to float
  CHECK(back->find("empty")->values.empty());
  CHECK(back->find("scalar")->values == std::vector<double>{42});
  REQUIRE(back->metadata.size() == 1);
  CHECK(back->metadata[0].second == "pt");
}

TEST_CASE("safetensors: the layout is the standard one, byte for byte") {
  TensorFile f;
  f.tensors.push_back({"x", TensorDType::f64, {1}, {1.5}});
  const auto bytes = write_safetensors(f);
  REQUIRE(bytes.ok());
  const std::string header = R"({"x":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}})";
  std::string padded = header;
  while ((8 + padded.size()) % 8) padded.push_back(' ');
  CHECK(*bytes == file_of(padded, f64_bytes(1.5)));
}

TEST_CASE("safetensors: 16-bit floats are read and widened") {
  // F16 0x3c00 = 1, 0xc000 = -2, 0x0001 = 2^-24 (subnormal); BF16 0x3fc0 = 1.5.
  const std::string h = R"({"h":{"dtype":"F16","shape":[3],"data_offsets":[0,6]},"b":{"dtype":"BF16","shape":[1],"data_offsets":[6,8]}})";
  const std::string data = std::string("\x00\x3c\x00\xc0\x01\x00", 6) + std::string("\xc0\x3f", 2);
  const auto r = read_safetensors(file_of(h, data));
  REQUIRE(r.ok());
  CHECK(r->find("h")->values == std::vector<double>{1.0, -2.0, std::ldexp(1.0, -24)});
  CHECK(r->find("b")->values == std::vector<double>{1.5});
}

TEST_CASE("safetensors: a damaged file is an error, never a crash") {
  const std::string good_h = R"({"x":{"dtype":"F64","shape":[2],"data_offsets":[0,16]}})";
  const std::string good_d = f64_bytes(1) + f64_bytes(2);
  REQUIRE(read_safetensors(file_of(good_h, good_d)).ok());

  SUBCASE("shorter than the length field") {
    CHECK(contains(read_error("").message, "8-byte header length"));
    CHECK(contains(read_error("abc").message, "3 bytes long"));
  }
  SUBCASE("header length beyond the file") {
    const std::string bytes = le64(1000) + good_h;
    CHECK(contains(read_error(bytes).message, "header length is 1000 bytes"));
    CHECK(contains(read_error(le64(std::numeric_limits<std::uint64_t>::max())).message, "header length"));
  }
  SUBCASE("truncated in the data") {
    const std::string bytes = file_of(good_h, good_d).substr(0, 8 + good_h.size() + 12);
    const Error e = read_error(bytes);
    CHECK(e.path == "x");
    CHECK(contains(e.message, "run past the end"));
  }
  SUBCASE("bad JSON") {
    CHECK(contains(read_error(file_of("{\"x\": ", "")).message, "not valid JSON"));
    CHECK(contains(read_error(file_of("[1, 2]", "")).message, "must be a JSON object"));
    CHECK(contains(read_error(file_of(R"({"x": 3})", "")).message, "expected an object"));
  }
  SUBCASE("duplicate names") {
    const std::string h = R"({"x":{"dtype":"F64","shape":[1],"data_offsets":[0,8]},"x":{"dtype":"F64","shape":[1],"data_offsets":[8,16]}})";
    const Error e = read_error(file_of(h, good_d));
    CHECK(e.path == "x");
    CHECK(contains(e.message, "twice"));
  }
  SUBCASE("wrong data_offsets") {
    auto err = [&](const std::string& offsets) {
      return read_error(file_of(R"({"x":{"dtype":"F64","shape":[2],"data_offsets":)" + offsets + "}}", good_d));
    };
    CHECK(contains(err("[0, 8]").message, "needs 16"));       // size does not match the shape
    CHECK(contains(err("[16, 0]").message, "end before"));
    CHECK(contains(err("[0, 24]").message, "run past the end"));
    CHECK(contains(err("[0]").message, "[begin, end]"));
    CHECK(contains(err("[-8, 8]").message, "non-negative"));
    CHECK(contains(err("[0.5, 16]").message, "non-negative integers"));
    CHECK(contains(err("\"0-16\"").message, "[begin, end]"));
  }
  SUBCASE("overlapping, gapped or trailing data") {
    const std::string d3 = good_d + f64_bytes(3);
    const std::string overlap = R"({"a":{"dtype":"F64","shape":[2],"data_offsets":[0,16]},"b":{"dtype":"F64","shape":[2],"data_offsets":[8,24]}})";
    const Error e = read_error(file_of(overlap, d3));
    CHECK(e.path == "b");
    CHECK(contains(e.message, "overlap those of a"));
    const std::string gap = R"({"a":{"dtype":"F64","shape":[1],"data_offsets":[0,8]},"b":{"dtype":"F64","shape":[1],"data_offsets":[16,24]}})";
    CHECK(contains(read_error(file_of(gap, d3)).message, "gap"));
    CHECK(contains(read_error(file_of(good_h, d3)).message, "8 bytes of data after the last tensor"));
  }
  SUBCASE("unknown or unsupported dtype") {
    const Error u = read_error(file_of(R"({"x":{"dtype":"F128","shape":[1],"data_offsets":[0,16]}})", good_d));
    CHECK(u.path == "x");
    CHECK(contains(u.message, "unknown dtype 'F128'"));
    const Error i = read_error(file_of(R"({"x":{"dtype":"I64","shape":[2],"data_offsets":[0,16]}})", good_d));
    CHECK(contains(i.message, "I64 is not supported"));
    CHECK(contains(read_error(file_of(R"({"x":{"shape":[2],"data_offsets":[0,16]}})", good_d)).message, "no dtype"));
  }
  SUBCASE("bad shape") {
    CHECK(contains(read_error(file_of(R"({"x":{"dtype":"F64","shape":[-2],"data_offsets":[0,16]}})", good_d)).message, "non-negative"));
    CHECK(contains(read_error(file_of(R"({"x":{"dtype":"F64","shape":2,"data_offsets":[0,16]}})", good_d)).message, "no shape"));
    CHECK(contains(read_error(file_of(R"({"x":{"dtype":"F64","shape":[4294967296,4294967296],"data_offsets":[0,16]}})", good_d)).message, "too large"));
  }
  SUBCASE("bad metadata") {
    CHECK(read_error(file_of(R"({"__metadata__":{"a":1}})", "")).path == "__metadata__.a");
    CHECK(read_error(file_of(R"({"__metadata__":[]})", "")).path == "__metadata__");
  }
  SUBCASE("every prefix of a good file") {
    const std::string bytes = file_of(good_h, good_d);
    for (size_t n = 0; n < bytes.size(); ++n) CHECK_FALSE(read_safetensors(bytes.substr(0, n)).ok());
  }
}

TEST_CASE("safetensors: a deeply nested header is an error, never a stack overflow") {
  // Found with fuzz/fuzz_safetensors.cpp on a crafted input. The JSON parser copies an object's earlier members when
  // it grows, recursively, and messages dumped the offending value, recursively too: a million
  // levels (a 2 MB header) overflowed any stack.
  const std::size_t depth = 1000000;
  const std::string deep = std::string(depth, '[') + std::string(depth, ']');
  const std::string data = f64_bytes(1) + f64_bytes(2);
  auto check_too_deep = [](const std::string& bytes) {
    const Error e = read_error(bytes);
    CHECK(e.path == "");
    CHECK(contains(e.message, "nests deeper than 64 levels"));
  };
  SUBCASE("a shape followed by more keys") {
    check_too_deep(file_of(R"({"x":{"shape":)" + deep + R"(,"dtype":"F64","data_offsets":[0,16]}})", data));
  }
  SUBCASE("a tensor entry, the whole header, a metadata value") {
    check_too_deep(file_of(R"({"x":)" + deep + "}", data));
    check_too_deep(file_of(deep, data));
    check_too_deep(file_of(R"({"__metadata__":{"a":)" + deep + R"(,"b":"c"}})", ""));
  }
  SUBCASE("64 levels are read and rejected for what they hold") {
    const std::string nested = std::string(61, '[') + std::string(61, ']');  // levels 4 to 64
    const Error e = read_error(file_of(R"({"x":{"dtype":"F64","shape":[2,)" + nested + R"(],"data_offsets":[0,16]}})", data));
    CHECK(e.path == "x");
    CHECK(contains(e.message, "shape [2,...] must list non-negative integers"));
  }
}

TEST_CASE("safetensors: messages show at most a short excerpt of a header value") {
  // A header value can be megabytes long; the message stays one line.
  const Error s = read_error(file_of(R"({"__metadata__":{"a":[")" + std::string(100000, 'z') + R"("]}})", ""));
  CHECK(s.path == "__metadata__.a");
  CHECK(s.message.size() < 120);
  CHECK(contains(s.message, "must be a string, got [\"zzz"));
  std::string dims = "[1";
  for (int i = 0; i < 100000; ++i) dims += ",1";
  const Error d = read_error(file_of(R"({"x":{"dtype":"F64","shape":)" + dims + R"(,-1],"data_offsets":[0,8]}})", f64_bytes(1)));
  CHECK(d.message.size() < 120);
  CHECK(contains(d.message, "shape [1,1,1,1,1,1,1,1,...] must list non-negative integers"));
}

TEST_CASE("safetensors: an experiment's tensors read back into the same network") {
  for (DType dt : {DType::float64, DType::float32}) {
    CAPTURE(dtype_name(dt));
    const ExperimentConfig cfg = small_config(dt);
    Network net = build_network(cfg);
    sync_network(net);
    const Mat x = draw_input(cfg, 0);
    const Mat y = Mat::Constant(6, 6, 0.25);
    const auto bytes = write_experiment_tensors({net, x, y, {draw_input(cfg, 1), draw_input(cfg, 2)}});
    REQUIRE(bytes.ok());

    const auto file = read_safetensors(*bytes);
    REQUIRE(file.ok());
    const Model m = compile(net);
    REQUIRE(file->tensors.size() == m.params.size() + 3);
    for (size_t i = 0; i < m.params.size(); ++i) CHECK(file->tensors[i].name == m.params[i].name);
    CHECK(file->find("layers.0.weight")->shape == std::vector<std::int64_t>{6, 4});
    CHECK(file->find("layers.1.running_var")->shape == std::vector<std::int64_t>{6});
    CHECK(file->find("layers.2.body.0.weight")->shape == std::vector<std::int64_t>{6});
    CHECK(file->find("layers.2.body.0.bias") == nullptr);  // layernorm bias false: not declared
    CHECK(file->find("input")->shape == std::vector<std::int64_t>{2, 3, 4});
    CHECK(file->find("input")->dtype == (dt == DType::float32 ? TensorDType::f32 : TensorDType::f64));
    CHECK(file->find("output")->dtype == TensorDType::f64);
    CHECK(file->find("structure_inputs")->shape == std::vector<std::int64_t>{2, 2, 3, 4});

    const auto back = read_experiment_tensors(cfg, *bytes);
    REQUIRE(back.ok());
    const Model mb = compile(back->net);
    for (size_t i = 0; i < m.params.size(); ++i) {
      const Mat want = dt == DType::float32 ? Mat(m.params[i].value.cast<float>().cast<double>()) : m.params[i].value;
      CHECK((mb.params[i].value - want).cwiseAbs().maxCoeff() == 0.0);
    }
    CHECK(back->output == y);
    CHECK(back->input.rows() == 6);
    REQUIRE(back->structure_inputs.size() == 2);
    CHECK(back->structure_inputs[1] == draw_input(cfg, 2));  // F64 whatever the config's dtype
  }
}

TEST_CASE("safetensors: cross-attention's contexts are tensors of their own and read back after the input") {
  const auto parsed = parse_config_text(R"({"version": 1, "seed": 9, "shape": {"batch": 2, "tokens": 3, "features": 4},
      "layers": [{"type": "attention", "num_heads": 2, "context_tokens": 5}]})");
  REQUIRE(parsed.ok());
  const ExperimentConfig& cfg = *parsed;
  Network net = build_network(cfg);
  sync_network(net);
  const Mat x = draw_input(cfg, 0);
  REQUIRE(x.rows() == 6 + 10);
  const auto bytes = write_experiment_tensors({net, x, Mat(), {x, draw_input(cfg, 1)}});
  REQUIRE(bytes.ok());
  const auto file = read_safetensors(*bytes);
  REQUIRE(file.ok());
  CHECK(file->find("input")->shape == std::vector<std::int64_t>{2, 3, 4});
  CHECK(file->find("context")->shape == std::vector<std::int64_t>{2, 5, 4});
  CHECK(file->find("context")->values.front() == x(6, 0));  // the first context row
  CHECK(file->find("structure_inputs")->shape == std::vector<std::int64_t>{2, 2, 3, 4});
  CHECK(file->find("structure_contexts")->shape == std::vector<std::int64_t>{2, 2, 5, 4});
  const auto back = read_experiment_tensors(cfg, *bytes);
  REQUIRE(back.ok());
  CHECK(back->input == x);
  REQUIRE(back->structure_inputs.size() == 2);
  CHECK(back->structure_inputs[1] == draw_input(cfg, 1));
  // Without its context the file does not fit.
  TensorFile f = *file;
  f.tensors.erase(std::remove_if(f.tensors.begin(), f.tensors.end(), [](const Tensor& t) { return t.name == "context"; }),
                  f.tensors.end());
  const auto r = read_experiment_tensors(cfg, *write_safetensors(f));
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().path == "context");
}

TEST_CASE("safetensors: an experiment file that does not fit the config is an error") {
  const ExperimentConfig cfg = small_config();
  Network net = build_network(cfg);
  sync_network(net);
  const Mat x = draw_input(cfg, 0);
  auto with = [&](auto edit) {
    TensorFile f = *read_safetensors(*write_experiment_tensors({net, x, Mat(), {}}));
    edit(f);
    return read_experiment_tensors(cfg, *write_safetensors(f));
  };
  SUBCASE("missing tensor") {
    const auto r = with([](TensorFile& f) { f.tensors.erase(f.tensors.begin() + 1); });
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().path == "layers.0.bias");
    CHECK(contains(r.error().message, "missing"));
  }
  SUBCASE("missing input") {
    const auto r = with([](TensorFile& f) { f.tensors.pop_back(); });
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().path == "input");
  }
  SUBCASE("shape mismatch") {
    const auto r = with([](TensorFile& f) { f.tensors[0].shape = {4, 6}; });
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().path == "layers.0.weight");
    CHECK(contains(r.error().message, "has shape [4, 6] but the config needs [6, 4]"));
  }
  SUBCASE("a tensor the config does not declare") {
    const auto r = with([](TensorFile& f) { f.tensors.push_back({"layers.2.body.0.bias", TensorDType::f64, {6}, std::vector<double>(6)}); });
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().path == "layers.2.body.0.bias");
    CHECK(contains(r.error().message, "not a parameter"));
  }
  SUBCASE("structure inputs of the wrong shape") {
    const auto r = with([](TensorFile& f) { f.tensors.push_back({"structure_inputs", TensorDType::f64, {1, 2, 3, 5}, std::vector<double>(30)}); });
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().path == "structure_inputs");
  }
  SUBCASE("an output of the wrong width") {
    const auto r = with([](TensorFile& f) { f.tensors.push_back({"output", TensorDType::f64, {2, 3, 4}, std::vector<double>(24)}); });
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().path == "output");
  }
  SUBCASE("not a safetensors file at all") {
    const auto r = read_experiment_tensors(cfg, "{\"version\": 1}");
    REQUIRE_FALSE(r.ok());
  }
}
