// The PyTorch writers of every layer kind, in registry order (layers/kinds.def). Each is defined
// in its kind's file as `kinds::<name>_torch`; only code that exports a script references this
// table, so the page's first-load engine links none of them.
#include "layers/layer.hpp"

namespace biaslab {

namespace kinds {
#define BIASLAB_LAYER(name) extern const TorchWriter name##_torch;
#include "layers/kinds.def"
#undef BIASLAB_LAYER
}  // namespace kinds

TorchWriter torch_writer(LayerType t) {
  static const TorchWriter table[] = {
#define BIASLAB_LAYER(name) kinds::name##_torch,
#include "layers/kinds.def"
#undef BIASLAB_LAYER
  };
  return table[static_cast<int>(t)];
}

}  // namespace biaslab
