// Speculative decoding through the actors (scheduler -> draft -> kv_cache ->
// executor's verifier): whatever drafts — the target itself, its first layers,
// n-gram lookup, a model with random weights — greedy output is token for token
// what plain decoding gives; speculating and plain sequences share steps;
// preemption of a speculating sequence keeps its output; a seeded sampled
// request gets plain decoding's tokens whatever speculates; no block leaks.
#include <doctest/doctest.h>

#include "tests/support/engine_harness.hpp"

using namespace troupe;
using namespace troupe::testing;

namespace {

const std::vector<std::string> prompts = {"Once upon a time", "The little dog", "Lily and Tom went to the park",
                                          "One day, a big bird"};

std::vector<std::vector<token_id>> greedy_outputs(const engine_config& cfg, int tokens) {
  engine_fixture f(cfg);
  std::vector<request_spec> specs;
  for (const auto& p : prompts)
    specs.push_back(greedy_spec(p, tokens));
  std::vector<std::vector<token_id>> out;
  for (auto& o : f.run(specs)) {
    REQUIRE(o.finished);
    out.push_back(o.token_ids);
  }
  return out;
}

engine_config speculative_config(const std::string& method, int k, bool adaptive) {
  auto cfg = stories_engine_config();
  cfg.speculative_method = method;
  cfg.num_speculative_tokens = k;
  cfg.adaptive_speculation = adaptive;
  cfg.draft_model = stories_dir().string();
  return cfg;
}

struct speculative_run {
  std::vector<std::vector<token_id>> outputs;
  engine_stats stats;
};

speculative_run run_speculative(const engine_config& cfg, int tokens) {
  engine_fixture f(cfg);
  std::vector<request_spec> specs;
  for (const auto& p : prompts)
    specs.push_back(greedy_spec(p, tokens));
  speculative_run r;
  for (auto& o : f.run(specs)) {
    REQUIRE(o.finished);
    CHECK(o.final.usage.completion_tokens == tokens);
    r.outputs.push_back(o.token_ids);
  }
  r.stats = f.settled_stats();
  CHECK(r.stats.device_blocks_free == r.stats.device_blocks_total);  // the rejected slots came back too
  return r;
}

} // namespace

TEST_CASE("the target as its own draft: every draft token is accepted and the output is plain greedy's") {
  const auto reference = greedy_outputs(stories_engine_config(), 60);
  auto r = run_speculative(speculative_config("draft", 3, false), 60);
  CHECK(r.outputs == reference);
  CHECK(r.stats.spec_drafted > 0);
  CHECK(r.stats.spec_accepted == r.stats.spec_drafted);
  // k = 3 accepted + 1 bonus per verification: far fewer steps than tokens.
  CHECK(r.stats.spec_verifications * 4 >= r.stats.spec_accepted + r.stats.spec_verifications);
  CHECK(r.stats.steps < 4u * 60u / 2u);
}

TEST_CASE("self-speculation with 2 of 5 layers, n-gram lookup and a random-weight draft keep greedy output exact") {
  const auto reference = greedy_outputs(stories_engine_config(), 60);
  for (int k : {1, 3, 5}) {
    CAPTURE(k);
    auto self = speculative_config("self", k, false);
    self.draft_layers = 2;
    auto r = run_speculative(self, 60);
    CHECK(r.outputs == reference);
    CHECK(r.stats.spec_drafted > 0);
    CHECK(r.stats.spec_accepted < r.stats.spec_drafted);  // a 2-layer draft is not the model

    auto ngram = run_speculative(speculative_config("ngram", k, false), 60);
    CHECK(ngram.outputs == reference);

    auto dummy = speculative_config("draft", k, false);
    dummy.draft_load_format = "dummy";
    auto d = run_speculative(dummy, 60);
    CHECK(d.outputs == reference);
    CHECK(d.stats.spec_drafted > 0);
  }
}

TEST_CASE("speculating and plain sequences share steps, and a request can turn speculation off") {
  const auto reference = greedy_outputs(stories_engine_config(), 40);
  auto cfg = speculative_config("self", 3, false);
  engine_fixture f(cfg);
  std::vector<request_spec> specs;
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    specs.push_back(greedy_spec(prompts[i], 40));
    if (i % 2 == 1)
      specs.back().num_speculative_tokens = 0;  // plain decoding for this one
  }
  auto outs = f.run(specs);
  for (std::size_t i = 0; i < outs.size(); ++i) {
    REQUIRE(outs[i].finished);
    CHECK(outs[i].token_ids == reference[i]);
  }
  auto stats = f.settled_stats();
  CHECK(stats.spec_verifications > 0);
  // Two plain sequences decode one token per step each: 2 x 39 plain decodes at least show up as steps.
  CHECK(stats.steps >= 39u);
}

TEST_CASE("sampled requests speculate too: seeded output does not depend on the batch") {
  auto cfg = speculative_config("draft", 3, false);
  cfg.draft_load_format = "dummy";  // q differs from p: rejections happen
  auto sampled = [](std::optional<std::uint64_t> seed) {
    auto s = greedy_spec("Once upon a time", 40);
    s.params.temperature = 0.8f;
    s.params.top_p = 0.95f;
    s.params.seed = seed;
    return s;
  };
  engine_fixture f(cfg);
  auto alone = f.run({sampled(7)}).at(0);
  // The unseeded one verifies against the draft's rows (rejection sampling and residual draws).
  auto together = f.run({sampled(11), sampled(7), sampled(std::nullopt)});
  REQUIRE(alone.finished);
  CHECK(together.at(1).token_ids == alone.token_ids);
  REQUIRE(together.at(2).finished);
  CHECK(together.at(2).final.usage.completion_tokens == 40);
  auto stats = f.settled_stats();
  CHECK(stats.spec_drafted > 0);
  CHECK(stats.spec_accepted < stats.spec_drafted);
  CHECK(stats.device_blocks_free == stats.device_blocks_total);
}

TEST_CASE("preempting a speculating sequence, by swap and by recompute, keeps its output") {
  const auto reference = greedy_outputs(stories_engine_config(), 120);
  for (const char* mode : {"swap", "recompute"}) {
    CAPTURE(mode);
    auto cfg = speculative_config("self", 3, false);
    cfg.preemption_mode = mode;
    cfg.num_device_blocks = 20;  // four sequences of ~130 tokens need ~36 blocks of 16: they take turns
    auto r = run_speculative(cfg, 120);
    CHECK(r.outputs == reference);
    CHECK(r.stats.preemptions_swap + r.stats.preemptions_recompute >= 1);
    CHECK(r.stats.spec_verifications > 0);
  }
}

TEST_CASE("adaptive k backs off when drafts are rejected and stays exact") {
  const auto reference = greedy_outputs(stories_engine_config(), 80);
  auto cfg = speculative_config("draft", 4, true);
  cfg.draft_load_format = "dummy";
  auto adaptive = run_speculative(cfg, 80);
  CHECK(adaptive.outputs == reference);
  cfg.adaptive_speculation = false;
  auto fixed = run_speculative(cfg, 80);
  CHECK(fixed.outputs == reference);
  // A random draft is nearly always wrong: adapting drafts far fewer tokens than a fixed k = 4.
  CHECK(adaptive.stats.spec_drafted * 2 < fixed.stats.spec_drafted);
}

TEST_CASE("a bad speculative configuration is refused at start with the key named") {
  auto cfg = speculative_config("self", 3, false);
  cfg.draft_layers = 5;  // all of the model's layers: not a draft
  CHECK_THROWS_WITH_AS(engine_fixture{cfg}, doctest::Contains("speculative.draft-layers"), config_error);
  auto method = stories_engine_config();
  method.speculative_method = "medusa";
  CHECK_THROWS_WITH_AS(engine_fixture{method}, doctest::Contains("speculative.method"), config_error);
  auto missing = stories_engine_config();
  missing.speculative_method = "draft";
  CHECK_THROWS_WITH_AS(engine_fixture{missing}, doctest::Contains("speculative.draft-model"), config_error);
}

TEST_CASE("a seeded sampled request gets plain decoding's tokens whatever speculates: adaptive k, preemption, batching") {
  auto sampled = [](const std::string& prompt, std::uint64_t seed) {
    auto s = greedy_spec(prompt, 100);
    s.params.temperature = 0.8f;
    s.params.top_p = 0.95f;
    s.params.seed = seed;
    return s;
  };
  std::vector<request_spec> specs;
  for (std::size_t i = 0; i < prompts.size(); ++i)
    specs.push_back(sampled(prompts[i], 100 + i));
  auto outputs_of = [&](const engine_config& cfg) {
    engine_fixture f(cfg);
    std::vector<std::vector<token_id>> out;
    for (auto& o : f.run(specs)) {
      REQUIRE(o.finished);
      out.push_back(o.token_ids);
    }
    return std::make_pair(out, f.settled_stats());
  };
  const auto plain = outputs_of(stories_engine_config()).first;
  // Alone, each request gives the same tokens as in the batch.
  {
    engine_fixture f(stories_engine_config());
    CHECK(f.run({specs[2]}).at(0).token_ids == plain[2]);
  }
  SUBCASE("a random-weight draft with adaptive k: rejections, and k changing with timing") {
    auto cfg = speculative_config("draft", 4, true);
    cfg.draft_load_format = "dummy";
    auto [out, stats] = outputs_of(cfg);
    CHECK(out == plain);
    CHECK(stats.spec_drafted > 0);
    CHECK(stats.spec_accepted < stats.spec_drafted);
  }
  SUBCASE("self-speculation under block pressure: preempted by swap and by recompute") {
    for (const char* mode : {"swap", "recompute"}) {
      CAPTURE(mode);
      auto cfg = speculative_config("self", 3, true);
      cfg.preemption_mode = mode;
      cfg.num_device_blocks = 20;
      auto [out, stats] = outputs_of(cfg);
      CHECK(out == plain);
      CHECK(stats.preemptions_swap + stats.preemptions_recompute >= 1);
      CHECK(stats.spec_accepted > 0);
      CHECK(stats.device_blocks_free == stats.device_blocks_total);
    }
  }
}
