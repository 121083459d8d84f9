// Logprobs through the engine's actors: the executor returns them only for rows
// that ask, prompt logprobs cover every prompt token after the first (chunked
// prefill and a warm prefix cache included), and every value equals the CPU
// runner's teacher-forced log_softmax.
#include <doctest/doctest.h>

#include <cmath>

#include "runtime/step_batch_builder.hpp"
#include "tests/support/engine_harness.hpp"

using namespace troupe;
using namespace troupe::testing;

namespace {

const std::string story = "Once upon a time, there was a little girl named Lily. She loved to play outside.";

// Teacher-forced log_softmax of every position of `tokens`: row i predicts token i + 1.
std::vector<std::vector<double>> reference_logprobs(const std::vector<token_id>& tokens) {
  auto runner = make_runner(16, 64);
  const int vocab = runner->config().vocab_size;
  auto pool = shuffled_pool(64, 3);
  auto table = scattered_blocks(static_cast<int>(tokens.size()), 16, pool);
  runtime::step_batch_builder b(16, static_cast<int>(table.size()));
  b.add(tokens, 0, table, static_cast<int>(tokens.size()));
  auto batch = b.take(0);
  std::vector<float> logits(tokens.size() * static_cast<std::size_t>(vocab));
  runner->execute(batch, logits);
  std::vector<std::vector<double>> out;
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    std::span<const float> row(logits.data() + i * vocab, vocab);
    double max = *std::max_element(row.begin(), row.end()), sum = 0;
    for (float x : row)
      sum += std::exp(x - max);
    std::vector<double> lp(vocab);
    for (int t = 0; t < vocab; ++t)
      lp[t] = row[t] - max - std::log(sum);
    out.push_back(std::move(lp));
  }
  return out;
}

request_spec logprob_spec(int logprobs, int prompt_logprobs) {
  auto spec = greedy_spec(story, 10);
  spec.params.logprobs = logprobs;
  spec.params.prompt_logprobs = prompt_logprobs;
  return spec;
}

} // namespace

TEST_CASE("output and prompt logprobs equal the CPU runner's teacher-forced log_softmax") {
  engine_fixture f(stories_engine_config());
  auto out = f.run({logprob_spec(3, 2)}).at(0);
  REQUIRE(out.finished);
  REQUIRE(out.logprobs.size() == out.token_ids.size());
  REQUIRE(out.prompt_logprobs.size() == static_cast<std::size_t>(out.final.usage.prompt_tokens));
  std::vector<token_id> all;
  for (const auto& p : out.prompt_logprobs)
    all.push_back(p.id);
  all.insert(all.end(), out.token_ids.begin(), out.token_ids.end());
  auto ref = reference_logprobs(all);

  CHECK(std::isnan(out.prompt_logprobs[0].logprob)); // nothing predicts the first token
  CHECK(out.prompt_logprobs[0].top.empty());
  for (std::size_t i = 1; i < out.prompt_logprobs.size(); ++i) {
    const auto& p = out.prompt_logprobs[i];
    CAPTURE(i);
    CHECK(p.logprob == doctest::Approx(ref[i - 1][p.id]).epsilon(1e-4));
    REQUIRE(p.top.size() == 2);
    CHECK(p.top[0].logprob >= p.top[1].logprob);
    CHECK(p.top[0].logprob == doctest::Approx(ref[i - 1][p.top[0].id]).epsilon(1e-4));
  }
  const std::size_t np = out.prompt_logprobs.size();
  for (std::size_t i = 0; i < out.logprobs.size(); ++i) {
    const auto& lp = out.logprobs[i];
    CAPTURE(i);
    CHECK(lp.id == out.token_ids[i]);
    CHECK(lp.logprob == doctest::Approx(ref[np + i - 1][lp.id]).epsilon(1e-4));
    REQUIRE(lp.top.size() == 3);
    CHECK(lp.top[0].id == lp.id); // greedy: the chosen token is the most likely one
    CHECK_FALSE(lp.token.empty());
  }
}

TEST_CASE("prompt logprobs are complete and identical with chunked prefill and a warm prefix cache") {
  auto cfg = stories_engine_config();
  cfg.max_num_batched_tokens = 5; // the prompt is prefilled in chunks of at most 5 tokens
  engine_fixture f(cfg);
  auto first = f.run({logprob_spec(-1, 1)}).at(0);
  auto second = f.run({logprob_spec(-1, 1)}).at(0); // its prefix blocks are cached now
  REQUIRE(first.finished);
  REQUIRE(second.finished);
  REQUIRE(first.prompt_logprobs.size() == static_cast<std::size_t>(first.final.usage.prompt_tokens));
  REQUIRE(second.prompt_logprobs.size() == first.prompt_logprobs.size());
  for (std::size_t i = 1; i < first.prompt_logprobs.size(); ++i)
    CHECK(second.prompt_logprobs[i].logprob == doctest::Approx(first.prompt_logprobs[i].logprob).epsilon(1e-5));
  CHECK(first.logprobs.empty());                // not asked
  CHECK(second.final.usage.cached_tokens == 0); // prompt logprobs bypass the prefix cache
  auto unscored = greedy_spec(story, 10);
  auto third = f.run({unscored}).at(0);
  CHECK(third.final.usage.cached_tokens > 0); // others still use it
  CHECK(third.token_ids == first.token_ids);
}

TEST_CASE("rows that ask for logprobs share a step with rows that do not") {
  engine_fixture f(stories_engine_config());
  auto with = logprob_spec(0, -1);
  auto without = greedy_spec(story, 10);
  auto outs = f.run({with, without, with});
  for (const auto& o : outs)
    REQUIRE(o.finished);
  CHECK(outs[0].logprobs.size() == outs[0].token_ids.size());
  CHECK(outs[0].logprobs[0].top.empty()); // logprobs=0: the chosen token only
  CHECK(outs[1].logprobs.empty());
  CHECK(outs[1].prompt_logprobs.empty());
  CHECK(outs[0].token_ids == outs[1].token_ids);
  for (std::size_t i = 0; i < outs[0].logprobs.size(); ++i)
    CHECK(outs[0].logprobs[i].logprob == doctest::Approx(outs[2].logprobs[i].logprob).epsilon(1e-5));
}

TEST_CASE("logprobs above 20 are refused with a clear error") {
  engine_fixture f(stories_engine_config());
  auto out = f.run({logprob_spec(21, -1)}).at(0);
  REQUIRE(out.failed);
  CHECK(out.error.code == "invalid_request");
  CHECK(out.error.message.find("logprobs must be in [0, 20]") != std::string::npos);
}
