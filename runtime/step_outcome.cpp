// A finished step's effect on each sequence, and what it leaves for the KV cache.
#include "runtime/step_outcome.hpp"

#include <utility>

namespace troupe::runtime {

step_outcome::step_outcome(scheduler_policy& policy, outcome_settings settings)
    : policy_(policy), settings_(settings) {}

bool step_outcome::is_decode(const granted_work& w) const {
  return (w.end - w.start == 1 && w.samples && policy_.at(w.id).num_output() > 0) || w.drafted > 0;
}

void step_outcome::index_prefix(const sequence& s, int start, int computed) {
  // Only a step that filled a block gives the prefix index something new.
  if (!settings_.enable_prefix_caching || computed / settings_.block_size <= start / settings_.block_size)
    return;
  followup_.computed_ids.push_back(s.id);
  followup_.computed_tokens.emplace_back(s.tokens.begin(), s.tokens.begin() + computed);
  followup_.computed_counts.push_back(computed);
}

finish_reason step_outcome::finish_of(const sequence& s, token_id last, std::span<const token_id> stop_ids) const {
  return finish_after(last, stop_ids, s.num_output(), static_cast<int>(s.tokens.size()),
                      {s.params.max_tokens, settings_.max_model_len, s.params.min_tokens});
}

void step_outcome::computed(const granted_work& w) {
  policy_.computed(w.id, w.end);
  index_prefix(policy_.at(w.id), w.start, w.end);
}

sequence_advance step_outcome::sampled(const granted_work& w, token_id next, std::span<const token_id> stop_ids) {
  policy_.append_token(w.id, next);
  return {{next}, finish_of(policy_.at(w.id), next, stop_ids)};
}

void step_outcome::verified_computed(const granted_work& w, std::span<const token_id> emitted) {
  const auto& s = policy_.at(w.id);
  const int accepted = static_cast<int>(emitted.size()) - 1;
  policy_.computed(w.id, static_cast<int>(s.tokens.size()) + accepted);
}

sequence_advance step_outcome::verified(const granted_work& w, std::span<const token_id> emitted,
                                        std::span<const token_id> stop_ids) {
  const auto& s = policy_.at(w.id);
  // The last token and the accepted drafts have K/V (what verified_computed told the policy).
  const int computed = static_cast<int>(s.tokens.size() + emitted.size()) - 1;
  sequence_advance out;
  for (auto t : emitted) {
    policy_.append_token(w.id, t);
    out.tokens.push_back(t);
    out.finish = finish_of(s, t, stop_ids);
    if (out.finish != finish_reason::none)
      break;
  }
  followup_.trim_ids.push_back(w.id);
  followup_.trim_tokens.push_back(static_cast<int>(s.tokens.size()));
  index_prefix(s, w.start, computed);
  return out;
}

void step_outcome::forked(seq_id parent, std::span<const seq_id> children) {
  for (auto child : children) {
    followup_.fork_parents.push_back(parent);
    followup_.fork_children.push_back(child);
  }
}

kv_followup step_outcome::take_followup() {
  return std::exchange(followup_, kv_followup{});
}

} // namespace troupe::runtime
