// safetensors: the tensor file format of Hugging Face and PyTorch users, read and written here
// so an experiment's exact weights and input can leave the engine (and come back).
//
// Layout (https://github.com/huggingface/safetensors, "Format"):
//   8 bytes      N, the header length, unsigned little-endian
//   N bytes      a JSON object: per tensor {"dtype": "F64", "shape": [...], "data_offsets": [b, e]}
//                with byte offsets into the data, plus an optional "__metadata__" object of
//                string -> string; the writer pads it with spaces so the data is 8-byte aligned
//   the rest     the tensors' bytes, row-major, little-endian, with no gaps or overlaps
//
// Reading validates everything a hand-edited or truncated file can get wrong and returns an
// Error naming the tensor; nothing throws (the core also runs in wasm).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "model/model.hpp"
#include "core/status.hpp"

namespace biaslab {

// F32 and F64 are read and written; the 16-bit float types are read (widened) only.
enum class TensorDType { f16, bf16, f32, f64 };
const char* tensor_dtype_name(TensorDType t);  // "F16", "BF16", "F32", "F64"

struct Tensor {
  std::string name;
  TensorDType dtype = TensorDType::f64;
  std::vector<std::int64_t> shape;
  std::vector<double> values;  // row-major; written rounded to dtype, read widened to double
};

struct TensorFile {
  std::vector<Tensor> tensors;  // read: in data order
  std::vector<std::pair<std::string, std::string>> metadata;
  const Tensor* find(const std::string& name) const;  // nullptr when absent
};

// Reads a whole file's bytes. Errors name the tensor in `path` (or "" for the file as a whole).
Result<TensorFile> read_safetensors(const std::string& bytes);
// Fails only on a tensor whose values do not match its shape, or an unwritable dtype.
Result<std::string> write_safetensors(const TensorFile& file);

// ---------------------------------------------------------------------------------------------
// An experiment's tensors: every parameter and buffer of the network under its dotted name
// (Model::params, e.g. "layers.0.body.1.k_proj.bias"; matrices (out, in), vectors (n)) and the
// input "input" (batch, tokens, features), in the config's dtype; optionally "output"
// (batch, tokens, out features) and "structure_inputs" (K, batch, tokens, features), both F64.
// With cross-attention, the contexts: "context" (batch, context tokens, features) and
// "structure_contexts" (K, batch, context tokens, features).
// The config itself goes into the metadata ("biaslab_config") for people who open the file
// elsewhere.
struct ExperimentTensors {
  Network net;
  Mat input;                          // (B*T, F), then the context's rows as draw_input gives them
  Mat output;                         // (B*T, F_out); empty when absent
  std::vector<Mat> structure_inputs;  // K inputs like `input`: the structural analysis's 0..K-1 (0: the analysed input)
};

Result<std::string> write_experiment_tensors(const ExperimentTensors& tensors);
// Builds the config's network and replaces every parameter, buffer and the input with the
// file's values. Every tensor the config declares must be present with its exact shape; a tensor
// the config does not declare is an error too (a typo would otherwise be silently ignored).
Result<ExperimentTensors> read_experiment_tensors(const ExperimentConfig& config,
                                                  const std::string& bytes);

}  // namespace biaslab
