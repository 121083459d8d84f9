// A GBNF grammar the stack-set matcher cannot follow far: r0 ::= "a" r1 "x" | "a" r1 "y",
// r1 ::= ... , r<forced> ::= "a" r<forced> "x" | "z". At least forced + 1 a's come first, and
// after n of them each choice of x or y still to come is a parse stack of its own: 2^(n+1).
#pragma once

#include <string>

namespace troupe::test {

inline std::string branching_gbnf(int forced) {
  std::string text = "root ::= r0\n";
  for (int i = 0; i < forced; ++i) {
    const auto next = "r" + std::to_string(i + 1);
    text += "r" + std::to_string(i) + " ::= \"a\" " + next + " \"x\" | \"a\" " + next + " \"y\"\n";
  }
  const auto last = "r" + std::to_string(forced);
  text += last + " ::= \"a\" " + last + " \"x\" | \"z\"\n";
  return text;
}

} // namespace troupe::test
