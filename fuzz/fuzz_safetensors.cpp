// Fuzz target: the safetensors reader (cpp/export/safetensors.*), on arbitrary bytes as the file.
//
// Checks, besides "no crash, no sanitizer report":
//   - a rejected file has an error with a message;
//   - read_safetensors: every tensor holds exactly as many values as its shape, names are unique
//     and not "__metadata__", metadata keys are unique; a file of F32/F64 tensors written back
//     (write_safetensors) reads again to the same tensors (values bit for bit, NaN as NaN), and
//     writing that again gives the same bytes;
//   - read_experiment_tensors against a small fixed config (linear, batchnorm with buffers,
//     residual layernorm, attention): an accepted file has every tensor at the config's shapes,
//     and write_experiment_tensors then read_experiment_tensors gives the same values.
// The corpus holds `biaslab export-torch` files of that config (fuzz/corpus/safetensors/).
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "check.hpp"
#include "model/config.hpp"
#include "export/safetensors.hpp"

using namespace biaslab;

namespace {

// The seeds in fuzz/corpus/safetensors/ were exported from this config; keep them in step.
const char* const kConfig = R"({"version": 1, "seed": 5,
  "shape": {"batch": 2, "tokens": 3, "features": 4},
  "layers": [{"type": "linear", "out_features": 6}, {"type": "batchnorm", "mode": "eval"},
             {"type": "residual", "body": [{"type": "layernorm", "bias": false}]},
             {"type": "attention", "num_heads": 2}]})";

const ExperimentConfig& config() {
  static const ExperimentConfig c = [] {
    const Result<ExperimentConfig> r = parse_config_text(kConfig);
    FUZZ_CHECK(r.ok(), "the fixed config does not parse: " + r.error().what());
    return *r;
  }();
  return c;
}

bool same_value(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  std::uint64_t x, y;
  std::memcpy(&x, &a, 8);
  std::memcpy(&y, &b, 8);
  return x == y;  // +0 and -0 differ in a file
}

bool same_mat(const Mat& a, const Mat& b) {
  if (a.rows() != b.rows() || a.cols() != b.cols()) return false;
  for (Eigen::Index i = 0; i < a.size(); ++i)
    if (!same_value(a.data()[i], b.data()[i])) return false;
  return true;
}

bool same_params(const std::vector<LayerNode>& a, const std::vector<LayerNode>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a[i].params.size() != b[i].params.size()) return false;
    for (std::size_t j = 0; j < a[i].params.size(); ++j)
      if (!same_mat(a[i].params[j].value, b[i].params[j].value)) return false;
    if (!same_params(a[i].body, b[i].body)) return false;
    if (a[i].branches.size() != b[i].branches.size()) return false;
    for (std::size_t k = 0; k < a[i].branches.size(); ++k)
      if (!same_params(a[i].branches[k], b[i].branches[k])) return false;
  }
  return true;
}

void check_file(const TensorFile& f) {
  std::set<std::string> names;
  for (const Tensor& t : f.tensors) {
    std::uint64_t count = 1;
    for (std::int64_t d : t.shape) {
      FUZZ_CHECK(d >= 0, t.name + ": negative dimension");
      count *= static_cast<std::uint64_t>(d);
    }
    FUZZ_CHECK(count == t.values.size(), t.name + ": " + std::to_string(t.values.size()) +
                                             " values for a shape of " + std::to_string(count));
    FUZZ_CHECK(t.name != "__metadata__", "a tensor named __metadata__");
    FUZZ_CHECK(names.insert(t.name).second, "tensor name twice: " + t.name);
  }
  std::set<std::string> keys;
  for (const auto& m : f.metadata) FUZZ_CHECK(keys.insert(m.first).second, "metadata key twice");
}

void check_round_trip(const TensorFile& f) {
  for (const Tensor& t : f.tensors)
    if (t.dtype != TensorDType::f32 && t.dtype != TensorDType::f64) return;  // not writable
  const Result<std::string> written = write_safetensors(f);
  FUZZ_CHECK(written.ok(), "a file that was read cannot be written: " + written.error().what());
  const Result<TensorFile> back = read_safetensors(*written);
  FUZZ_CHECK(back.ok(), "a written file does not read: " + back.error().what());
  FUZZ_CHECK(back->metadata == f.metadata, "metadata changed in a round trip");
  FUZZ_CHECK(back->tensors.size() == f.tensors.size(), "tensor count changed in a round trip");
  std::map<std::string, const Tensor*> by_name;
  for (const Tensor& t : back->tensors) by_name[t.name] = &t;
  for (const Tensor& t : f.tensors) {
    const auto it = by_name.find(t.name);
    FUZZ_CHECK(it != by_name.end(), t.name + " lost in a round trip");
    const Tensor& u = *it->second;
    FUZZ_CHECK(u.dtype == t.dtype && u.shape == t.shape, t.name + ": dtype or shape changed");
    for (std::size_t i = 0; i < t.values.size(); ++i)
      FUZZ_CHECK(same_value(t.values[i], u.values[i]), t.name + ": a value changed");
  }
  const Result<std::string> rewritten = write_safetensors(*back);
  FUZZ_CHECK(rewritten.ok() && *rewritten == *written, "writing a re-read file changes its bytes");
}

void check_experiment(const std::string& bytes) {
  const Result<ExperimentTensors> x = read_experiment_tensors(config(), bytes);
  if (!x) {
    FUZZ_CHECK(!x.error().message.empty(), "experiment rejected with an empty message");
    return;
  }
  const Shape& s = config().shape;
  FUZZ_CHECK(x->input.rows() == s.batch * s.tokens && x->input.cols() == s.features,
             "input has the wrong shape");
  for (const Mat& m : x->structure_inputs)
    FUZZ_CHECK(m.rows() == x->input.rows() && m.cols() == x->input.cols(),
               "a structure input has the wrong shape");
  const Result<std::string> written = write_experiment_tensors(*x);
  FUZZ_CHECK(written.ok(), "an accepted experiment cannot be written: " + written.error().what());
  const Result<ExperimentTensors> y = read_experiment_tensors(config(), *written);
  FUZZ_CHECK(y.ok(), "a written experiment does not read: " + y.error().what());
  FUZZ_CHECK(same_params(x->net.layers, y->net.layers), "a parameter changed in a round trip");
  FUZZ_CHECK(same_mat(x->input, y->input), "input changed in a round trip");
  FUZZ_CHECK(same_mat(x->output, y->output), "output changed in a round trip");
  FUZZ_CHECK(x->structure_inputs.size() == y->structure_inputs.size(),
             "structure inputs changed in a round trip");
  for (std::size_t k = 0; k < x->structure_inputs.size(); ++k)
    FUZZ_CHECK(same_mat(x->structure_inputs[k], y->structure_inputs[k]),
               "a structure input changed in a round trip");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  const Result<TensorFile> file = read_safetensors(bytes);
  if (!file) {
    FUZZ_CHECK(!file.error().message.empty(), "rejected with an empty message");
    return 0;
  }
  check_file(*file);
  check_round_trip(*file);
  check_experiment(bytes);
  return 0;
}
