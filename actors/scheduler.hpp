// The scheduler actor: owns the waiting/running/swapped queues (through
// runtime::scheduler_policy) and the step loop: plan, prepare the KV cache
// (with preemption when blocks are short), run the step on the executor, fan
// the sampled tokens out to the request actors, repeat while there is work.
#pragma once

#include "actors/protocol.hpp"
#include "runtime/adaptive_k.hpp"
#include "runtime/scheduler_policy.hpp"

namespace troupe::actors {

struct scheduler_settings {
  runtime::scheduler_config policy;
  int max_model_len = 0;
  int block_size = 16;
  bool enable_prefix_caching = true;
  // Speculative decoding (with a draft actor): draft tokens per decode step at most,
  // and whether each sequence adapts its own k to its recent acceptance.
  int num_speculative_tokens = 0;
  bool adaptive_speculation = true;
};

// draft may be null: no speculation.
scheduler_actor spawn_scheduler(caf::actor_system& sys, scheduler_settings settings, kv_cache_actor kv,
                                executor_actor executor, draft_actor draft = {});

} // namespace troupe::actors
