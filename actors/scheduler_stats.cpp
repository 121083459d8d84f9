// engine_stats bookkeeping for the scheduler's steps.
#include "actors/scheduler_stats.hpp"

#include <algorithm>

namespace troupe::actors {

namespace {
// Per-step sample lists keep the first max_samples steps.
template <class T>
void sample(std::vector<T>& samples, T value) {
  if (samples.size() < engine_stats::max_samples)
    samples.push_back(value);
}
} // namespace

void scheduler_stats::step_started(clock::time_point now, std::optional<clock::time_point> back_to_back_since) {
  if (back_to_back_since)
    sample(stats_.step_gap_us, std::chrono::duration<double, std::micro>(now - *back_to_back_since).count());
}

void scheduler_stats::prepared(const kv_prepared& r) {
  stats_.swap_in_failures += r.swap_in_failed.size();
  stats_.swap_copy_failures += static_cast<std::uint64_t>(r.swap_copy_failures);
  stats_.swap_out_bytes += r.swap_out_bytes;
  stats_.swap_in_bytes += r.swap_in_bytes;
  stats_.swap_in_reused_bytes += r.swap_in_reused_bytes;
  stats_.device_blocks_free = r.device_blocks_free;
  stats_.device_blocks_total = r.device_blocks_total;
  stats_.host_blocks_free = r.host_blocks_free;
  stats_.host_blocks_total = r.host_blocks_total;
  stats_.prefix_queries = r.prefix_queries;
  stats_.prefix_hits = r.prefix_hits;
  stats_.window_released_blocks = r.window_released_blocks;
}

void scheduler_stats::preempted(runtime::preemption_mode mode) {
  ++(mode == runtime::preemption_mode::swap ? stats_.preemptions_swap : stats_.preemptions_recompute);
}

void scheduler_stats::resumed(runtime::preemption_mode mode, double us) {
  sample(mode == runtime::preemption_mode::swap ? stats_.resume_swap_us : stats_.resume_recompute_us, us);
}

void scheduler_stats::verified(int drafted, int accepted) {
  stats_.spec_drafted += static_cast<std::uint64_t>(drafted);
  stats_.spec_accepted += static_cast<std::uint64_t>(accepted);
  ++stats_.spec_verifications;
}

void scheduler_stats::step_finished(const step_result& r, int decodes, int prefill_tokens, double wall_us,
                                    double draft_us) {
  ++stats_.steps;
  stats_.decode_tokens += decodes;
  stats_.prefill_tokens += prefill_tokens;
  stats_.last_step_decodes = decodes;
  stats_.last_step_prefill_tokens = prefill_tokens;
  if (prefill_tokens > 0)
    sample(stats_.decodes_in_prefill_steps, decodes);
  if (stats_.host_overhead_us.size() < engine_stats::max_samples) {
    stats_.host_overhead_us.push_back(std::max(0.0, wall_us - r.forward_us - r.sample_us - draft_us));
    stats_.step_device_us.push_back(r.forward_us);
    stats_.step_host_us.push_back(std::max(0.0, wall_us - r.forward_us - draft_us));
  }
  if (r.constraint_us > 0 && stats_.constraint_mask_us.size() < engine_stats::max_samples)
    stats_.constraint_mask_us.push_back(r.constraint_us);
  if (r.error.empty() && !r.verified.empty() && stats_.verify_us.size() < engine_stats::max_samples) {
    stats_.draft_us.push_back(draft_us);
    stats_.verify_us.push_back(r.verify_us);
  }
}

engine_stats scheduler_stats::snapshot(const runtime::scheduler_policy& policy) const {
  auto out = stats_;
  out.running = static_cast<int>(policy.num_running());
  out.waiting = static_cast<int>(policy.num_waiting());
  out.swapped = static_cast<int>(policy.num_swapped());
  return out;
}

} // namespace troupe::actors
