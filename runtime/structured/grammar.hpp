// A context-free grammar over bytes: what every structured-output constraint (a JSON
// schema, a regex, a list of choices, a GBNF grammar) compiles to before the matcher
// walks it. Rules are alternatives of sequences; an element matches one byte from a set
// of ranges or expands another rule. Repetition and Unicode classes are built from rules
// by the helpers below, so that every front end writes the same shapes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace troupe::runtime::structured {

// The compilers' limits: a schema or regex that would need more is refused, never compiled
// for ever (issue 42: "a bound on states/time").
inline constexpr std::size_t max_grammar_elements = 200'000;
inline constexpr int max_repeat_bound = 10'000;

struct byte_range {
  std::uint8_t lo = 0, hi = 0; // inclusive
  bool operator==(const byte_range&) const = default;
};

struct element {
  enum class kind : std::uint8_t { bytes, rule };
  kind what = kind::bytes;
  std::vector<byte_range> ranges; // kind::bytes: one byte inside any of them
  int rule = -1;                  // kind::rule: the rule expanded here

  static element byte(std::uint8_t b) { return {kind::bytes, {{b, b}}, -1}; }
  static element any_of(std::vector<byte_range> r) { return {kind::bytes, std::move(r), -1}; }
  static element ref(int rule_id) { return {kind::rule, {}, rule_id}; }
  bool matches(std::uint8_t b) const;
};

using sequence = std::vector<element>;

struct rule {
  std::string name;
  std::vector<sequence> alternatives; // an empty sequence matches the empty string
};

// A code point range, inclusive, for classes over Unicode text.
struct code_point_range {
  char32_t lo = 0, hi = 0;
};

class grammar {
 public:
  // A new rule with no alternatives yet (so that rules can refer to each other before
  // they are written). Names are for messages only; duplicates get a numeric suffix.
  int add_rule(std::string_view name);
  void add_alternative(int rule_id, sequence alternative);
  // A rule with the given alternatives, in one call.
  int add_rule(std::string_view name, std::vector<sequence> alternatives);
  void set_root(int rule_id) { root_ = rule_id; }

  int root() const { return root_; }
  const std::vector<rule>& rules() const { return rules_; }
  const rule& at(int rule_id) const { return rules_.at(static_cast<std::size_t>(rule_id)); }
  std::size_t element_count() const { return elements_; }

  // Checks what the matcher relies on; throws invalid_argument_error naming the rule: a
  // root is set, every referenced rule exists and has an alternative, and no rule can
  // reach itself without consuming a byte (left recursion: the matcher would expand for
  // ever). Also refuses grammars over max_grammar_elements.
  void validate() const;

  // --- builders used by the compilers ---------------------------------------------
  // The bytes of `text`, one element each.
  static sequence literal(std::string_view text);
  // item{min,max} (max < 0: unbounded), as an element referring to new rules.
  element repeat(std::string_view name, sequence item, int min, int max);
  element optional(std::string_view name, sequence item) { return repeat(name, std::move(item), 0, 1); }
  element star(std::string_view name, sequence item) { return repeat(name, std::move(item), 0, -1); }
  element plus(std::string_view name, sequence item) { return repeat(name, std::move(item), 1, -1); }
  // One alternative of several sequences, as an element.
  element choice(std::string_view name, std::vector<sequence> alternatives);
  // One UTF-8 encoded code point inside the ranges (negated: outside them, surrogates
  // excluded either way), as an element.
  element code_points(std::string_view name, std::vector<code_point_range> ranges, bool negated);

 private:
  std::vector<rule> rules_;
  int root_ = -1;
  std::size_t elements_ = 0;
};

// The byte-range sequences whose concatenations are exactly the UTF-8 encodings of the
// code points in [lo, hi] (surrogates D800-DFFF excluded). Exposed for tests.
std::vector<sequence> utf8_sequences(char32_t lo, char32_t hi);

} // namespace troupe::runtime::structured
