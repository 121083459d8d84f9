// A constraint ready for decoding: its grammar's matcher over one model's vocabulary, and
// the allowed-token masks of the parse states met so far (memoized: a JSON string's body,
// say, is one state however long the string, so most steps find their mask here). Parse
// states are interned and their byte transitions cached (a DFA built lazily), so walking the
// vocabulary's trie is mostly table lookups, not parses.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime/structured/grammar.hpp"
#include "runtime/structured/grammar_matcher.hpp"
#include "runtime/structured/token_vocabulary.hpp"

namespace troupe::runtime::structured {

// One bit per token id: bit id % 64 of word id / 64.
struct token_mask {
  std::vector<std::uint64_t> bits;
  int allowed = 0; // how many bits are set
  bool test(token_id id) const { return (bits[static_cast<std::size_t>(id) >> 6] >> (id & 63)) & 1; }
};

class compiled_constraint {
 public:
  // g must be valid (grammar::validate()).
  compiled_constraint(const grammar& g, std::shared_ptr<const token_vocabulary> vocab);

  const grammar_matcher& matcher() const { return matcher_; }
  const token_vocabulary& vocabulary() const { return *vocab_; }
  const match_state& start() const { return start_; }

  // The tokens whose every byte the grammar takes from state s (the stop ids are the
  // caller's: allowed exactly when the grammar accepts). Thread-safe; the masks of at most
  // max_cached_masks states are kept.
  std::shared_ptr<const token_mask> allowed(const match_state& s) const;

  static constexpr std::size_t max_cached_masks = 4096;
  // The interned states' bound: past it the transition cache starts afresh (memory stays bounded).
  static constexpr std::size_t max_interned_states = 100'000;
  std::size_t cached_masks() const {
    std::lock_guard lock(mutex_);
    return masks_.size();
  }

 private:
  // Under mutex_: a state's id (interning it), and the id after one byte (-1: dead).
  std::int32_t intern(const match_state& s) const;
  std::int32_t next(std::int32_t state, std::uint8_t byte) const;
  void collect(std::int32_t state, std::uint32_t node, token_mask& mask) const;

  grammar_matcher matcher_;
  std::shared_ptr<const token_vocabulary> vocab_;
  match_state start_;
  mutable std::mutex mutex_;
  mutable std::unordered_map<std::int32_t, std::shared_ptr<const token_mask>> masks_; // by interned state
  mutable std::unordered_map<std::string, std::int32_t> state_ids_;                   // by serialised state
  mutable std::vector<match_state> states_;                                          // by id
  mutable std::unordered_map<std::uint64_t, std::int32_t> transitions_;              // id << 8 | byte -> id
};

} // namespace troupe::runtime::structured
