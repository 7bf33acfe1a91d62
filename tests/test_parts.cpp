// A split analysis (analyze.hpp, analysis/parts.cpp): the page's workers each analyse a group of
// the biases, and merge_parts puts their answers together. The merged report must be the one a
// single engine gives, every number and every word, but for timing_ms. The same work estimate
// decides how many threads a native analysis uses.
#include <string>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "model/presets.hpp"
#include "support.hpp"

namespace biaslab::test {
namespace {

// The report of `cfg` split into `count` parts (each part run as its own analysis, as a worker
// would), merged.
json split_report(const ExperimentConfig& cfg, int count, std::vector<json>* parts_out = nullptr) {
  AnalyzeOptions opt;
  opt.part_count = count;
  opt.part_index = 0;
  const json first = analyze(cfg, opt);
  std::vector<json> parts;
  for (int k = 1; k < count; ++k) {
    opt.part_index = k;
    parts.push_back(analyze(cfg, opt));
  }
  if (parts_out) *parts_out = parts;
  return merge_parts(first, parts);
}

// A Qwen2-style block (q, k and v biases, grouped heads, RoPE; a gated FFN of 512 with biases),
// float32, batch 2.
ExperimentConfig qwen2_style_block(int seed, int tokens, int features, int hidden = 512) {
  return config_from(R"({"version": 1, "seed": )" + std::to_string(seed) + R"(, "dtype": "float32",
    "shape": {"batch": 2, "tokens": )" + std::to_string(tokens) + R"(, "features": )" + std::to_string(features) + R"(},
    "layers": [
      {"type": "residual", "body": [{"type": "rmsnorm"}, {"type": "attention", "num_heads": 4, "num_kv_heads": 2,
                                    "o_bias": false, "causal": true, "rope": true}]},
      {"type": "residual", "body": [{"type": "rmsnorm"}, {"type": "glu", "hidden": )" + std::to_string(hidden) + R"(, "bias": true}]}]})");
}

// Which part answered a bias (0: the first, whose rows are not in `parts`, split_report's).
int part_of(const std::vector<json>& parts, const std::string& param) {
  for (size_t k = 0; k < parts.size(); ++k)
    for (const json& row : parts[k]["part"]["biases"])
      if (row["param"] == param) return static_cast<int>(k) + 1;
  return 0;
}

json without_timing(json report) {
  report.erase("timing_ms");
  return report;
}

// What differs between two reports, for the failure message: the first few JSON pointers.
std::string differences(const json& a, const json& b) {
  std::string out;
  int shown = 0;
  for (const json& d : json::diff(a, b)) {
    if (shown++ == 5) break;
    out += d.dump() + "\n";
  }
  return out;
}

// A GPT-2-style block, narrow enough for a unit test and wide enough to be worth splitting
// (about 5 GFLOP of bias work).
const char* kBlock = R"({"version": 1, "seed": 3, "dtype": "float32", "shape": {"batch": 2, "tokens": 16, "features": 256},
  "layers": [
    {"type": "residual", "body": [{"type": "layernorm"}, {"type": "attention", "num_heads": 4, "causal": true}]},
    {"type": "residual", "body": [{"type": "layernorm"}, {"type": "linear", "out_features": 1024}, {"type": "gelu", "approximate": "tanh"},
                                  {"type": "linear", "out_features": 256}]},
    {"type": "layernorm"}]})";

}  // namespace

TEST_CASE("parts: every preset split in 2 and 3 parts merges into the report one engine gives") {
  int compared = 0;
  for (const Preset& p : presets()) {
    CAPTURE(p.name);
    const ExperimentConfig cfg = config_from(p.config);
    const json whole = analyze(cfg, AnalyzeOptions{});
    REQUIRE(whole.value("ok", false));
    for (int count : {2, 3}) {
      CAPTURE(count);
      const json merged = split_report(cfg, count);
      INFO("merged: " << merged.dump().substr(0, 600));
      REQUIRE(merged.value("ok", false));
      CHECK_FALSE(merged.contains("pending"));
      REQUIRE(merged.at("timing_ms").at("parts").size() == static_cast<size_t>(count - 1));
      const json a = without_timing(whole), b = without_timing(merged);
      INFO("differences (whole -> merged):\n" << differences(a, b));
      CHECK(a == b);
      ++compared;
    }
  }
  CHECK(compared >= 30);
}

TEST_CASE("parts: a config worth splitting splits once, into the parts the helpers plan too") {
  const ExperimentConfig cfg = config_from(kBlock);
  std::vector<int> asked;
  AnalyzeOptions opt;
  opt.split_over = 4;
  opt.split = [&](int count) { asked.push_back(count); };
  const json first = analyze(cfg, opt);
  INFO("first: " << first.dump().substr(0, 600));
  REQUIRE(first.value("ok", false));
  REQUIRE(asked.size() == 1);
  const int count = asked[0];
  CHECK(count >= 2);
  CHECK(count <= 4);
  REQUIRE(first.contains("pending"));
  CHECK(first["pending"]["count"] == count);
  // Part 0 analysed only its group: every bias is in some part, none in two.
  std::vector<json> parts;
  const json merged = split_report(cfg, count, &parts);
  size_t rows = first["biases"].size();
  for (const json& part : parts) {
    CHECK(part["part"]["biases"].size() > 0);
    rows += part["part"]["biases"].size();
  }
  REQUIRE(merged.value("ok", false));
  CHECK(rows == merged["biases"].size());
  // The split the engine chose merges, with the helpers' parts, into the whole report.
  const json whole = analyze(cfg, AnalyzeOptions{});
  const json auto_merged = merge_parts(first, parts);
  INFO("differences (whole -> merged):\n" << differences(without_timing(whole), without_timing(auto_merged)));
  CHECK(without_timing(whole) == without_timing(auto_merged));

  // Without a split callback, or with one engine, nothing splits.
  AnalyzeOptions alone;
  alone.split_over = 4;
  CHECK_FALSE(analyze(cfg, alone).contains("pending"));
  // A small config is not worth a second engine.
  std::vector<int> small_asked;
  AnalyzeOptions small;
  small.split_over = 4;
  small.split = [&](int count) { small_asked.push_back(count); };
  const json report = analyze(config_from(presets().front().config), small);
  REQUIRE(report.value("ok", false));
  CHECK(small_asked.empty());
  CHECK_FALSE(report.contains("pending"));
}

TEST_CASE("parts: the engines of a split hold at most split_memory by their memory bounds") {
  const ExperimentConfig cfg = config_from(kBlock);
  // The parts the engine asks for (1: it did not split), and its memory bound.
  auto parts_with = [&](double split_memory) {
    std::vector<int> asked;
    AnalyzeOptions opt;
    opt.split_over = 4;
    opt.split_memory = split_memory;
    opt.split = [&](int count) { asked.push_back(count); };
    const json r = analyze(cfg, opt);
    REQUIRE(r.value("ok", false));
    return std::pair<int, double>{asked.empty() ? 1 : asked[0], r["work"]["memory"]["bound"].get<double>()};
  };
  const auto [count, bound] = parts_with(kSplitMemory);
  INFO("with the default " << kSplitMemory / 1048576 << " MiB: " << count << " parts, each bound " << bound / 1048576 << " MiB");
  REQUIRE(count >= 2);
  REQUIRE(count * bound <= kSplitMemory);
  CHECK(parts_with(1.5 * bound).first == 1);
  CHECK(parts_with(2.5 * bound).first == 2);
  CHECK(parts_with(count * bound).first == count);
}

TEST_CASE("parts: a gated FFN's gate and up biases share a part where that lightens the heaviest") {
  // Qwen2-style q, k and v biases, and a gated FFN with biases whose gate and up biases take
  // their Gram matrices from the layers' factors (768 directions): A = W2^T Gamma^2 W2 is the
  // same for both, and one engine makes it once. In two parts, the pair together (its work less
  // one A) and the three attention biases balance better than the pair apart; a plan that weighs
  // each bias alone puts the gate and up biases, the two heaviest, in different parts (this
  // test fails with the family left out of the plan). The block is chosen by the work estimates:
  // a change to them may flip the plan here (it did when the plan began to expect one input for
  // the value bias, and again when the query rows' o_proj and the gated FFN's per-token products
  // made the attention's side lighter: hidden 768 to 640), and then a block where the pair weighs
  // more is the test to write (checked to fail here with the families left out of the plan).
  const ExperimentConfig cfg = qwen2_style_block(5, 8, 64, 640);
  const json whole = without_timing(analyze(cfg, AnalyzeOptions{}));
  REQUIRE(whole.value("ok", false));
  // Both took their Gram matrices from the factors (else the test says nothing).
  for (const json& row : whole["biases"])
    if (row["param"] == "layers.1.body.1.gate_proj.bias" || row["param"] == "layers.1.body.1.up_proj.bias")
      CHECK_MESSAGE(row["structure"]["stop_note"].get<std::string>().find("Gram matrix") != std::string::npos,
                    row["param"] << ": " << row["structure"]["stop_note"]);
  for (int count : {2, 3}) {
    std::vector<json> parts;
    const json merged = split_report(cfg, count, &parts);
    REQUIRE(merged.value("ok", false));
    CHECK(without_timing(merged) == whole);
    if (count != 2) continue;
    const int gate = part_of(parts, "layers.1.body.1.gate_proj.bias"), up = part_of(parts, "layers.1.body.1.up_proj.bias");
    INFO("the gate bias in part " << gate << ", the up bias in part " << up);
    CHECK(gate == up);
  }
}

TEST_CASE("parts: an attention's query and key biases share a part, where the key bias takes the query bias's rows") {
  // A key bias with RoPE beside its query bias takes its rows through the heads' columns of L,
  // whose matrices the query bias makes too (fewer keys than a head's width: 8 against 64): one
  // engine makes them once. Apart, the key bias would make them again; the plan keeps the pair
  // together, and the merged report is one engine's.
  const ExperimentConfig cfg = qwen2_style_block(7, 8, 256);
  const json whole = without_timing(analyze(cfg, AnalyzeOptions{}));
  REQUIRE(whole.value("ok", false));
  std::vector<json> parts;
  const json merged = split_report(cfg, 2, &parts);
  REQUIRE(merged.value("ok", false));
  CHECK(without_timing(merged) == whole);
  const int q = part_of(parts, "layers.0.body.1.q_proj.bias"), k = part_of(parts, "layers.0.body.1.k_proj.bias");
  INFO("the query bias in part " << q << ", the key bias in part " << k);
  CHECK(q == k);
}

TEST_CASE("parts: parts that do not belong together give an error, never a report") {
  const ExperimentConfig cfg = config_from(kBlock);
  AnalyzeOptions opt;
  opt.sweep = false;
  opt.part_count = 3;
  const json first = analyze(cfg, opt);
  REQUIRE(first.contains("pending"));
  opt.part_index = 1;
  const json one = analyze(cfg, opt);
  opt.part_index = 2;
  const json two = analyze(cfg, opt);
  REQUIRE(merge_parts(first, {one, two}).value("ok", false));
  REQUIRE(merge_parts(first, {two, one}).value("ok", false));  // any order

  auto message = [](const json& r) {
    CHECK_FALSE(r.value("ok", true));
    return r.value("error", json::object()).value("message", std::string());
  };
  CHECK(message(merge_parts(first, {one})).find("missing") != std::string::npos);
  CHECK(message(merge_parts(first, {one, one})).find("do not belong together") != std::string::npos);
  // A part of another config (another seed), or of another split.
  ExperimentConfig other = cfg;
  other.seed += 1;
  AnalyzeOptions o2 = opt;
  o2.part_index = 2;
  CHECK(message(merge_parts(first, {one, analyze(other, o2)})).find("do not belong together") != std::string::npos);
  o2.part_count = 4;
  o2.part_index = 2;
  CHECK(message(merge_parts(first, {one, analyze(cfg, o2)})).find("do not belong together") != std::string::npos);
  // A part's own error is the analysis's.
  const json failed = {{"ok", false}, {"error", {{"path", ""}, {"message", "out of memory"}}}};
  CHECK(message(merge_parts(first, {one, failed})) == "out of memory");
  // A part index outside the split.
  AnalyzeOptions bad = opt;
  bad.part_index = 3;
  CHECK(message(analyze(cfg, bad)).find("no such part") != std::string::npos);
}

TEST_CASE("parts: a row its budget stops is the same in a split") {
  // A bias's work budget counts the shared tail matrices it uses whether it made them or an
  // earlier bias of its engine did: where it stops must not follow how the biases are grouped.
  const ExperimentConfig cfg = config_from(kBlock);
  int stopped_total = 0, compared = 0;
  for (double max_flops : {3e8, 1e9}) {
    CAPTURE(max_flops);
    AnalyzeOptions opt;
    opt.sweep = false;
    opt.structure.max_flops = max_flops;
    const json whole = analyze(cfg, opt);
    REQUIRE(whole.value("ok", false));
    int stopped = 0;
    for (const json& row : whole["biases"])
      if (row["structure"].value("stop_rule", "") == "budget") ++stopped;
    MESSAGE("max_flops " << max_flops << ": " << stopped << " of " << whole["biases"].size() << " rows stopped on the budget");
    stopped_total += stopped;
    for (int count : {2, 3}) {
      CAPTURE(count);
      AnalyzeOptions part = opt;
      part.part_count = count;
      std::vector<json> parts;
      for (int k = 1; k < count; ++k) {
        part.part_index = k;
        parts.push_back(analyze(cfg, part));
      }
      part.part_index = 0;
      const json merged = merge_parts(analyze(cfg, part), parts);
      REQUIRE(merged.value("ok", false));
      INFO("differences (whole -> merged):\n" << differences(without_timing(whole), without_timing(merged)));
      CHECK(without_timing(whole) == without_timing(merged));
      ++compared;
    }
  }
  CHECK(stopped_total > 0);  // (else this tests nothing the preset test does not)
  CHECK(compared == 4);
}

TEST_CASE("parts: the work estimate decides the threads; the caller's count comes back") {
  // Natively, an analysis estimated under kThreadsMinWork runs on one thread whatever OpenMP
  // offers; a larger one keeps every thread. The work is the whole analysis's estimate, so every
  // part of a split decides alike. The caller's count (3 here, not this machine's core count)
  // comes back however the analysis ends.
#ifdef _OPENMP
  struct Restore {
    int before = omp_get_max_threads();
    ~Restore() { omp_set_num_threads(before); }
  } restore;
  omp_set_num_threads(3);
  AnalyzeOptions opt;
  opt.sweep = false;
  opt.invariances = false;
  opt.folds = false;
  auto threads = [&](const char* preset, const AnalyzeOptions& o) {
    const json r = analyze(config_from(find_preset(preset)->config), o);
    INFO(preset << ": " << r.dump().substr(0, 400));
    CHECK(omp_get_max_threads() == 3);  // (given back)
    if (!r.value("ok", false)) return -1;
    const json& timing = o.part_index > 0 ? r["part"]["timing_ms"] : r["timing_ms"];
    return timing.value("threads", 0);
  };
  CHECK(threads("article1-linear-layernorm", opt) == 1);  // (about 1.5 MFLOP)
  CHECK(threads("default", opt) == 3);                    // (about 0.2 GFLOP)
  // A part of a split: the default preset's 6 biases in 6 parts, one each, decide by the whole
  // analysis's work (about 0.2 GFLOP), not by their own part's.
  AnalyzeOptions part = opt;
  part.part_count = 6;
  for (int k = 1; k < 6; ++k) {
    part.part_index = k;
    CAPTURE(k);
    CHECK(threads("default", part) == 3);
  }
  // Cancelled at its second step, the first bias's, after the count was set (at "building",
  // the first, the model is not built yet): it comes back all the same.
  AnalyzeOptions cancel = opt;
  int polls = 0;
  cancel.cancelled = [&] { return ++polls == 2; };
  CHECK(threads("article1-linear-layernorm", cancel) == -1);
  CHECK(polls == 2);
#else
  MESSAGE("built without OpenMP: one thread, nothing to decide");
#endif
}

}  // namespace biaslab::test
