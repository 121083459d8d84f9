// engine.deterministic through the actors on the CPU backend (fp32): twelve seeded and
// greedy requests get the same tokens and logprobs, bit for bit, alone, all together, in
// reverse order, mixed with other traffic under a small token budget (their prompts
// chunked at other places), and on an engine without the prefix cache that preempts by
// recompute. The GPU engine runs the same workload (engine_cuda_protocols_gpu_test).
#include <doctest/doctest.h>

#include <algorithm>

#include "tests/support/determinism_workload.hpp"

using namespace troupe;
using namespace troupe::testing;

namespace {

engine_config deterministic_config() {
  auto cfg = stories_engine_config();
  cfg.deterministic = true;
  cfg.cpu_threads = 2;
  return cfg;
}

void check_same(const std::vector<request_outcome>& baseline, const std::vector<request_outcome>& got,
                const char* how) {
  REQUIRE(got.size() == baseline.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    INFO(how << ", request " << i);
    CHECK(first_difference(baseline[i], got[i]) == "");
  }
}

} // namespace

TEST_CASE("deterministic: twelve requests alone, together, reversed and mixed give the same tokens and logprobs") {
  const auto specs = determinism_requests();
  auto cfg = deterministic_config();
  cfg.max_num_batched_tokens = 64; // a 120-token prompt takes two steps alone, more beside others
  engine_fixture fx(cfg);

  std::vector<request_outcome> alone;
  for (const auto& s : specs) {
    auto out = fx.run({s});
    REQUIRE(out[0].finished);
    REQUIRE(out[0].logprobs.size() == out[0].token_ids.size());
    alone.push_back(out[0]);
  }
  // The workload is not degenerate: the seeded requests sample, and differ from greedy.
  CHECK(alone[1].token_ids != alone[3].token_ids);

  check_same(alone, fx.run(specs), "together");

  auto reversed = specs;
  std::reverse(reversed.begin(), reversed.end());
  auto back = fx.run(reversed);
  std::reverse(back.begin(), back.end());
  check_same(alone, back, "reversed");

  // Interleaved with other traffic, which is sent first: other rows, other chunk boundaries.
  const auto mixed = mixed_with_other_traffic(specs);
  const auto mixed_out = split_mixed(fx.run(mixed), specs.size());
  for (const auto& o : mixed_out.others)
    CHECK(o.finished);
  check_same(alone, mixed_out.requests, "mixed");
  auto stats = fx.settled_stats();
  CHECK(stats.device_blocks_free == stats.device_blocks_total);
  CHECK(stats.prefix_hits > 0); // some prompts were read from cached blocks

  // Another engine: no prefix cache, 16 tokens a step, a cache small enough to preempt, and
  // preemption by recompute (a preempted sequence's KV is computed again, in other chunks).
  auto tight = deterministic_config();
  tight.enable_prefix_caching = false;
  tight.max_num_batched_tokens = 16;
  tight.preemption_mode = "recompute";
  tight.num_device_blocks = 16; // 256 positions: the longest request (197) fits alone, not beside many
  engine_fixture small(tight);
  check_same(alone, split_mixed(small.run(mixed), specs.size()).requests, "tight");
  auto tight_stats = small.settled_stats();
  CHECK(tight_stats.preemptions_recompute > 0);
  CHECK(tight_stats.device_blocks_free == tight_stats.device_blocks_total);
}
