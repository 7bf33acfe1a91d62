// The experiment's tensors in a safetensors file: every parameter under its dotted name, the
// input and the output (export/safetensors.hpp), on top of the format's reader and writer.
#include <set>
#include <string>
#include <vector>

#include "export/safetensors.hpp"

namespace biaslab {

namespace {

// Projection weights keep their (out, in) matrix shape, convolution weights their torch shape;
// every other parameter is a vector.
std::vector<std::int64_t> param_shape(const Param& p) {
  if (p.dims.rank) return p.dims.list();
  if (p.role == ParamRole::weight) return {p.value.rows(), p.value.cols()};
  return {p.value.rows()};
}

std::string shape_text(const std::vector<std::int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

Tensor matrix_tensor(const std::string& name, TensorDType dtype, std::vector<std::int64_t> shape,
                     const Mat& m) {
  Tensor t{name, dtype, std::move(shape), {}};
  t.values.assign(m.data(), m.data() + m.size());  // Mat is row-major: the file's order
  return t;
}

int output_width(const Network& net) {
  return net.layers.empty() ? net.config.shape.features : net.layers.back().out_width;
}

}  // namespace

Result<std::string> write_experiment_tensors(const ExperimentTensors& x) {
  try {
    const Network& net = x.net;
    const Shape& s = net.config.shape;
    const Eigen::Index rows = Eigen::Index(s.batch) * s.tokens;
    const TensorDType dt = net.config.dtype == DType::float32 ? TensorDType::f32 : TensorDType::f64;
    TensorFile file;
    file.metadata = {{"format", "pt"},
                     {"biaslab_version", BIASLAB_VERSION},
                     {"biaslab_config", config_to_json(net.config).dump()}};
    visit_params(net.layers, [&](const std::string& name, const Param& p) {
      file.tensors.push_back(matrix_tensor(name, dt, param_shape(p), p.value));
    });
    // With cross-attention an input's context follows its rows (draw_input): its own tensor.
    const int ctx = context_tokens(net.config.layers);
    const Eigen::Index crows = Eigen::Index(s.batch) * ctx;
    if (x.input.rows() != rows + crows || x.input.cols() != s.features)
      return Error{"input", "shape does not match the config"};
    file.tensors.push_back(matrix_tensor("input", dt, {s.batch, s.tokens, s.features}, x.input.topRows(rows)));
    if (ctx) file.tensors.push_back(matrix_tensor("context", dt, {s.batch, ctx, s.features}, x.input.bottomRows(crows)));
    if (x.output.size() > 0) {
      if (x.output.rows() != rows || x.output.cols() != output_width(net))
        return Error{"output", "shape does not match the config"};
      file.tensors.push_back(matrix_tensor("output", TensorDType::f64, {s.batch, s.tokens, x.output.cols()}, x.output));
    }
    if (!x.structure_inputs.empty()) {
      const std::int64_t K = static_cast<std::int64_t>(x.structure_inputs.size());
      Tensor t{"structure_inputs", TensorDType::f64, {K, s.batch, s.tokens, s.features}, {}};
      Tensor c{"structure_contexts", TensorDType::f64, {K, s.batch, ctx, s.features}, {}};
      for (const Mat& m : x.structure_inputs) {
        if (m.rows() != rows + crows || m.cols() != s.features)
          return Error{"structure_inputs", "shape does not match the config"};
        t.values.insert(t.values.end(), m.data(), m.data() + rows * s.features);
        c.values.insert(c.values.end(), m.data() + rows * s.features, m.data() + m.size());
      }
      file.tensors.push_back(std::move(t));
      if (ctx) file.tensors.push_back(std::move(c));
    }
    return write_safetensors(file);
  } catch (const std::bad_alloc&) {
    return Error{"", "out of memory while writing the tensors"};
  } catch (const std::exception& e) {
    return Error{"", std::string("the tensor file could not be written: ") + e.what()};
  }
}

Result<ExperimentTensors> read_experiment_tensors(const ExperimentConfig& config, const std::string& bytes) {
  try {
    Result<TensorFile> file = read_safetensors(bytes);
    if (!file) return file.error();
    ExperimentTensors out;
    out.net = build_network(config);
    sync_network(out.net);
    std::set<std::string> used;
    auto take = [&](const std::string& name, const std::vector<std::int64_t>& shape,
                    Eigen::Index rows, Eigen::Index cols, Mat& into) -> std::optional<Error> {
      const Tensor* t = file->find(name);
      if (!t) return Error{name, "is missing: the config declares it with shape " + shape_text(shape)};
      if (t->shape != shape)
        return Error{name, "has shape " + shape_text(t->shape) + " but the config needs " + shape_text(shape)};
      into = Eigen::Map<const Mat>(t->values.data(), rows, cols);
      used.insert(name);
      return std::nullopt;
    };
    std::optional<Error> err;
    visit_params(out.net.layers, [&](const std::string& name, Param& p) {
      if (!err) err = take(name, param_shape(p), p.value.rows(), p.value.cols(), p.value);
    });
    if (err) return *err;
    const Shape& s = config.shape;
    const Eigen::Index rows = Eigen::Index(s.batch) * s.tokens;
    if (auto e = take("input", {s.batch, s.tokens, s.features}, rows, s.features, out.input)) return *e;
    const int ctx = context_tokens(config.layers);
    const Eigen::Index crows = Eigen::Index(s.batch) * ctx;
    if (ctx) {  // the context follows the input's rows, as draw_input gives them
      Mat c;
      if (auto e = take("context", {s.batch, ctx, s.features}, crows, s.features, c)) return *e;
      out.input.conservativeResize(rows + crows, Eigen::NoChange);
      out.input.bottomRows(crows) = c;
    }
    if (file->find("output")) {
      const int w = output_width(out.net);
      if (auto e = take("output", {s.batch, s.tokens, w}, rows, w, out.output)) return *e;
    }
    if (const Tensor* t = file->find("structure_inputs")) {
      const std::int64_t K = t->shape.empty() ? 0 : t->shape[0];
      Mat all;
      if (auto e = take("structure_inputs", {K, s.batch, s.tokens, s.features}, K * rows, s.features, all)) return *e;
      Mat contexts;
      if (ctx)
        if (auto e = take("structure_contexts", {K, s.batch, ctx, s.features}, K * crows, s.features, contexts)) return *e;
      for (std::int64_t k = 0; k < K; ++k) {
        Mat x(rows + crows, s.features);
        x.topRows(rows) = all.middleRows(k * rows, rows);
        if (ctx) x.bottomRows(crows) = contexts.middleRows(k * crows, crows);
        out.structure_inputs.push_back(std::move(x));
      }
    }
    for (const Tensor& t : file->tensors)
      if (!used.count(t.name))
        return Error{t.name, "is not a parameter, buffer, input or output of this config"};
    return out;
  } catch (const std::bad_alloc&) {
    return Error{"", "out of memory while reading the tensors"};
  } catch (const std::exception& e) {
    return Error{"", std::string("the tensor file could not be read: ") + e.what()};
  }
}

}  // namespace biaslab
