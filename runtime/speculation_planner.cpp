// Per-sequence speculation lengths and the engine-wide cost they plan with.
#include "runtime/speculation_planner.hpp"

#include <algorithm>

namespace troupe::runtime {

speculation_planner::speculation_planner(speculation_settings settings) : settings_(settings) {}

void speculation_planner::add(seq_id id, int requested_k) {
  per_sequence p;
  p.cap = std::clamp(requested_k >= 0 ? requested_k : settings_.num_speculative_tokens, 0, max_k);
  if (settings_.adaptive && p.cap > 0) {
    adaptive_k_config c;
    c.k_max = p.cap;
    p.k.emplace(c);
  }
  seqs_.insert_or_assign(id, std::move(p));
}

void speculation_planner::remove(seq_id id) { seqs_.erase(id); }

int speculation_planner::k_for(const sequence& s, int num_tokens, int max_model_len) {
  auto it = seqs_.find(s.id);
  if (it == seqs_.end())
    return 0;
  auto& p = it->second;
  const int len = static_cast<int>(s.tokens.size());
  if (p.cap <= 0 || s.status != seq_status::running || num_tokens != 1 || s.num_computed != len - 1 ||
      s.num_output() == 0 || s.params.logprobs >= 0 || s.params.prompt_logprobs >= 0)
    return 0;
  const int room = std::min(max_model_len - len, s.params.max_tokens - s.num_output() - 1);
  int k = std::min(p.cap, room);
  if (p.k) {
    p.k->set_draft_cost(cost_.per_draft_token(draft_cost_));
    k = std::min(k, p.k->next_k());
  }
  return std::max(k, 0);
}

void speculation_planner::observe(seq_id id, int drafted, int accepted) {
  if (auto it = seqs_.find(id); it != seqs_.end() && it->second.k)
    it->second.k->observe(drafted, accepted);
}

void speculation_planner::learn(double wall_us, double draft_us, bool decode_only, std::uint64_t drafted,
                                std::size_t verifications) {
  const bool speculated = verifications > 0;
  if (decode_only) {
    if (speculated)
      cost_.observe_speculative(wall_us, static_cast<double>(drafted) / static_cast<double>(verifications));
    else
      cost_.observe_plain(wall_us);
  }
  if (speculated && drafted > 0) {
    const double target_us = std::max(1.0, wall_us - draft_us);
    draft_cost_ = 0.8 * draft_cost_ + 0.2 * (draft_us / static_cast<double>(drafted)) / target_us;
  }
}

} // namespace troupe::runtime
