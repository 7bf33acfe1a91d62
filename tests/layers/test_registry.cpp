// The layer registry (cpp/layers/kinds.def, registry.cpp): one kind per LayerType, in order,
// each complete enough for every consumer that iterates it.
#include <set>
#include <string>

#include "layers/layer.hpp"
#include "../support.hpp"

using namespace biaslab;

TEST_CASE("registry: kind i is LayerType i, names are unique and found by name") {
  std::set<std::string> names;
  int i = 0;
  for (const LayerKind* k : layer_kinds()) {
    CAPTURE(std::string(k->name));
    CHECK(static_cast<int>(k->type) == i);
    CHECK(&layer_kind(k->type) == k);
    CHECK(find_layer_kind(k->name) == k);
    CHECK(names.insert(k->name).second);
    ++i;
  }
  CHECK(i >= 12);
  CHECK(find_layer_kind("no_such_kind") == nullptr);
}

TEST_CASE("registry: every kind compiles, explains itself to the script, and has help") {
  for (const LayerKind* k : layer_kinds()) {
    CAPTURE(std::string(k->name));
    CHECK(static_cast<bool>(k->compile));
    CHECK(std::string(k->help).size() > 10);
    // A kind holding layers (a residual's body, a parallel's branches) is written by the exporter
    // around them; every other writes itself.
    bool holds_layers = k->has_body;
    for (const LayerOption& o : k->options) holds_layers = holds_layers || o.spec.kind == SpecKind::branches;
    CHECK((torch_writer(k->type) != nullptr) != holds_layers);
    // Its options' defaults are what make_layer gives and what printing leaves out: only "type".
    const LayerConfig l = make_layer(k->type);
    CHECK(layer_to_json(l) == Json{{"type", k->name}});
  }
}
