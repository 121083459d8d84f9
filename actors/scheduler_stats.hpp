// The engine's counters and per-step samples (engine_stats) as the scheduler's
// steps produce them: plain bookkeeping, kept out of the step loop.
#pragma once

#include <chrono>
#include <optional>

#include "actors/protocol.hpp"
#include "runtime/scheduler_policy.hpp"

namespace troupe::actors {

class scheduler_stats {
 public:
  using clock = std::chrono::steady_clock;

  // A step starts at `now`; back_to_back_since: the previous step's end, when it ran right before.
  void step_started(clock::time_point now, std::optional<clock::time_point> back_to_back_since);
  // The KV cache's answer to a prepare: swap traffic, copy failures and the cache's own counters.
  void prepared(const kv_prepared& r);
  void preempted(runtime::preemption_mode mode);
  void swap_fell_back() { ++stats_.swap_fallbacks; }
  // A preempted sequence's next token, `us` after its preemption.
  void resumed(runtime::preemption_mode mode, double us);
  void verified(int drafted, int accepted);
  // A finished (or failed) step: its decode and prefill token counts, its wall time and the draft's share.
  void step_finished(const step_result& r, int decodes, int prefill_tokens, double wall_us, double draft_us);

  engine_stats& counters() { return stats_; }
  // With the policy's queue lengths.
  engine_stats snapshot(const runtime::scheduler_policy& policy) const;

 private:
  engine_stats stats_;
};

} // namespace troupe::actors
