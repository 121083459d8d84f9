// Walks a grammar one byte at a time. A match state is the set of parse stacks that are
// still alive (each stack: where to go on in every rule entered, innermost on top, its top
// always a byte element); a byte keeps the stacks whose top matches it and expands them
// until their tops are bytes again. The grammar has no left recursion (validate()), so
// expansion ends. Plain data, copied freely: the token mask tries a state on every path
// of the vocabulary's trie.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "runtime/structured/grammar.hpp"

namespace troupe::runtime::structured {

// A parse state: sorted, distinct stacks. An empty stack means the input so far is a
// whole sentence of the grammar.
struct match_state {
  std::vector<std::vector<std::uint32_t>> stacks;
  bool dead() const { return stacks.empty(); }
  bool operator==(const match_state&) const = default;
};

class grammar_matcher {
 public:
  // The most stack entries one state may hold, and the most one step may make before
  // duplicates merge. An ambiguous grammar (a^n then n of x|y, in nested rules) can need
  // twice as many with every byte; past these the matcher refuses to go on
  // (invalid_argument_error, param structured_output) instead of taking the process's memory
  // and time. JSON schemas and tool calls stay far below them.
  static constexpr std::size_t max_state_entries = std::size_t{1} << 16;
  static constexpr std::size_t max_step_entries = std::size_t{1} << 20;

  explicit grammar_matcher(const grammar& g); // g must be valid (grammar::validate())

  match_state start() const;
  // The state after one more byte (dead when no stack accepts it).
  match_state advance(const match_state& s, std::uint8_t byte) const;
  match_state advance(match_state s, std::string_view bytes) const;
  // The input so far is a whole sentence.
  bool accepts(const match_state& s) const;
  // Some stack can take `byte` next (cheaper than advance when only the answer matters).
  bool can_take(const match_state& s, std::uint8_t byte) const;
  // Every stack is the empty one: nothing but the end can follow.
  bool finished(const match_state& s) const { return s.stacks.size() == 1 && s.stacks[0].empty(); }

 private:
  // The grammar flattened: each alternative's elements in a row, then an end marker.
  struct flat_element {
    enum class kind : std::uint8_t { bytes, rule, end } what;
    std::int32_t value; // bytes: index into byte_sets_; rule: rule id
  };
  // `entries` counts what out holds, against max_step_entries; normalise() checks the rest.
  void expand(std::vector<std::uint32_t>& stack, std::vector<std::vector<std::uint32_t>>& out,
              std::size_t& entries) const;
  void normalise(match_state& s) const;
  // Where a stack goes on after the element at `pos`: false at the end of its alternative,
  // else its canonical position in `next` (a rule that ends its alternative: tails_).
  bool continuation(std::uint32_t pos, std::uint32_t& next) const;
  bool set_has(std::int32_t set, std::uint8_t byte) const {
    return (byte_sets_[static_cast<std::size_t>(set)][byte >> 6] >> (byte & 63)) & 1;
  }

  std::vector<flat_element> flat_;
  std::vector<std::array<std::uint64_t, 4>> byte_sets_;
  std::vector<std::vector<std::uint32_t>> alternatives_; // per rule: positions of its alternatives
  std::vector<std::uint32_t> tails_;                    // per rule: the position of [rule, end]
  int root_ = -1;
};

} // namespace troupe::runtime::structured
