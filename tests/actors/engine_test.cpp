// The engine through its actors on the bundled model: golden greedy output,
// batch independence under continuous batching, and bad requests answered
// with failed while the engine keeps serving.
#include <doctest/doctest.h>

#include "tests/support/engine_harness.hpp"

using namespace troupe;
using namespace troupe::testing;

TEST_CASE("the engine reproduces golden_greedy.json for the 5 prompts sent at once") {
  auto golden = read_json(stories_dir() / "golden_greedy.json");
  std::vector<request_spec> specs;
  std::vector<std::vector<token_id>> expected;
  std::vector<std::string> expected_text;
  for (const auto& c : golden.at("cases").as_array()) {
    request_spec s = greedy_spec("", 64);
    s.prompt_ids = json_array<token_id>(c.at("prompt_ids"));
    specs.push_back(s);
    expected.push_back(json_array<token_id>(c.at("generated_ids")));
    expected_text.emplace_back(c.at("generated_text").as_string());
  }
  engine_fixture fx(stories_engine_config());
  auto out = fx.run(specs);
  for (std::size_t i = 0; i < out.size(); ++i) {
    CAPTURE(i);
    REQUIRE(out[i].finished);
    CHECK(out[i].token_ids == expected[i]);
    CHECK(out[i].text == expected_text[i]);
    CHECK(out[i].final.reason == "length");
    CHECK(out[i].final.usage.completion_tokens == 64);
    CHECK(out[i].final.usage.prompt_tokens == static_cast<int>(specs[i].prompt_ids.size()));
    CHECK(out[i].final.timings.ttft_ms > 0);
    CHECK(out[i].final.timings.e2e_ms >= out[i].final.timings.ttft_ms);
  }
  auto stats = fx.settled_stats();
  CHECK(stats.running == 0);
  CHECK(stats.waiting == 0);
  CHECK(stats.device_blocks_free == stats.device_blocks_total);
  // Where the steps' time went: one device and one host sample per step, and a gap for
  // every step that followed another with work waiting (all but the first here).
  CHECK(stats.step_device_us.size() == stats.steps);
  CHECK(stats.step_host_us.size() == stats.steps);
  CHECK(stats.step_gap_us.size() >= stats.steps - 1);
  CHECK(stats.step_gap_us.size() <= stats.steps);
  for (double us : stats.step_device_us)
    CHECK(us > 0);
  for (double us : stats.step_gap_us)
    CHECK(us >= 0);
}

TEST_CASE("32 concurrent requests each produce what they produce alone") {
  const char* prompts[] = {"Once upon a time", "The little dog", "Lily and Tom went to the park", "One day",
                           "The sun was", "Tom had a red ball", "There was a big tree", "The cat"};
  std::vector<request_spec> specs;
  for (int i = 0; i < 32; ++i) {
    request_spec s;
    s.prompt = prompts[i % 8];
    s.params.max_tokens = 8 + (i * 7) % 40;
    if (i % 3 == 0) {
      s.params.temperature = 0;
    } else {
      s.params.temperature = 0.7f + 0.1f * (i % 4);
      s.params.top_p = 0.9f;
      s.params.top_k = i % 2 ? 40 : 0;
      s.params.seed = 1000 + i;
    }
    if (i % 5 == 0)
      s.params.repetition_penalty = 1.3f;
    specs.push_back(s);
  }
  auto cfg = stories_engine_config();
  cfg.max_num_batched_tokens = 64;  // forces chunking and many mixed steps
  std::vector<request_outcome> together, alone;
  {
    engine_fixture fx(cfg);
    together = fx.run(specs);
  }
  {
    engine_fixture fx(cfg);
    for (const auto& s : specs)
      alone.push_back(fx.run({s}).front());
  }
  for (std::size_t i = 0; i < specs.size(); ++i) {
    CAPTURE(i);
    REQUIRE(together[i].finished);
    REQUIRE(alone[i].finished);
    CHECK(together[i].token_ids == alone[i].token_ids);
    CHECK(together[i].text == alone[i].text);
    CHECK(together[i].final.reason == alone[i].final.reason);
  }
}

TEST_CASE("bad requests get a failed with a clear code while the engine keeps serving") {
  engine_fixture fx(stories_engine_config());
  request_spec bad_temp = greedy_spec("Once upon a time", 8);
  bad_temp.params.temperature = -1;
  request_spec bad_ids = greedy_spec("", 8);
  bad_ids.prompt_ids = {1, 600};
  request_spec empty;
  empty.prompt_ids = {};
  empty.prompt = "";
  empty.add_special_tokens = false;
  request_spec too_long = greedy_spec("", 8);
  too_long.prompt_ids.assign(600, 5);
  request_spec good = greedy_spec("Once upon a time", 8);
  auto out = fx.run({bad_temp, bad_ids, empty, too_long, good});
  REQUIRE(out[0].failed);
  CHECK(out[0].error.code == "invalid_request");
  CHECK(out[0].error.message.find("temperature") != std::string::npos);
  REQUIRE(out[1].failed);
  CHECK(out[1].error.message.find("outside the vocabulary") != std::string::npos);
  REQUIRE(out[2].failed);
  CHECK(out[2].error.message.find("empty") != std::string::npos);
  REQUIRE(out[3].failed);
  CHECK(out[3].error.code == "prompt_too_long");
  REQUIRE(out[4].finished);
  CHECK(out[4].final.usage.completion_tokens == 8);
}

TEST_CASE("stop strings end a request through the engine and are not streamed") {
  engine_fixture fx(stories_engine_config());
  auto s = greedy_spec("Once upon a time", 64);
  s.params.stop = {"Lily. She"};
  auto out = fx.run({s});
  REQUIRE(out[0].finished);
  CHECK(out[0].final.reason == "stop");
  CHECK(out[0].text == ", there was a little girl named ");
  auto stats = fx.settled_stats();
  CHECK(stats.device_blocks_free == stats.device_blocks_total);
}

TEST_CASE("a sequence that would outgrow the whole KV cache ends at its capacity instead of hanging") {
  auto cfg = stories_engine_config();
  cfg.num_device_blocks = 2;  // 32 tokens: max-model-len is capped to what the cache holds
  engine_fixture fx(cfg);
  auto out = fx.run({greedy_spec("Once upon a time", 100), greedy_spec("The little dog", 4)});
  REQUIRE(out[0].finished);
  CHECK(out[0].final.reason == "length");
  CHECK(out[0].final.usage.prompt_tokens + out[0].final.usage.completion_tokens == 32);
  REQUIRE(out[1].finished);  // it waited or was preempted, then ran
  CHECK(out[1].final.usage.completion_tokens == 4);
  auto stats = fx.settled_stats();
  CHECK(stats.device_blocks_free == stats.device_blocks_total);
}
