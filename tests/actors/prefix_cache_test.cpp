// Prefix caching through the actors: a second request that shares a
// multi-block prompt prefix computes only its new tokens (the stats show it)
// and produces exactly what a cache-miss run produces.
#include <doctest/doctest.h>

#include "tests/support/engine_harness.hpp"

using namespace troupe;
using namespace troupe::testing;

namespace {
std::vector<token_id> story_ids(std::size_t n, std::size_t skip = 0) {
  auto golden = read_json(stories_dir() / "golden_greedy.json");
  std::vector<token_id> all;
  for (const auto& c : golden.at("cases").as_array())
    for (auto t : json_array<token_id>(c.at("generated_ids")))
      all.push_back(t);
  return {all.begin() + skip, all.begin() + skip + n};
}
} // namespace

TEST_CASE("a shared 3-block prefix is computed once and the second answer equals a cache-miss run") {
  const int bs = 16;
  auto prefix = story_ids(3 * bs);
  prefix.insert(prefix.begin(), 1);  // BOS + 48 story tokens: 3 full blocks and one more token
  auto first = greedy_spec("", 20);
  first.prompt_ids = prefix;
  first.prompt_ids.push_back(300);
  auto second = greedy_spec("", 20);
  second.prompt_ids = prefix;
  for (auto t : story_ids(10, 200))
    second.prompt_ids.push_back(t);

  auto cfg = stories_engine_config();
  cfg.block_size = bs;
  engine_fixture fx(cfg);
  auto a = fx.run({first});
  REQUIRE(a[0].finished);
  auto before = fx.settled_stats();
  auto b = fx.run({second});
  REQUIRE(b[0].finished);
  auto after = fx.settled_stats();

  // 3 full blocks (48 tokens) came from the cache; the rest of the prompt was computed.
  CHECK(b[0].final.usage.cached_tokens == 3 * bs);
  CHECK(after.prefix_hits - before.prefix_hits == 3 * bs);
  const auto prompt_len = static_cast<std::uint64_t>(second.prompt_ids.size());
  CHECK(after.prefill_tokens - before.prefill_tokens == prompt_len - 3 * bs);

  auto miss_cfg = cfg;
  miss_cfg.enable_prefix_caching = false;
  engine_fixture miss(miss_cfg);
  auto c = miss.run({second});
  REQUIRE(c[0].finished);
  CHECK(c[0].final.usage.cached_tokens == 0);
  CHECK(b[0].token_ids == c[0].token_ids);
  CHECK(b[0].text == c[0].text);
}

TEST_CASE("a prompt that is entirely cached still computes its last token and matches a cache-miss run") {
  auto prompt = story_ids(32);
  prompt.insert(prompt.begin(), 1);  // 33 tokens
  auto spec = greedy_spec("", 16);
  spec.prompt_ids = prompt;
  auto cfg = stories_engine_config();
  engine_fixture fx(cfg);
  auto a = fx.run({spec});
  auto b = fx.run({spec});  // all full blocks of its prompt are cached now
  REQUIRE(a[0].finished);
  REQUIRE(b[0].finished);
  CHECK(b[0].final.usage.cached_tokens == 32);
  CHECK(a[0].token_ids == b[0].token_ids);
  auto stats = fx.settled_stats();
  CHECK(stats.device_blocks_free == stats.device_blocks_total);
}

TEST_CASE("blocks computed in a request's last step are cached too") {
  auto prompt = story_ids(32);
  prompt.insert(prompt.begin(), 1);  // 33 tokens: two full blocks
  auto spec = greedy_spec("", 1);    // finishes in the step that computes its prompt
  spec.prompt_ids = prompt;
  engine_fixture fx(stories_engine_config());
  auto a = fx.run({spec});
  fx.settled_stats();
  auto b = fx.run({spec});
  REQUIRE(b[0].finished);
  CHECK(b[0].final.usage.cached_tokens == 32);
  CHECK(a[0].token_ids == b[0].token_ids);
}
