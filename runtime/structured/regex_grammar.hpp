// Regular expressions (vLLM's guided_regex, a JSON schema's "pattern") compiled to the
// byte-level grammar: the rules derive exactly the UTF-8 strings the pattern fully matches.
#pragma once

#include <cstddef>
#include <string_view>

#include "runtime/structured/grammar.hpp"

namespace troupe::runtime::structured {

// Longer patterns are refused before parsing: they come from requests.
inline constexpr std::size_t max_regex_length = 16 * 1024;
// Deeper group nesting is refused, so that the recursive parser's stack stays small.
inline constexpr int max_regex_nesting = 256;

// The syntax is the common PCRE/ECMAScript subset, matched by code points: literals,
// escapes (\n \t \r \f \v, escaped punctuation, \xHH \x{H..} \uHHHH \u{H..}), \d \D \w \W
// \s \S (ASCII, as PCRE without UCP), `.` (any code point but \n), classes with ranges and
// negation, groups ( ) (?: ) (?<name> ) (?P<name> ), `|`, quantifiers * + ? {m} {m,} {m,n}
// with a lazy `?` suffix (it changes which match is found, never whether one is). `^` at the
// start and `$` at the end are accepted: the match is whole-string anyway. A possessive `+`
// suffix is accepted where it cannot change the set of full matches: on one character at the
// end of the pattern. Backreferences, lookaround, word boundaries, atomic groups, inline
// flags, Unicode properties and anything unknown are refused with invalid_argument_error
// ("structured_output") naming the construct and its position (a 0-based byte offset).

// How the matched text is written: as it is, or as the body of a JSON string (a JSON
// schema's "pattern" constrains the decoded string, so '"', '\\' and control characters
// are written as their JSON escapes: \" \\ \n \t \r \b \f and \u00XX for the rest).
enum class regex_text { raw, json_string_body };

// Adds the rules for `pattern` to `g` and returns the id of the rule that matches it.
int add_regex(grammar& g, std::string_view pattern, std::string_view name = "regex",
              regex_text text = regex_text::raw);

// A grammar whose root is `pattern`, validated.
grammar regex_grammar(std::string_view pattern);

} // namespace troupe::runtime::structured
