// A sequence's parse states along its output (see sequence_constraint.hpp).
#include "runtime/structured/sequence_constraint.hpp"

#include <algorithm>
#include <bit>

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
  banned.reserve(static_cast<std::size_t>(vocab - mask->allowed) + stop_ids.size());
  // Word by word: the refused ids are the clear bits (most of the vocabulary in most states).
  for (std::size_t w = 0; w < mask->bits.size(); ++w) {
    std::uint64_t refused = ~mask->bits[w];
    const auto base = static_cast<token_id>(w * 64);
    if (base + 64 > vocab)
      refused &= (std::uint64_t{1} << (vocab - base)) - 1;
    while (refused != 0) {
      banned.push_back(base + static_cast<token_id>(std::countr_zero(refused)));
      refused &= refused - 1;
    }
  }
  // Stop ids: allowed exactly when the output is a whole sentence, whatever their bytes.
  bool changed = false;
  for (const auto id : stop_ids) {
    if (id < 0 || id >= vocab)
      continue;
    const bool is_banned = !mask->test(id);
    if (may_stop && is_banned) {
      banned.erase(std::lower_bound(banned.begin(), banned.end(), id));
    } else if (!may_stop && !is_banned) {
      banned.push_back(id);
      changed = true;
    }
  }
  if (changed)
    std::sort(banned.begin(), banned.end());
  return true;
}

} // namespace troupe::runtime::structured
