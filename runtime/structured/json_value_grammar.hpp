// JSON's lexical pieces as grammar rules (bounded whitespace, strings, numbers, any value),
// and the compact text that enum and const values are written as. Used by the schema compiler.
#pragma once

#include <boost/json/value.hpp>

#include <optional>
#include <string>

#include "runtime/structured/grammar.hpp"

namespace troupe::runtime::structured {

element digit();     // [0-9]
element hex_digit(); // [0-9a-fA-F]

inline void append(sequence& s, const sequence& more) {
  s.insert(s.end(), more.begin(), more.end());
}

// A number as a model is expected to write it: integers in decimal, integral doubles
// without an exponent (-0 as 0), other doubles in their shortest round-trip form.
std::string number_text(const boost::json::value& v);

// The compact serialization enum and const values are emitted as. Throws
// invalid_argument_error for a non-finite number, which has no JSON text.
std::string canonical_text(const boost::json::value& v);

bool is_integral_number(const boost::json::value& v);

// The shared rules of one grammar, each added the first time it is asked for, so that every
// schema that needs "a string" or "any value" refers to the same rule.
class json_value_rules {
 public:
  explicit json_value_rules(grammar& g) : g_(g) {}

  // ' ' or '\n', at most max_json_whitespace bytes (json_schema_grammar.hpp says why).
  element ws();
  element string_char();
  element any_string();
  element any_integer();
  element any_number();
  element any_value();
  element any_object();
  element any_array();

  // { } or { "k": v (, "k": v)* } into `rule_id`, values from `value`.
  void object_of(int rule_id, element value, const std::string& name);

 private:
  sequence integer_text();

  grammar& g_;
  std::optional<element> ws_, string_char_, any_string_, digits_, any_integer_, any_number_, any_value_, any_object_,
      any_array_;
};

} // namespace troupe::runtime::structured
