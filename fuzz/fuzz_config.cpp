// Fuzz target: the config parser, validation and printing (cpp/model/config.*).
//
// Input: any bytes, read as config text. Checks, besides "no crash, no sanitizer report":
//   - a rejected config has an error with a message (never an empty explanation);
//   - an accepted config prints (config_to_json), and the printed text parses again to an equal
//     config: parse(print(c)) == c, and printing that again gives the same text byte for byte;
//   - parse_config on the printed JSON object agrees with parse_config_text on its text;
//   - each layer prints on its own (layer_to_json) to the same object as inside the config.
#include <cstddef>
#include <cstdint>
#include <string>

#include "check.hpp"
#include "model/config.hpp"

using namespace biaslab;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const Result<ExperimentConfig> parsed = parse_config_text(text);
  if (!parsed) {
    FUZZ_CHECK(!parsed.error().message.empty(), "rejected with an empty message, path '" +
                                                    parsed.error().path + "'");
    return 0;
  }
  const ExperimentConfig& c = *parsed;
  FUZZ_CHECK(c == c, "a config is not equal to itself");

  const Json printed = config_to_json(c);
  const std::string printed_text = printed.dump();
  const Result<ExperimentConfig> again = parse_config_text(printed_text);
  FUZZ_CHECK(again.ok(), "the printed config does not parse: " + again.error().what() +
                             "\n  printed: " + printed_text);
  FUZZ_CHECK(*again == c, "parse(print(c)) != c\n  printed: " + printed_text);
  const std::string printed_again = config_to_json(*again).dump();
  FUZZ_CHECK(printed_again == printed_text,
             "printing is not stable\n  first:  " + printed_text + "\n  second: " + printed_again);

  const Result<ExperimentConfig> from_json = parse_config(printed);
  FUZZ_CHECK(from_json.ok() && *from_json == c, "parse_config(print(c)) != c");

  const Json& layers = printed.at("layers");
  FUZZ_CHECK(layers.size() == c.layers.size(), "printed layer count differs");
  for (std::size_t i = 0; i < c.layers.size(); ++i)
    FUZZ_CHECK(layer_to_json(c.layers[i]) == layers[i], "layer_to_json differs for layer " +
                                                            std::to_string(i));
  return 0;
}
