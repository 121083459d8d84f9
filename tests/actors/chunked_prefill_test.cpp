// Chunked prefill through the actors: a 400-token prompt that arrives while 4
// sequences decode is split over several steps, and every one of those steps
// still carries the 4 decode tokens; with max-prefill-tokens-with-decodes the prompt's chunks beside
// the decodes shrink to that.
#include <doctest/doctest.h>

#include "tests/support/engine_harness.hpp"

using namespace troupe;
using namespace troupe::testing;

TEST_CASE("a 400-token prompt never leaves a step without the running decodes") {
  auto cfg = stories_engine_config();
  cfg.max_num_batched_tokens = 64;
  engine_fixture fx(cfg);
  engine_client client(fx.sys, fx.engine);
  std::vector<request_id> decoders;
  for (const char* p : {"Once upon a time", "The little dog", "One day", "The sun was"})
    decoders.push_back(client.send(greedy_spec(p, 200)));
  // Wait until all four are decoding.
  client.pump_until([&] {
    for (auto id : decoders)
      if (client.outcomes[id].token_ids.size() < 2)
        return false;
    return true;
  });
  auto before = fx.stats();
  auto long_spec = greedy_spec("", 8);
  for (int i = 0; i < 400; ++i)
    long_spec.prompt_ids.push_back(3 + (i * 37) % 500);
  auto id = client.send(long_spec);
  client.pump_until([&] { return client.ended(id); });
  auto after = fx.stats();

  // The prefill steps since the long prompt arrived: each carried every decoder.
  std::vector<int> steps(after.decodes_in_prefill_steps.begin() + before.decodes_in_prefill_steps.size(),
                         after.decodes_in_prefill_steps.end());
  CHECK(steps.size() >= 7);  // 400 tokens at most 60 per step beside 4 decodes
  for (std::size_t i = 0; i < steps.size(); ++i) {
    CAPTURE(i);
    CHECK(steps[i] == 4);
  }
  client.pump_until([&] {
    for (auto d : decoders)
      if (!client.ended(d))
        return false;
    return true;
  });
}

TEST_CASE("max-prefill-tokens-with-decodes: beside decodes a 400-token prompt is prefilled 16 tokens a step") {
  auto cfg = stories_engine_config();
  cfg.max_num_batched_tokens = 64;
  cfg.max_prefill_tokens_with_decodes = 16;
  engine_fixture fx(cfg);
  engine_client client(fx.sys, fx.engine);
  std::vector<request_id> decoders;
  for (const char* p : {"Once upon a time", "The little dog"})
    decoders.push_back(client.send(greedy_spec(p, 300)));
  client.pump_until([&] {
    for (auto id : decoders)
      if (client.outcomes[id].token_ids.size() < 2)
        return false;
    return true;
  });
  auto before = fx.stats();
  auto long_spec = greedy_spec("", 4);
  for (int i = 0; i < 400; ++i)
    long_spec.prompt_ids.push_back(3 + (i * 37) % 500);
  auto id = client.send(long_spec);
  client.pump_until([&] { return client.ended(id); });
  auto after = fx.stats();
  // 400 tokens, 16 a step beside the decoders (and the whole budget in a step without them): at least
  // 25 prefill steps where the default would take 7, each still carrying both decoders.
  std::vector<int> steps(after.decodes_in_prefill_steps.begin() + before.decodes_in_prefill_steps.size(),
                         after.decodes_in_prefill_steps.end());
  CHECK(steps.size() >= 25);
  for (std::size_t i = 0; i < steps.size(); ++i) {
    CAPTURE(i);
    CHECK(steps[i] == 2);
  }
  CHECK(client.outcomes[id].token_ids.size() == 4);
  client.pump_until([&] {
    for (auto d : decoders)
      if (!client.ended(d))
        return false;
    return true;
  });
}
