// engine.tensor-parallel-size on the CPU backend through the actors: each rank is an executor
// actor (rank 0 leads), and the engine's greedy text is the text of one rank — for the golden
// prompts, through chunked prefill and prefix-cache hits, and through swap preemption (every rank
// copies its heads of the same blocks). A step that fails on one rank fails only its requests,
// naming the rank; a rank that dies takes its group down and the engine restarts the group; the
// text after either is the text without faults. Widths the model cannot serve are refused at
// start, naming the numbers.
#include <doctest/doctest.h>

#include <set>
#include <string>
#include <vector>

#include "tests/support/engine_harness.hpp"
#include "troupe/errors.hpp"

using namespace troupe;
using namespace troupe::testing;

namespace {

engine_config with_ranks(engine_config cfg, int ranks) {
  cfg.tensor_parallel_size = ranks;
  return cfg;
}

std::vector<std::string> texts(const std::vector<request_outcome>& outcomes) {
  std::vector<std::string> out;
  for (const auto& o : outcomes) {
    REQUIRE(o.finished);
    out.push_back(o.text);
  }
  return out;
}

// Two long low-priority requests decode until an urgent one arrives and takes a seat from one
// of them; returns the three texts in the order (a, b, urgent) and the stats it ended with.
struct preempted_run {
  std::vector<std::string> texts;
  engine_stats stats;
};
preempted_run run_with_urgent_arrival(const engine_config& cfg) {
  auto a = greedy_spec("Once upon a time", 120), b = greedy_spec("The little dog", 120);
  a.priority = b.priority = 5;
  const auto urgent = greedy_spec("Lily and Tom went to the park", 20);
  engine_fixture fx(cfg);
  engine_client client(fx.sys, fx.engine);
  const auto ida = client.send(a), idb = client.send(b);
  client.pump_until(
      [&] { return client.outcomes[ida].token_ids.size() >= 20 && client.outcomes[idb].token_ids.size() >= 20; });
  const auto idh = client.send(urgent);
  client.pump_until([&] { return client.ended(ida) && client.ended(idb) && client.ended(idh); });
  preempted_run run;
  for (auto id : {ida, idb, idh}) {
    REQUIRE(client.outcomes[id].finished);
    run.texts.push_back(client.outcomes[id].text);
  }
  run.stats = fx.settled_stats();
  return run;
}

// Eight requests one after another, each of four steps (a prefill and three decodes). A fault
// point armed at 7 fires at the 7th, 14th, 21st and 28th step: in every second request, on
// ranks 1, 2, ... in turn (runtime::fault_injector::fault_rank), so every rank meets it once
// at 4 ranks and twice at 2, and each request after a fault runs on the group it left.
const char* const fault_prompts[] = {"Once upon a time", "The little dog",       "Lily wanted to", "One day, a bird",
                                     "Tom and his mom",  "There was a big tree", "The sun was",    "A cat sat"};

struct sequential_run {
  std::vector<request_outcome> outcomes;
  engine_stats stats;
};

sequential_run one_after_another(const engine_config& cfg) {
  engine_fixture fx(cfg);
  sequential_run run;
  for (const char* prompt : fault_prompts)
    run.outcomes.push_back(fx.run({greedy_spec(prompt, 4)})[0]);
  run.stats = fx.settled_stats();
  return run;
}

// Checks a faulty run against the same requests at one rank without faults: every even request
// finishes with that text, every odd one fails with `code` and `message` and names the rank it
// failed on, and the ranks named are every rank, in turn.
void check_faults_in_turn(const sequential_run& run, int ranks, const std::string& code, const std::string& message) {
  const auto reference = one_after_another(with_ranks(stories_engine_config(), 1));
  std::vector<int> failed_on;
  for (std::size_t i = 0; i < run.outcomes.size(); ++i) {
    CAPTURE(i);
    const auto& o = run.outcomes[i];
    REQUIRE(reference.outcomes[i].finished);
    if (i % 2 == 0) {
      REQUIRE(o.finished);
      CHECK(o.text == reference.outcomes[i].text);
      continue;
    }
    REQUIRE(o.failed);
    CHECK(o.error.code == code);
    CHECK_MESSAGE(o.error.message.find(message) != std::string::npos, o.error.message);
    for (int r = 0; r < ranks; ++r)
      if (o.error.message.find("tensor-parallel rank " + std::to_string(r) + " of " + std::to_string(ranks)) !=
          std::string::npos)
        failed_on.push_back(r);
  }
  std::vector<int> in_turn;
  for (int k = 1; k <= 4; ++k)
    in_turn.push_back(k % ranks);
  CHECK(failed_on == in_turn);
  CHECK(run.stats.step_failures == 4);
  CHECK(run.stats.device_blocks_free == run.stats.device_blocks_total);
}

} // namespace

TEST_CASE("at 2 and 4 tensor-parallel ranks the engine reproduces golden_greedy.json") {
  const auto golden = read_json(stories_dir() / "golden_greedy.json");
  std::vector<request_spec> specs;
  std::vector<std::vector<token_id>> expected;
  for (const auto& c : golden.at("cases").as_array()) {
    request_spec s = greedy_spec("", 64);
    s.prompt_ids = json_array<token_id>(c.at("prompt_ids"));
    specs.push_back(s);
    expected.push_back(json_array<token_id>(c.at("generated_ids")));
  }
  for (int ranks : {2, 4}) {
    CAPTURE(ranks);
    engine_fixture fx(with_ranks(stories_engine_config(), ranks));
    const auto out = fx.run(specs);
    for (std::size_t i = 0; i < out.size(); ++i) {
      CAPTURE(i);
      REQUIRE(out[i].finished);
      CHECK(out[i].token_ids == expected[i]);
    }
    const auto stats = fx.settled_stats();
    CHECK(stats.device_blocks_free == stats.device_blocks_total);
  }
}

TEST_CASE("at 2 ranks, chunked prefill beside decodes and prefix-cache hits give the text of one rank") {
  auto cfg = stories_engine_config();
  cfg.max_num_batched_tokens = 32; // prompts are chunked, steps mix prefill chunks and decodes
  const auto shared = story_prompt(70);
  std::vector<request_spec> specs;
  for (int i = 0; i < 6; ++i) {
    auto s = greedy_spec("", 24 + 4 * i);
    s.prompt_ids = shared;
    s.prompt_ids.resize(40 + 5 * i); // prefixes of one another: later ones hit the cache
    specs.push_back(s);
  }
  std::vector<std::string> one, two;
  {
    engine_fixture fx(with_ranks(cfg, 1));
    one = texts(fx.run(specs));
  }
  engine_fixture fx(with_ranks(cfg, 2));
  two = texts(fx.run(specs));
  CHECK(two == one);
  const auto stats = fx.settled_stats();
  CHECK(stats.prefix_hits > 0);
  CHECK_FALSE(stats.decodes_in_prefill_steps.empty());
  CHECK(stats.device_blocks_free == stats.device_blocks_total);
}

TEST_CASE("at 2 ranks, a sequence swapped out and back on every rank continues with the text of one rank") {
  auto cfg = stories_engine_config();
  cfg.max_num_seqs = 2;
  cfg.scheduler_policy = "priority";
  cfg.preemption_mode = "swap";
  const auto one = run_with_urgent_arrival(with_ranks(cfg, 1));
  const auto two = run_with_urgent_arrival(with_ranks(cfg, 2));
  CHECK(two.texts == one.texts);
  CHECK(two.stats.preemptions_swap >= 1);
  CHECK(two.stats.swap_out_bytes > 0);
  CHECK(two.stats.swapped == 0);
  CHECK(two.stats.device_blocks_free == two.stats.device_blocks_total);
  CHECK(two.stats.host_blocks_free == two.stats.host_blocks_total);
}

TEST_CASE("a tensor-parallel width the model cannot serve is refused at start, naming the numbers") {
  // stories260k: 8 heads, 4 kv heads, intermediate size 172.
  CHECK_THROWS_WITH_AS(engine_fixture{with_ranks(stories_engine_config(), 3)},
                       doctest::Contains("8 attention heads and 4 key/value heads"), config_error);
  CHECK_THROWS_WITH_AS(engine_fixture{with_ranks(stories_engine_config(), 8)},
                       doctest::Contains("intermediate size 172"), config_error);
  CHECK_THROWS_WITH_AS(engine_fixture{with_ranks(stories_engine_config(), 65)},
                       doctest::Contains("engine.tensor-parallel-size"), config_error);
}

TEST_CASE("a step that fails on one rank fails its requests naming the rank, and the group serves on") {
  for (int ranks : {2, 4}) {
    CAPTURE(ranks);
    auto cfg = with_ranks(stories_engine_config(), ranks);
    cfg.fail_executor_step = 7;
    const auto run = one_after_another(cfg);
    check_faults_in_turn(run, ranks, "step_failed", "the model step failed: injected fault: executor step");
    CHECK(run.stats.executor_restarts == 0);
  }
}

TEST_CASE("a rank executor that dies takes its group down, the engine restarts the group, and it serves on") {
  // The first crash is on rank 1, a follower: rank 0 and the others wait for it in the step's
  // first collective until its abort releases them (else this test hangs, or its engine never
  // stops). At 2 ranks the second crash is the leader's.
  for (int ranks : {2, 4}) {
    CAPTURE(ranks);
    auto cfg = with_ranks(stories_engine_config(), ranks);
    cfg.crash_executor = 7;
    const auto run = one_after_another(cfg);
    check_faults_in_turn(run, ranks, "step_failed", "the executor stopped during the model step");
    CHECK(run.stats.executor_restarts == 4);
  }
}
