// n and best_of through the engine's actors: a request's choices fork off its
// sequence after one prefill of the prompt, each draws what its own seed draws
// alone, best_of returns the n best by their logprob sums, and cancel, echo,
// prompt logprobs, speculation and a one-token prompt work for every choice.
#include <doctest/doctest.h>

#include <numeric>

#include "runtime/choices.hpp"
#include "tests/support/engine_harness.hpp"

using namespace troupe;
using namespace troupe::testing;

namespace {
request_spec sampled(int n, std::uint64_t seed, int max_tokens, std::size_t prompt_len = 40) {
  request_spec s;
  s.prompt_ids = story_prompt(prompt_len);
  s.params.temperature = 1.0f;
  s.params.seed = seed;
  s.params.max_tokens = max_tokens;
  s.params.ignore_eos = true;
  s.params.n = n;
  return s;
}

engine_config without_prefix_cache() {
  auto cfg = stories_engine_config();
  cfg.enable_prefix_caching = false; // every prompt token computed is counted
  return cfg;
}

// Choice i of a request seeded with `seed`, asked for alone.
request_outcome alone(engine_fixture& fx, request_spec s, std::uint64_t seed, int i) {
  s.params.n = 1;
  s.params.best_of = 0;
  s.params.seed = runtime::choice_seed(seed, i);
  auto out = fx.run({s});
  REQUIRE(out[0].finished);
  return out[0];
}
} // namespace

TEST_CASE("n = 4: four choices from one prefill of the prompt, each what its own seed draws alone") {
  engine_fixture fx(without_prefix_cache());
  const auto spec = sampled(4, 7, 24);
  auto out = fx.run({spec});
  REQUIRE(out[0].finished);
  const auto& r = out[0];
  REQUIRE(r.choices.size() == 4);
  for (int i = 0; i < 4; ++i) {
    INFO("choice " << i);
    const auto& c = r.choices.at(i);
    CHECK(c.token_ids.size() == 24);
    CHECK(c.finish_reason == "length");
    CHECK(c.finish_deltas == 1);
  }
  CHECK(r.final.reason == "length");
  CHECK(r.final.usage.prompt_tokens == 40);
  CHECK(r.final.usage.completion_tokens == 4 * 24);
  // The prompt's first 39 tokens were computed once; its last one once per choice.
  auto stats = fx.settled_stats();
  CHECK(stats.prefill_tokens == 39 + 4);
  CHECK(stats.requests_finished == 1);
  CHECK(stats.running == 0);
  CHECK(stats.device_blocks_free == stats.device_blocks_total);
  // Four seeds, four streams: not all the same.
  bool all_same = true;
  for (int i = 1; i < 4; ++i)
    all_same &= r.choices.at(i).token_ids == r.choices.at(0).token_ids;
  CHECK_FALSE(all_same);
  for (int i = 0; i < 4; ++i) {
    INFO("choice " << i);
    auto single = alone(fx, spec, 7, i);
    CHECK(single.token_ids == r.choices.at(i).token_ids);
    CHECK(single.text == r.choices.at(i).text);
  }
}

TEST_CASE("best_of = 4, n = 2: the two choices with the highest logprob sums, best first, usage counts all four") {
  engine_fixture fx(without_prefix_cache());
  auto spec = sampled(2, 11, 12);
  spec.params.best_of = 4;
  spec.params.logprobs = 0;
  auto out = fx.run({spec});
  REQUIRE(out[0].finished);
  const auto& r = out[0];
  REQUIRE(r.choices.size() == 2);
  CHECK(r.final.usage.completion_tokens == 4 * 12);
  std::vector<double> sums;
  std::vector<std::vector<token_id>> tokens;
  for (int i = 0; i < 4; ++i) {
    auto single = alone(fx, spec, 11, i);
    double sum = 0;
    for (const auto& lp : single.logprobs)
      sum += lp.logprob;
    sums.push_back(sum);
    tokens.push_back(single.token_ids);
  }
  const auto best = runtime::best_choices(sums, 2);
  for (int rank = 0; rank < 2; ++rank) {
    INFO("rank " << rank);
    const auto& c = r.choices.at(rank);
    CHECK(c.token_ids == tokens[static_cast<std::size_t>(best[static_cast<std::size_t>(rank)])]);
    REQUIRE(c.logprobs.size() == 12);
    CHECK(c.finish_reason == "length");
  }
  // Without logprobs asked the same two come back, with none attached.
  spec.params.logprobs = -1;
  auto quiet = fx.run({spec});
  REQUIRE(quiet[0].finished);
  for (int rank = 0; rank < 2; ++rank) {
    CHECK(quiet[0].choices.at(rank).token_ids == r.choices.at(rank).token_ids);
    CHECK(quiet[0].choices.at(rank).logprobs.empty());
  }
}

TEST_CASE("cancelling a request with n = 4 ends every choice and frees every block") {
  engine_fixture fx(stories_engine_config());
  engine_client client(fx.sys, fx.engine);
  auto id = client.send(sampled(4, 3, 400));
  client.pump_until([&] {
    auto& o = client.outcomes[id];
    if (o.choices.size() < 4)
      return false;
    for (const auto& [i, c] : o.choices)
      if (c.token_ids.size() < 3)
        return false;
    return true;
  });
  caf::anon_send(fx.engine, cancel_atom::value, id);
  client.pump_until([&] { return client.ended(id); });
  REQUIRE(client.outcomes[id].finished);
  CHECK(client.outcomes[id].final.reason == "cancelled");
  auto stats = fx.settled_stats();
  CHECK(stats.running == 0);
  CHECK(stats.waiting == 0);
  CHECK(stats.device_blocks_free == stats.device_blocks_total);
  CHECK(stats.requests_aborted == 1);
}

TEST_CASE("every choice carries the echoed prompt and its logprobs on its first delta") {
  engine_fixture fx(stories_engine_config());
  request_spec s;
  s.prompt = "Once upon a time";
  s.echo = true;
  s.params.n = 3;
  s.params.seed = 5;
  s.params.max_tokens = 6;
  s.params.prompt_logprobs = 1;
  auto out = fx.run({s});
  REQUIRE(out[0].finished);
  REQUIRE(out[0].choices.size() == 3);
  const auto prompt_len = static_cast<std::size_t>(out[0].final.usage.prompt_tokens);
  for (const auto& [i, c] : out[0].choices) {
    INFO("choice " << i);
    CHECK(c.prompt_text == "Once upon a time");
    CHECK(c.prompt_logprobs == prompt_len);
    CHECK(c.finish_deltas == 1);
  }
}

TEST_CASE("a one-token prompt: its choices start together, each from its own seed") {
  engine_fixture fx(stories_engine_config());
  auto spec = sampled(3, 21, 10, 1);
  auto out = fx.run({spec});
  REQUIRE(out[0].finished);
  REQUIRE(out[0].choices.size() == 3);
  for (int i = 0; i < 3; ++i) {
    INFO("choice " << i);
    CHECK(alone(fx, spec, 21, i).token_ids == out[0].choices.at(i).token_ids);
  }
  CHECK(fx.settled_stats().device_blocks_free == fx.stats().device_blocks_total);
}

TEST_CASE("greedy choices under n-gram speculation are each the greedy output") {
  auto cfg = stories_engine_config();
  cfg.speculative_method = "ngram";
  engine_fixture fx(cfg);
  auto one = greedy_spec("Once upon a time, there was a little girl. Once upon a time", 40);
  auto single = fx.run({one});
  REQUIRE(single[0].finished);
  one.params.n = 3;
  auto out = fx.run({one});
  REQUIRE(out[0].finished);
  REQUIRE(out[0].choices.size() == 3);
  for (const auto& [i, c] : out[0].choices) {
    INFO("choice " << i);
    CHECK(c.token_ids == single[0].token_ids);
  }
  CHECK(fx.stats().spec_verifications > 0);
}

TEST_CASE("more choices than the engine's seats is a clear error, and the engine keeps serving") {
  auto cfg = stories_engine_config();
  cfg.max_num_seqs = 4;
  engine_fixture fx(cfg);
  auto too_many = sampled(5, 1, 4);
  auto best_of = sampled(2, 1, 4);
  best_of.params.best_of = 6;
  auto out = fx.run({too_many, best_of, sampled(4, 1, 4)});
  REQUIRE(out[0].failed);
  CHECK(out[0].error.code == "invalid_request");
  CHECK(out[0].error.message == "n = 5 needs 5 sequences at once; this engine runs at most 4 (engine.max-num-seqs)");
  REQUIRE(out[1].failed);
  CHECK(out[1].error.message ==
        "best_of = 6 needs 6 sequences at once; this engine runs at most 4 (engine.max-num-seqs)");
  REQUIRE(out[2].finished);
  CHECK(out[2].choices.size() == 4);
}

TEST_CASE(
    "blocks short: choices are preempted one by one, by swap and by recompute, and each still draws what it draws "
    "alone") {
  for (std::string mode : {"swap", "recompute"}) {
    CAPTURE(mode);
    auto cfg = stories_engine_config();
    cfg.preemption_mode = mode;
    cfg.num_device_blocks = 24; // four 200-token choices of a 40-token prompt need 2 shared + 4 x 11 blocks
    engine_fixture fx(cfg);
    const auto spec = sampled(4, 9, 200);
    auto out = fx.run({spec});
    REQUIRE(out[0].finished);
    REQUIRE(out[0].choices.size() == 4);
    auto stats = fx.settled_stats();
    CHECK(stats.preemptions_swap + stats.preemptions_recompute >= 1);
    CHECK(stats.device_blocks_free == stats.device_blocks_total);
    CHECK(stats.host_blocks_free == stats.host_blocks_total);
    auto roomy = cfg;
    roomy.num_device_blocks = 0;
    engine_fixture solo(roomy);
    for (int i = 0; i < 4; ++i) {
      INFO("choice " << i);
      CHECK(alone(solo, spec, 9, i).token_ids == out[0].choices.at(i).token_ids);
    }
  }
}
