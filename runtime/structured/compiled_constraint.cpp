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

// Depth first over the trie: a child is walked only while the grammar takes its byte, so the
// work is the part of the vocabulary the state allows, plus one byte past it.
void compiled_constraint::collect(const match_state& s, std::uint32_t node, token_mask& mask) const {
  for (const auto& e : vocab_->children(node)) {
    if (!matcher_.can_take(s, e.byte))
      continue;
    const auto next = matcher_.advance(s, e.byte);
    if (next.dead())
      continue;
    for (const auto id : vocab_->tokens_at(e.child)) {
      mask.bits[static_cast<std::size_t>(id) >> 6] |= std::uint64_t{1} << (id & 63);
      ++mask.allowed;
    }
    collect(next, e.child, mask);
  }
}

std::shared_ptr<const token_mask> compiled_constraint::allowed(const match_state& s) const {
  const auto key = key_of(s);
  {
    std::lock_guard lock(mutex_);
    if (auto it = masks_.find(key); it != masks_.end())
      return it->second;
  }
  auto mask = std::make_shared<token_mask>();
  mask->bits.assign((static_cast<std::size_t>(vocab_->size()) + 63) / 64, 0);
  collect(s, 0, *mask);
  std::lock_guard lock(mutex_);
  if (masks_.size() >= max_cached_masks)
    masks_.clear(); // a bound, not an LRU: states that recur come back within a few steps
  masks_.emplace(key, mask);
  return mask;
}

} // namespace troupe::runtime::structured
