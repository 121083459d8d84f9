// Token masks by walking the grammar along the vocabulary's trie (see compiled_constraint.hpp).
#include "runtime/structured/compiled_constraint.hpp"

#include <cstring>

namespace troupe::runtime::structured {

namespace {

std::string key_of(const match_state& s) {
  std::string key;
  for (const auto& stack : s.stacks) {
    const auto n = static_cast<std::uint32_t>(stack.size());
    key.append(reinterpret_cast<const char*>(&n), sizeof n);
    key.append(reinterpret_cast<const char*>(stack.data()), stack.size() * sizeof(std::uint32_t));
  }
  return key;
}

} // namespace

compiled_constraint::compiled_constraint(const grammar& g, std::shared_ptr<const token_vocabulary> vocab)
    : matcher_(g), vocab_(std::move(vocab)), start_(matcher_.start()) {}

std::int32_t compiled_constraint::intern(const match_state& s) const {
  auto key = key_of(s);
  if (auto it = state_ids_.find(key); it != state_ids_.end())
    return it->second;
  const auto id = static_cast<std::int32_t>(states_.size());
  states_.push_back(s);
  state_ids_.emplace(std::move(key), id);
  return id;
}

std::int32_t compiled_constraint::next(std::int32_t state, std::uint8_t byte) const {
  const auto key = (static_cast<std::uint64_t>(state) << 8) | byte;
  if (auto it = transitions_.find(key); it != transitions_.end())
    return it->second;
  const auto& s = states_[static_cast<std::size_t>(state)];
  std::int32_t to = -1;
  if (matcher_.can_take(s, byte)) {
    auto after = matcher_.advance(s, byte);
    if (!after.dead())
      to = intern(after);
  }
  transitions_.emplace(key, to);
  return to;
}

// Depth first over the trie: a child is walked only while the grammar takes its byte, so the
// work is the part of the vocabulary the state allows, plus one byte past it.
void compiled_constraint::collect(std::int32_t state, std::uint32_t node, token_mask& mask) const {
  for (const auto& e : vocab_->children(node)) {
    const auto to = next(state, e.byte);
    if (to < 0)
      continue;
    for (const auto id : vocab_->tokens_at(e.child)) {
      mask.bits[static_cast<std::size_t>(id) >> 6] |= std::uint64_t{1} << (id & 63);
      ++mask.allowed;
    }
    collect(to, e.child, mask);
  }
}

std::shared_ptr<const token_mask> compiled_constraint::allowed(const match_state& s) const {
  // One lock for the whole walk: the executor is the one caller on the hot path (admission
  // computes only the start state's mask).
  std::lock_guard lock(mutex_);
  if (states_.size() > max_interned_states) {
    states_.clear();
    state_ids_.clear();
    transitions_.clear();
    masks_.clear();
  }
  const auto id = intern(s);
  if (auto it = masks_.find(id); it != masks_.end())
    return it->second;
  auto mask = std::make_shared<token_mask>();
  mask->bits.assign((static_cast<std::size_t>(vocab_->size()) + 63) / 64, 0);
  collect(id, 0, *mask);
  if (masks_.size() >= max_cached_masks)
    masks_.clear(); // a bound, not an LRU: states that recur come back within a few steps
  masks_.emplace(id, mask);
  return mask;
}

} // namespace troupe::runtime::structured
