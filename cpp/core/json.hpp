// The project's one JSON type: nlohmann's, with object keys in insertion order. Reports and
// configs print in the order they are built (or were written), and the config parser meets
// keys in document order, so the first error it names is the first in the text. One type
// only: every instantiation of nlohmann::basic_json adds tens of KB to the wasm module.
#pragma once

#include <nlohmann/json.hpp>

namespace biaslab {
using Json = nlohmann::ordered_json;
}  // namespace biaslab
