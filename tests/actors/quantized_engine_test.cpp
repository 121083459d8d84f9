// The engine serves a quantized checkpoint (dequantized at load) exactly as it serves the same
// weights dequantized by the test and written as an ordinary fp32 checkpoint: the same greedy
// token ids, on one rank and on 2 tensor-parallel ranks (each dequantizing only its slices).
// model.quantization=fp8 serves the bundled model as the test's own FP8 rounding of it.
#include <doctest/doctest.h>

#include <vector>

#include "runtime/fp8_quantization.hpp"
#include "tests/support/engine_harness.hpp"
#include "tests/support/quantized_checkpoint.hpp"
#include "tests/support/temp_dir.hpp"
#include "tests/support/tensor_parallel_checks.hpp"

using namespace troupe;
using namespace troupe::testing;

namespace {

std::vector<std::vector<token_id>> greedy_ids(const std::filesystem::path& model, int ranks,
                                              const std::string& quantization = "none") {
  engine_config cfg = with_ranks(stories_engine_config(), ranks);
  cfg.model_path = model.string();
  cfg.quantization = quantization;
  std::vector<request_spec> specs;
  for (const char* prompt : {"Once upon a time", "The little dog", "Lily wanted to"})
    specs.push_back(greedy_spec(prompt, 48));
  engine_fixture fx(cfg);
  std::vector<std::vector<token_id>> out;
  for (const request_outcome& o : fx.run(specs)) {
    REQUIRE(o.finished);
    out.push_back(o.token_ids);
  }
  return out;
}

} // namespace

TEST_CASE("a quantized checkpoint gives the greedy token ids of its reference dequantization, at 1 and 2 ranks") {
  const quant_format formats[] = {{"fp8 per-channel", quant_kind::fp8_channel},
                                  {"fp8 block 16x32", quant_kind::fp8_block, 16, 32},
                                  {"awq group 32", quant_kind::awq, 0, 0, 32}};
  for (const quant_format& f : formats) {
    CAPTURE(f.label);
    temp_dir quantized("troupe_quantized_engine"), reference("troupe_quantized_engine_ref");
    write_fp32_stories(reference.path, write_quantized_stories(quantized.path, f).weights);
    const auto expected = greedy_ids(reference.path, 1);
    CHECK(expected.at(0).size() == 48);
    for (const int ranks : {1, 2}) {
      CAPTURE(ranks);
      CHECK(greedy_ids(quantized.path, ranks) == expected);
    }
  }
}

TEST_CASE("model.quantization=fp8 gives the greedy token ids of the bundled model rounded to FP8 a row at a time") {
  runtime::model_weights rounded = stories_model().weights;
  runtime::quantize_linears_fp8(rounded, static_cast<std::size_t>(stories_model().config.hidden_size));
  CHECK(rounded.layers.at(0).q_proj != stories_model().weights.layers.at(0).q_proj); // really rounded
  temp_dir reference("troupe_fp8_engine_ref");
  write_fp32_stories(reference.path, rounded);
  const auto expected = greedy_ids(reference.path, 1);
  REQUIRE(expected.at(0).size() == 48);
  CHECK(greedy_ids(stories_dir(), 1, "fp8") == expected);
  // Two ranks round their own slices of o_proj and down_proj (a scale per row of the slice):
  // other values, so only that they serve is checked here.
  for (const auto& ids : greedy_ids(stories_dir(), 2, "fp8"))
    CHECK(ids.size() == 48);
}
