// The page's first-load engine without what runs a convolution (cpp/layers/conv_kernel.cpp)
// and its folds (cpp/folds/conv.cpp): it still knows conv1d and conv2d (schema, parsing, errors),
// and analyze() answers a config that uses one with needs_full_engine before any work, so nothing
// here is reached.
#include <stdexcept>

#include "folds/rules.hpp"
#include "layers/conv.hpp"

namespace biaslab {

bool conv_kernel_linked() { return false; }

template <class S>
MatT<S> conv_forward(const Op&, const MatT<S>&, const MatT<S>*, const MatT<S>&, const MatT<S>*, MatT<S>*) {
  throw std::logic_error("this module has no convolution kernel");
}

template MatT<float> conv_forward<float>(const Op&, const MatT<float>&, const MatT<float>*, const MatT<float>&,
                                         const MatT<float>*, MatT<float>*);
template MatT<double> conv_forward<double>(const Op&, const Mat&, const Mat*, const Mat&, const Mat*, Mat*);

namespace conv_kind {
void compile(CompileContext&, bool) { throw std::logic_error("this module cannot compile a convolution"); }
std::string explain(const Op&, int) { return ""; }
void sync(LayerNode&) {}
}  // namespace conv_kind

namespace folds_detail {
bool match_conv_bn(const Seq&, int) { return false; }
bool match_bn_conv(const Seq&, int) { return false; }
void apply_bn_conv(Seq&, int, const std::string&, FoldApplied&) {}
}  // namespace folds_detail

}  // namespace biaslab
