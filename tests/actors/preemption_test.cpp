// Priority preemption through the actors: when seats or blocks are short, a
// more urgent request takes over, gets its first token before the preempted
// ones finish, and the preempted request still produces exactly what it
// produces undisturbed — by swap (KV to the host tier and back) and by
// recompute. A full host tier turns swap into recompute and says so.
#include <doctest/doctest.h>

#include "tests/support/engine_harness.hpp"

using namespace troupe;
using namespace troupe::testing;

namespace {

request_spec low_priority(std::string prompt, int tokens) {
  auto s = greedy_spec(std::move(prompt), tokens);
  s.priority = 5;
  return s;
}

std::vector<token_id> solo_output(const engine_config& cfg, const request_spec& spec) {
  engine_fixture fx(cfg);
  auto out = fx.run({spec});
  REQUIRE(out[0].finished);
  return out[0].token_ids;
}

struct preemption_run {
  request_outcome low_a, low_b, high;
  std::size_t high_end_index = 0, low_a_end_index = 0, low_b_end_index = 0;
  engine_stats stats;
};

// Two low-priority requests run; once both are decoding, a high-priority one arrives.
preemption_run run_with_late_urgent(const engine_config& cfg, const request_spec& a, const request_spec& b,
                                    const request_spec& urgent, int decoded_before_urgent) {
  engine_fixture fx(cfg);
  engine_client client(fx.sys, fx.engine);
  auto ida = client.send(a);
  auto idb = client.send(b);
  client.pump_until([&] {
    return static_cast<int>(client.outcomes[ida].token_ids.size()) >= decoded_before_urgent &&
           static_cast<int>(client.outcomes[idb].token_ids.size()) >= decoded_before_urgent;
  });
  auto idh = client.send(urgent);
  client.pump_until([&] { return client.ended(ida) && client.ended(idb) && client.ended(idh); });
  preemption_run r;
  r.low_a = client.outcomes[ida];
  r.low_b = client.outcomes[idb];
  r.high = client.outcomes[idh];
  auto index = [&](request_id id) {
    return static_cast<std::size_t>(std::find(client.end_order.begin(), client.end_order.end(), id) -
                                    client.end_order.begin());
  };
  r.high_end_index = index(idh);
  r.low_a_end_index = index(ida);
  r.low_b_end_index = index(idb);
  r.stats = fx.settled_stats();
  return r;
}

void check_preemption_run(const preemption_run& r, const engine_config& cfg, const request_spec& a,
                          const request_spec& b) {
  REQUIRE(r.high.finished);
  REQUIRE(r.low_a.finished);
  REQUIRE(r.low_b.finished);
  // The urgent request is served before the low-priority ones finish.
  CHECK(r.high_end_index < r.low_a_end_index);
  CHECK(r.high_end_index < r.low_b_end_index);
  // Preempted or not, the low-priority outputs are what they are undisturbed.
  auto solo_cfg = cfg;
  solo_cfg.num_device_blocks = 0;
  solo_cfg.max_num_seqs = 64;
  CHECK(r.low_a.token_ids == solo_output(solo_cfg, a));
  CHECK(r.low_b.token_ids == solo_output(solo_cfg, b));
  // Nothing leaks.
  CHECK(r.stats.running == 0);
  CHECK(r.stats.swapped == 0);
  CHECK(r.stats.device_blocks_free == r.stats.device_blocks_total);
  CHECK(r.stats.host_blocks_free == r.stats.host_blocks_total);
}

} // namespace

TEST_CASE("seats short: an urgent request preempts a running one, by swap and by recompute") {
  for (const char* mode : {"swap", "recompute"}) {
    CAPTURE(mode);
    auto cfg = stories_engine_config();
    cfg.max_num_seqs = 2;
    cfg.scheduler_policy = "priority";
    cfg.preemption_mode = mode;
    auto a = low_priority("Once upon a time", 300);
    auto b = low_priority("The little dog", 300);
    auto urgent = greedy_spec("Lily and Tom went to the park", 20);
    auto r = run_with_late_urgent(cfg, a, b, urgent, 20);
    check_preemption_run(r, cfg, a, b);
    // Every preempted sequence finished, so each preemption episode has its resume time.
    const auto& resumed = std::string(mode) == "swap" ? r.stats.resume_swap_us : r.stats.resume_recompute_us;
    const auto& other = std::string(mode) == "swap" ? r.stats.resume_recompute_us : r.stats.resume_swap_us;
    CHECK(resumed.size() >= 1);
    CHECK(other.empty());
    for (double us : resumed)
      CHECK(us > 0);
    if (std::string(mode) == "swap") {
      CHECK(r.stats.preemptions_swap >= 1);
      CHECK(resumed.size() <= r.stats.preemptions_swap);
      CHECK(r.stats.swap_out_bytes > 0);
      // Every byte swapped out came back: copied, or still on the device (prefix-cached blocks).
      CHECK(r.stats.swap_in_bytes + r.stats.swap_in_reused_bytes == r.stats.swap_out_bytes);
      // Device blocks are plentiful here: the full blocks a swapped sequence left cached-free are still there when
      // it comes back, and are taken as they are.
      CHECK(r.stats.swap_in_reused_bytes > 0);
    } else {
      CHECK(r.stats.preemptions_recompute >= 1);
      CHECK(resumed.size() <= r.stats.preemptions_recompute);
      CHECK(r.stats.preemptions_swap == 0);
    }
  }
}

TEST_CASE("blocks short: an urgent long prompt preempts by blocks, by swap and by recompute") {
  for (const char* mode : {"swap", "recompute"}) {
    CAPTURE(mode);
    auto cfg = stories_engine_config();
    cfg.scheduler_policy = "priority";
    cfg.preemption_mode = mode;
    cfg.num_device_blocks = 24;  // two 100-token sequences hold 14; the urgent 160-token prompt needs 11
    auto a = low_priority("Once upon a time", 250);
    auto b = low_priority("The little dog", 250);
    auto urgent = greedy_spec("", 10);
    urgent.prompt_ids = story_prompt(160);
    auto r = run_with_late_urgent(cfg, a, b, urgent, 100);
    check_preemption_run(r, cfg, a, b);
    CHECK(r.stats.preemptions_swap + r.stats.preemptions_recompute >= 1);
    if (std::string(mode) == "swap")
      CHECK(r.stats.preemptions_swap >= 1);
  }
}

TEST_CASE("fcfs with too few blocks preempts the latest arrival and still finishes everything identically") {
  auto cfg = stories_engine_config();
  cfg.num_device_blocks = 20;  // two 250-token sequences need 32 blocks
  auto a = greedy_spec("Once upon a time", 250);
  auto b = greedy_spec("The little dog", 250);
  engine_fixture fx(cfg);
  auto out = fx.run({a, b});
  REQUIRE(out[0].finished);
  REQUIRE(out[1].finished);
  auto stats = fx.settled_stats();
  CHECK(stats.preemptions_swap >= 1);
  auto solo_cfg = cfg;
  solo_cfg.num_device_blocks = 0;
  CHECK(out[0].token_ids == solo_output(solo_cfg, a));
  CHECK(out[1].token_ids == solo_output(solo_cfg, b));
  CHECK(stats.device_blocks_free == stats.device_blocks_total);
}

TEST_CASE("a full host tier turns swap into recompute, counted in stats") {
  auto cfg = stories_engine_config();
  cfg.num_device_blocks = 20;
  cfg.num_host_blocks = 0;
  auto a = greedy_spec("Once upon a time", 250);
  auto b = greedy_spec("The little dog", 250);
  engine_fixture fx(cfg);
  auto out = fx.run({a, b});
  REQUIRE(out[0].finished);
  REQUIRE(out[1].finished);
  auto stats = fx.settled_stats();
  CHECK(stats.swap_fallbacks >= 1);
  CHECK(stats.preemptions_recompute >= 1);
  CHECK(stats.preemptions_swap == 0);
  auto solo_cfg = cfg;
  solo_cfg.num_device_blocks = 0;
  CHECK(out[1].token_ids == solo_output(solo_cfg, b));
}

TEST_CASE("two urgent prompts short of blocks both run, and the preempted request finishes identically") {
  for (const char* mode : {"swap", "recompute"}) {
    CAPTURE(mode);
    auto cfg = stories_engine_config();
    cfg.scheduler_policy = "priority";
    cfg.preemption_mode = mode;
    cfg.num_device_blocks = 24;
    engine_fixture fx(cfg);
    engine_client client(fx.sys, fx.engine);
    auto low = client.send(low_priority("Once upon a time", 300));
    client.pump_until([&] { return client.outcomes[low].token_ids.size() >= 250; });  // 16 of 24 blocks
    auto u1 = greedy_spec("", 5);
    u1.prompt_ids = story_prompt(150);  // 10 blocks each: neither fits beside the low one
    auto u2 = u1;
    u2.prompt_ids.back() = 7;
    auto id1 = client.send(u1);
    auto id2 = client.send(u2);
    client.pump_until([&] { return client.ended(low) && client.ended(id1) && client.ended(id2); });
    CHECK(client.outcomes[id1].finished);
    CHECK(client.outcomes[id2].finished);
    REQUIRE(client.outcomes[low].finished);
    auto solo_cfg = cfg;
    solo_cfg.num_device_blocks = 0;
    CHECK(client.outcomes[low].token_ids == solo_output(solo_cfg, low_priority("Once upon a time", 300)));
    auto stats = fx.settled_stats();
    CHECK(stats.preemptions_swap + stats.preemptions_recompute >= 1);
    CHECK(stats.device_blocks_free == stats.device_blocks_total);
  }
}
