// llama.cpp's GBNF grammar format compiled to the byte-level grammar, so that requests
// written for llama.cpp's `grammar` parameter constrain our output the same way.
#pragma once

#include <string_view>

#include "runtime/structured/grammar.hpp"

namespace troupe::runtime::structured {

// Deeper parenthesis nesting is refused, so that the recursive parser's stack stays small.
inline constexpr int max_gbnf_nesting = 256;

// The format: rules `name ::= alternatives` (names [a-zA-Z0-9-]+), alternatives split by
// `|`, sequences of string literals "..." (escapes \n \t \r \\ \" \[ \] \- \xHH \uHHHH
// \UHHHHHHHH, all code points written as UTF-8), character classes [...] and [^...] with
// ranges over code points, `.` for any character, rule names, groups ( ), and the
// quantifiers * + ? {m} {m,} {m,n} on the item before them; `#` comments run to the end of
// the line. A definition may span lines: inside parentheses, after `::=` or `|`, and on any
// following line that is indented or does not start with a rule name (a line that starts
// `name ::=` begins the next rule). The root rule is `root`. Errors are invalid_argument_error
// ("structured_output") naming the line and column: an undefined or twice-defined rule, a
// missing `::=`, an unterminated literal or class, unbalanced parentheses, left recursion.
grammar gbnf_grammar(std::string_view text);

} // namespace troupe::runtime::structured
