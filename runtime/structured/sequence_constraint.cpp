// A sequence's parse states along its output (see sequence_constraint.hpp).
#include "runtime/structured/sequence_constraint.hpp"

#include <algorithm>

namespace troupe::runtime::structured {

sequence_constraint::sequence_constraint(std::shared_ptr<const compiled_constraint> c)
    : constraint_(std::move(c)), states_{constraint_->start()} {}

const match_state& sequence_constraint::state_after(std::span<const token_id> output) {
  // Keep the states of the common prefix; a rollback (rejected drafts, a recomputed
  // sequence) drops the rest.
  const auto same = static_cast<std::size_t>(
      std::mismatch(tokens_.begin(), tokens_.end(), output.begin(), output.end()).first - tokens_.begin());
  tokens_.resize(same);
  states_.resize(same + 1);
  const auto& vocab = constraint_->vocabulary();
  for (std::size_t i = same; i < output.size(); ++i) {
    const auto id = output[i];
    match_state next;
    if (!states_.back().dead() && id >= 0 && id < vocab.size())
      if (const auto& bytes = vocab.bytes(id))
        next = constraint_->matcher().advance(states_.back(), *bytes);
    tokens_.push_back(id);
    states_.push_back(std::move(next));
  }
  return states_.back();
}

bool sequence_constraint::banned_after(std::span<const token_id> output, std::span<const token_id> stop_ids,
                                       std::vector<token_id>& banned) {
  banned.clear();
  const auto& state = state_after(output);
  if (state.dead())
    return false;
  const auto mask = constraint_->allowed(state);
  const bool may_stop = constraint_->matcher().accepts(state);
  const int vocab = constraint_->vocabulary().size();
  banned.reserve(static_cast<std::size_t>(vocab - mask->allowed));
  for (token_id id = 0; id < vocab; ++id) {
    const bool is_stop = std::find(stop_ids.begin(), stop_ids.end(), id) != stop_ids.end();
    if (is_stop ? !may_stop : !mask->test(id))
      banned.push_back(id);
  }
  return true;
}

} // namespace troupe::runtime::structured
