// The engine's counters (scheduler, KV cache, speculation, recoveries and per-step
// timings), as stats_atom answers them: for hosts, tests and the server's /metrics.
#pragma once

#include <caf/meta/type_name.hpp>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "troupe/wire_bits.hpp"

namespace troupe {

// Counters of the whole engine (scheduler + KV cache), for tests and /metrics.
struct engine_stats {
  std::uint64_t steps = 0;
  std::uint64_t prefill_tokens = 0; // prompt (and recomputed) tokens computed
  std::uint64_t decode_tokens = 0;  // single-token decodes computed
  std::uint64_t preemptions_swap = 0;
  std::uint64_t preemptions_recompute = 0;
  std::uint64_t swap_fallbacks = 0; // swap asked for but the host tier was full -> recompute
  std::uint64_t swap_out_bytes = 0;
  std::uint64_t swap_in_bytes = 0;        // copied back to the device
  std::uint64_t swap_in_reused_bytes = 0; // swapped back without a copy: the blocks' content was still on the device
  std::uint64_t prefix_queries = 0;       // prompt tokens looked up in the prefix cache
  std::uint64_t prefix_hits = 0;          // of which were cached
  // Sliding-window models: device KV blocks given back because every layer's window had passed them.
  std::uint64_t window_released_blocks = 0;
  std::uint64_t requests_finished = 0;
  std::uint64_t requests_failed = 0;
  std::uint64_t requests_aborted = 0; // cancelled, ended by a stop string, or the client went away
  // Speculative decoding: draft tokens verified, of which accepted, over how many verifications.
  std::uint64_t spec_drafted = 0, spec_accepted = 0, spec_verifications = 0;
  int running = 0, waiting = 0, swapped = 0;
  int device_blocks_free = 0, device_blocks_total = 0;
  int host_blocks_free = 0, host_blocks_total = 0;
  // The last step: how many decode tokens and prefill tokens it carried.
  int last_step_decodes = 0, last_step_prefill_tokens = 0;
  // Every step's decode count while a prefill chunk was in it (chunked-prefill evidence), capped.
  std::vector<int> decodes_in_prefill_steps;
  // Per-step samples, microseconds; each list keeps the first max_samples steps.
  static constexpr std::size_t max_samples = 100000;
  // Host time per step outside the model runner, the sampler and the draft (planning, reserve, messages, fan-out).
  std::vector<double> host_overhead_us;
  // The model runner's forward pass (on CUDA: launches + device time + the logits' copy back), and the
  // rest of the step on the host (sampling included, the draft excluded); with step_gap_us (from one
  // step's end to the next one's start, for steps back to back) this is where the device waits on the host.
  std::vector<double> step_device_us, step_host_us, step_gap_us;
  // A preempted sequence's preemption to its next token, by the mode it was preempted with.
  std::vector<double> resume_swap_us, resume_recompute_us;
  // Steps that speculated: time in the draft's proposer and in the executor's verifier, microseconds.
  std::vector<double> draft_us, verify_us;
  // Structured output: requests admitted with a constraint, constraints compiled (and their total
  // time, ms) or found compiled, and the time per step spent on masks (steps with constrained rows).
  std::uint64_t constrained_requests = 0, constraint_compiles = 0, constraint_cache_hits = 0;
  double constraint_compile_ms = 0;
  std::vector<double> constraint_mask_us;
  // Failures the engine recovered from: steps lost (their requests failed), executor and draft
  // actors restarted, proposals lost (the step ran without speculation), swap copies that failed
  // (the sequences were recomputed instead).
  std::uint64_t step_failures = 0, executor_restarts = 0, draft_failures = 0, draft_restarts = 0,
                swap_copy_failures = 0;
  std::uint64_t swap_in_failures = 0; // sequences whose copy back failed (recomputed), of swap_copy_failures' doing
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, engine_stats& x) {
  // The per-step samples (vectors of double) are finite durations: CAF's own float encoding carries them.
  auto compile_ms = bits_of(x.constraint_compile_ms);
  return f(caf::meta::type_name("engine_stats"), x.steps, x.prefill_tokens, x.decode_tokens, x.preemptions_swap,
           x.preemptions_recompute, x.swap_fallbacks, x.swap_out_bytes, x.swap_in_bytes, x.swap_in_reused_bytes,
           x.prefix_queries, x.prefix_hits, x.window_released_blocks, x.requests_finished, x.requests_failed,
           x.requests_aborted, x.running, x.waiting, x.swapped, x.device_blocks_free, x.device_blocks_total,
           x.host_blocks_free, x.host_blocks_total, x.last_step_decodes, x.last_step_prefill_tokens,
           x.decodes_in_prefill_steps, x.host_overhead_us, x.step_device_us, x.step_host_us, x.step_gap_us,
           x.resume_swap_us, x.resume_recompute_us, x.spec_drafted, x.spec_accepted, x.spec_verifications, x.draft_us,
           x.verify_us, x.step_failures, x.executor_restarts, x.draft_failures, x.draft_restarts, x.swap_copy_failures,
           x.swap_in_failures, x.constrained_requests, x.constraint_compiles, x.constraint_cache_hits, compile_ms,
           x.constraint_mask_us);
}

} // namespace troupe
