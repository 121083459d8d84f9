// Sliding-window attention through the actors, on a copy of stories260k that says it is a Mistral whose every
// layer sees the last 32 positions: greedy output equals a CPU runner stepped by hand over a table that keeps
// every block; the blocks behind every window go back to the pool as sequences grow, so a pool of 12 blocks of 16
// (192 positions) serves three 400-position sequences at once; n-gram speculation (drafts rejected and trimmed),
// preemption by swap or recompute, and prefix hits on blocks given back keep the output; nothing leaks.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>

#include "runtime/cpu/cpu_model_runner.hpp"
#include "runtime/step_batch_builder.hpp"
#include "tests/support/engine_harness.hpp"
#include "tests/support/sliding_stories.hpp"

using namespace troupe;
using namespace troupe::testing;

namespace {

constexpr int window = 32, block_size = 16;

// Greedy tokens after `prompt` from a CPU runner stepped by hand: the prompt in one prefill, then one decode step a
// token, over a table that holds every position (nothing released).
std::vector<token_id> reference_greedy(const std::filesystem::path& model, const std::vector<token_id>& prompt,
                                       int tokens) {
  const auto cfg = runtime::load_model_config(model);
  REQUIRE(cfg.every_layer_window() == window);
  const auto weights = runtime::load_model_weights(runtime::tensor_store::open(model), cfg);
  const int positions = static_cast<int>(prompt.size()) + tokens;
  const int blocks = (positions + block_size - 1) / block_size;
  runtime::cpu_model_runner runner(cfg, weights, runtime::kv_cache_config{blocks, block_size}, 1);
  std::vector<std::int32_t> table(static_cast<std::size_t>(blocks));
  for (int b = 0; b < blocks; ++b)
    table[static_cast<std::size_t>(b)] = blocks - 1 - b;
  std::vector<token_id> out;
  std::vector<float> logits(static_cast<std::size_t>(cfg.vocab_size));
  std::vector<token_id> next = prompt;
  int start = 0;
  while (static_cast<int>(out.size()) < tokens) {
    runtime::step_batch_builder step(block_size, blocks);
    step.add(next, start, table, 1);
    runner.execute(step.take(static_cast<std::uint64_t>(start)), logits);
    start += static_cast<int>(next.size());
    const auto best = static_cast<token_id>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    out.push_back(best);
    next = {best};
  }
  return out;
}

std::vector<std::vector<token_id>> prompts() {
  const auto story = story_prompt(200);
  return {{story.begin(), story.begin() + 50},
          {story.begin(), story.begin() + 45}, // shares the first 2 full blocks with the first
          {story.begin() + 100, story.begin() + 140}};
}

engine_config sliding_config(const std::filesystem::path& model) {
  auto cfg = stories_engine_config();
  cfg.model_path = model.string();
  cfg.block_size = block_size;
  cfg.num_device_blocks = 12; // 192 positions: three 400-position sequences fit only by giving blocks back
  cfg.num_host_blocks = 64;
  cfg.max_num_batched_tokens = 64; // a sequence holds at most 31 + 64 positions: any context fits
  cfg.max_num_seqs = 3;
  return cfg;
}

struct served {
  std::vector<std::vector<token_id>> outputs;
  engine_stats stats;
};

served serve(const engine_config& cfg, int tokens) {
  engine_fixture f(cfg);
  std::vector<request_spec> specs;
  for (const auto& p : prompts()) {
    auto s = greedy_spec("", tokens);
    s.prompt_ids = p;
    specs.push_back(s);
  }
  served r;
  for (auto& o : f.run(specs)) {
    REQUIRE_MESSAGE(o.finished, o.error.message);
    CHECK(o.final.usage.completion_tokens == tokens);
    r.outputs.push_back(o.token_ids);
  }
  r.stats = f.settled_stats();
  CHECK(r.stats.device_blocks_free == r.stats.device_blocks_total); // every held block came back
  return r;
}

} // namespace

TEST_CASE(
    "a sliding-window model served through the actors gives the hand-stepped runner's tokens in a pool "
    "smaller than its sequences") {
  sliding_stories model(window);
  const int tokens = 350; // 390-400 positions a sequence, 25 blocks each without release
  std::vector<std::vector<token_id>> reference;
  for (const auto& p : prompts())
    reference.push_back(reference_greedy(model.dir.path, p, tokens));

  const auto plain = serve(sliding_config(model.dir.path), tokens);
  CHECK(plain.outputs == reference);
  // Each sequence holds at most ceil(33 / 16) + 1 = 4 blocks at a time; all the others went back.
  CHECK(plain.stats.window_released_blocks >= 3 * (390 / block_size - 4));

  auto speculative = sliding_config(model.dir.path);
  speculative.speculative_method = "ngram";
  speculative.num_speculative_tokens = 3;
  speculative.adaptive_speculation = false;
  const auto drafted = serve(speculative, tokens);
  CHECK(drafted.outputs == reference);
  CHECK(drafted.stats.spec_drafted > drafted.stats.spec_accepted); // some drafts were rejected and trimmed
  CHECK(drafted.stats.window_released_blocks > 0);
}

TEST_CASE("a sliding-window model swapped out and back keeps its output") {
  sliding_stories model(window);
  const int tokens = 200;
  auto cfg = sliding_config(model.dir.path);
  // 31 + 32 positions: 5 blocks hold any one sequence, but not two that decode with 3 blocks each (32 positions
  // over 3 blocks unless their window starts on a block's first slot): some are preempted.
  cfg.num_device_blocks = 5;
  cfg.max_num_batched_tokens = 32;
  cfg.preemption_mode = "swap";
  std::vector<std::vector<token_id>> reference;
  for (const auto& p : prompts())
    reference.push_back(reference_greedy(model.dir.path, p, tokens));
  const auto swapped = serve(cfg, tokens);
  CHECK(swapped.outputs == reference);
  CHECK(swapped.stats.preemptions_swap + swapped.stats.preemptions_recompute > 0);
  CHECK(swapped.stats.window_released_blocks > 0);

  cfg.preemption_mode = "recompute";
  const auto recomputed = serve(cfg, tokens);
  CHECK(recomputed.outputs == reference);
}

TEST_CASE("blocks given back behind the window still serve a later prompt's prefix hit") {
  sliding_stories model(window);
  const auto cfg = sliding_config(model.dir.path);
  const auto p = prompts();
  engine_fixture f(cfg);
  auto first = greedy_spec("", 100);
  first.prompt_ids = p[0];
  REQUIRE(f.run({first})[0].finished);
  const auto before = f.settled_stats();
  // Its first blocks went back while it ran (its 150 positions never fit 12 blocks at once).
  CHECK(before.window_released_blocks >= 150 / block_size - 4);
  auto second = greedy_spec("", 100);
  second.prompt_ids = p[1]; // the first prompt's first 45 tokens
  const auto out = f.run({second});
  REQUIRE(out[0].finished);
  // All but its last token (computed for its logits): 2 full blocks and 12 tokens of the third.
  CHECK(out[0].final.usage.cached_tokens == 44);
  CHECK(out[0].token_ids == reference_greedy(model.dir.path, p[1], 100));
}
