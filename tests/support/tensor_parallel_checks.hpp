// The tensor-parallel engine's checks that every backend runs (tests/actors on the CPU ranks,
// tests/gpu on CUDA ranks): workloads whose text at N ranks must be the text of one rank, and
// the faults that must fail only their requests, naming the rank, in turn.
#pragma once

#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "tests/support/engine_harness.hpp"

namespace troupe::testing {

inline engine_config with_ranks(engine_config cfg, int ranks) {
  cfg.tensor_parallel_size = ranks;
  return cfg;
}

inline std::vector<std::string> texts(const std::vector<request_outcome>& outcomes) {
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
inline preempted_run run_with_urgent_arrival(const engine_config& cfg) {
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

// The golden prompts (stories260k's golden_greedy.json) at cfg: the golden ids, every block back.
inline void check_golden_greedy(const engine_config& cfg) {
  const auto golden = read_json(stories_dir() / "golden_greedy.json");
  std::vector<request_spec> specs;
  std::vector<std::vector<token_id>> expected;
  for (const auto& c : golden.at("cases").as_array()) {
    request_spec s = greedy_spec("", 64);
    s.prompt_ids = json_array<token_id>(c.at("prompt_ids"));
    specs.push_back(s);
    expected.push_back(json_array<token_id>(c.at("generated_ids")));
  }
  engine_fixture fx(cfg);
  const auto out = fx.run(specs);
  for (std::size_t i = 0; i < out.size(); ++i) {
    CAPTURE(i);
    REQUIRE_MESSAGE(out[i].finished, out[i].error.message);
    CHECK(out[i].token_ids == expected[i]);
  }
  const auto stats = fx.settled_stats();
  CHECK(stats.device_blocks_free == stats.device_blocks_total);
}

// Six prompts, prefixes of one another, chunked by a 32-token budget so that steps mix prefill
// chunks and decodes and later prompts hit the prefix cache: `ranks` gives the text of `one`.
inline void check_chunked_prefix_hits(engine_config one, engine_config ranks) {
  one.max_num_batched_tokens = ranks.max_num_batched_tokens = 32;
  const auto shared = story_prompt(70);
  std::vector<request_spec> specs;
  for (int i = 0; i < 6; ++i) {
    auto s = greedy_spec("", 24 + 4 * i);
    s.prompt_ids = shared;
    s.prompt_ids.resize(40 + 5 * i);
    specs.push_back(s);
  }
  std::vector<std::string> expected;
  {
    engine_fixture fx(one);
    expected = texts(fx.run(specs));
  }
  engine_fixture fx(ranks);
  CHECK(texts(fx.run(specs)) == expected);
  const auto stats = fx.settled_stats();
  CHECK(stats.prefix_hits > 0);
  CHECK_FALSE(stats.decodes_in_prefill_steps.empty());
  CHECK(stats.device_blocks_free == stats.device_blocks_total);
}

// A swap preemption (run_with_urgent_arrival, priority scheduling, two seats): `ranks` swaps
// every rank's heads of the same blocks out and back and gives the texts of `one`.
inline void check_swap_preemption(engine_config one, engine_config ranks) {
  for (auto* c : {&one, &ranks}) {
    c->max_num_seqs = 2;
    c->scheduler_policy = "priority";
    c->preemption_mode = "swap";
  }
  const auto alone = run_with_urgent_arrival(one);
  const auto group = run_with_urgent_arrival(ranks);
  CHECK(group.texts == alone.texts);
  CHECK(group.stats.preemptions_swap >= 1);
  CHECK(group.stats.swap_out_bytes > 0);
  CHECK(group.stats.swapped == 0);
  CHECK(group.stats.device_blocks_free == group.stats.device_blocks_total);
  CHECK(group.stats.host_blocks_free == group.stats.host_blocks_total);
}

// Eight requests one after another, each of four steps (a prefill and three decodes). A fault
// point armed at 7 fires at the 7th, 14th, 21st and 28th step: in every second request, on
// ranks 1, 2, ... in turn (runtime::fault_injector::fault_rank), so every rank meets it once
// at 4 ranks and twice at 2, and each request after a fault runs on the group it left.
inline const char* const fault_prompts[] = {"Once upon a time",     "The little dog", "Lily wanted to",
                                            "One day, a bird",      "Tom and his mom", "There was a big tree",
                                            "The sun was",          "A cat sat"};

struct sequential_run {
  std::vector<request_outcome> outcomes;
  engine_stats stats;
};

inline sequential_run one_after_another(const engine_config& cfg) {
  engine_fixture fx(cfg);
  sequential_run run;
  for (const char* prompt : fault_prompts)
    run.outcomes.push_back(fx.run({greedy_spec(prompt, 4)})[0]);
  run.stats = fx.settled_stats();
  return run;
}

// Checks a faulty run against `reference` (the same requests at one rank without faults):
// every even request finishes with that text, every odd one fails with `code` and `message`
// and names the rank it failed on, and the ranks named are every rank, in turn.
inline void check_faults_in_turn(const sequential_run& run, const sequential_run& reference, int ranks,
                                 const std::string& code, const std::string& message) {
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

} // namespace troupe::testing
