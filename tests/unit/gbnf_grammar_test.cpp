// The GBNF front end: grammars accept what an equivalent PCRE2 regex fully matches,
// recursion and multi-line definitions work as in llama.cpp, and every malformed grammar
// is refused with its line and column.
#include <doctest/doctest.h>

#include <random>
#include <string>
#include <vector>

#include "runtime/errors.hpp"
#include "runtime/structured/gbnf_grammar.hpp"
#include "tests/support/grammar_recognizer.hpp"
#include "tests/support/pcre_full_match.hpp"

using namespace troupe::runtime::structured;
using troupe::invalid_argument_error;
using troupe::test::grammar_recognizer;
using troupe::test::pcre_full_match;

namespace {

void refused(const std::string& text, const std::vector<std::string>& named) {
  try {
    gbnf_grammar(text);
    FAIL("accepted the grammar " << text);
  } catch (const invalid_argument_error& e) {
    for (const auto& n : named)
      CHECK_MESSAGE(std::string(e.what()).find(n) != std::string::npos,
                    "grammar " << text << ": message '" << e.what() << "' does not name " << n);
    CHECK(e.param == "structured_output");
  }
}

std::vector<std::string> random_strings(const std::vector<std::string>& alphabet, int count, int max_length,
                                        unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<std::string> out;
  for (int k = 0; k < count; ++k) {
    std::string t;
    const int length = static_cast<int>(rng() % static_cast<unsigned>(max_length + 1));
    for (int j = 0; j < length; ++j)
      t += alphabet[rng() % alphabet.size()];
    out.push_back(std::move(t));
  }
  return out;
}

} // namespace

TEST_CASE("GBNF grammars accept exactly what an equivalent PCRE2 regex fully matches") {
  // Each pair is tried on random strings over the characters it uses and a few others,
  // so that both answers come up often.
  struct pair {
    std::string gbnf, regex;
    std::vector<std::string> alphabet;
  };
  const std::vector<std::string> abc = {"a", "b", "c", "0", "-"};
  const std::vector<pair> pairs = {
      {R"(root ::= "a")", "a", abc},
      {R"(root ::= "ab" | "b")", "ab|b", abc},
      {R"(root ::= "a"* "b"+ "c"?)", "a*b+c?", abc},
      {R"(root ::= "ab"{2} "c"{1,} "a"{0,2})", "(ab){2}c+a{0,2}", {"ab", "c", "a", "b"}},
      {R"(root ::= [a-c]+ [^a-c0]?)", "[a-c]+[^a-c0]?", {"a", "c", "0", "d", "é", "\n"}},
      {R"(root ::= .)", ".", {"a", "\n", "é", "日", "😀", "\x7F"}},
      {R"(root ::= . . | "")", "..|", {"a", "\n", "é", "日", "😀"}},
      {R"(root ::= x ("," x)*
x ::= [0-9]+)",
       "[0-9]+(,[0-9]+)*",
       {"0", "1", ",", "a"}},
      {R"(root ::= ("a" | "b" "c")* "c")", "(a|bc)*c", {"a", "b", "c"}},
      {R"(root ::= "é"+ [é日-日]? "\u00e9")", "é+[é日]?é", {"é", "日", "e", "😀"}},
      {R"(root ::= [^\n]*)", "[^\\n]*", {"a", "\n", "é"}},
      {R"(root ::= [\x30-\x31]{2,3} "\U0001F600"?)", "[01]{2,3}😀?", {"0", "1", "2", "😀"}},
      {R"(root ::= "-"? ("0" | [1-9] [0-9]*) ("." [0-9]+)?)",
       "-?(0|[1-9][0-9]*)(\\.[0-9]+)?",
       {"-", "0", "1", "9", "."}},
      {R"(root ::= [-a]+ [a\-b])", "[-a]+[a\\-b]", {"-", "a", "b", "c"}},
      {R"(root ::= "\"" [^"\\]* "\"")", R"("[^"\\]*")", {"\"", "\\", "a", "é"}},
  };
  unsigned seed = 7;
  for (const auto& p : pairs) {
    const auto g = gbnf_grammar(p.gbnf);
    grammar_recognizer ours(g);
    pcre_full_match theirs(p.regex, PCRE2_DOTALL); // GBNF's . takes newlines too
    int accepted = 0;
    for (const auto& text : random_strings(p.alphabet, 400, 6, seed++)) {
      const bool expected = theirs.matches(text);
      accepted += expected;
      CHECK_MESSAGE(ours.matches(text) == expected, "grammar " << p.gbnf << " on '" << text << "'");
    }
    CHECK_MESSAGE(accepted > 0, "no random string matches " << p.regex);
  }
}

TEST_CASE("recursive GBNF rules accept balanced parentheses and nothing else") {
  const auto g = gbnf_grammar(R"g(root ::= ( "(" root ")" )*)g");
  grammar_recognizer r(g);
  auto balanced = [](const std::string& s) {
    int depth = 0;
    for (const char c : s) {
      depth += c == '(' ? 1 : -1;
      if (depth < 0)
        return false;
    }
    return depth == 0;
  };
  int accepted = 0;
  for (const auto& text : random_strings({"(", ")"}, 500, 10, 11)) {
    accepted += balanced(text);
    CHECK_MESSAGE(r.matches(text) == balanced(text), "on '" << text << "'");
  }
  CHECK(accepted > 20);
}

TEST_CASE("a JSON grammar written over several lines with comments accepts JSON and refuses near-misses") {
  const auto g = gbnf_grammar(R"(# A small JSON grammar, in the layout llama.cpp's examples use.
root   ::= value
value  ::= object | array | string | number | ("true" | "false" | "null")

object ::=
  "{" ws (
    string ws ":" ws value ws    # the first member
    ("," ws string ws ":" ws value ws)*
  )? "}"

array  ::= "[" ws ( value ws ("," ws value ws)* )? "]"
string ::= "\"" ( [^"\\\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4}) )* "\""
number ::= "-"? ("0" | [1-9] [0-9]*) ("." [0-9]+)? ([eE] [-+]? [0-9]+)?
ws     ::= [ \t\n]*
)");
  grammar_recognizer r(g);
  for (const char* ok : {R"({})", R"([])", R"({"a": 1})", R"({ "a" : [1, 2.5, -3e10, true, null], "b": {} })",
                         R"("h\u00e9llo \"x\"")", "\"日本\"", "0", "-0.5", "[\n  1,\n  2\n]"})
    CHECK_MESSAGE(r.matches(ok), ok);
  for (const char* bad : {R"({)", R"({"a"})", R"([1,])", R"(01)", R"("\q")", R"({"a": 1,})", "\"a\nb\"", "tru"})
    CHECK_MESSAGE(!r.matches(bad), bad);
}

TEST_CASE("a definition continues on indented lines and lines starting with '|' and ends at the next rule") {
  const auto g = gbnf_grammar(
      "root ::= \"a\"\n"
      "   \"b\"   # indented: still root\n"
      "\n"
      "  | \"c\" x\n"
      "| \"d\"\n"
      "x ::= \"x\" |\n"
      "  \"y\"\n");
  grammar_recognizer r(g);
  for (const char* ok : {"ab", "cx", "cy", "d"})
    CHECK_MESSAGE(r.matches(ok), ok);
  for (const char* bad : {"a", "b", "c", "x", "abx", "dx"})
    CHECK_MESSAGE(!r.matches(bad), bad);
}

TEST_CASE("GBNF escapes in literals and classes stand for code points written as UTF-8") {
  const auto g = gbnf_grammar(R"(root ::= "\x41\u00e9\U0001F600\n\t\r\\\"\[\]" [\u0400-\u04FF] [^\x00-\x7F])");
  grammar_recognizer r(g);
  CHECK(r.matches("Aé😀\n\t\r\\\"[]жü"));
  CHECK_FALSE(r.matches("Aé😀\n\t\r\\\"[]жu"));
  CHECK_FALSE(r.matches("A\xE9😀\n\t\r\\\"[]жü")); // \u00e9 is not the byte E9
}

TEST_CASE("a malformed GBNF grammar is refused with its line and column") {
  refused("root ::= foo", {"line 1, column 10", "rule 'foo' is used but never defined"});
  refused("root ::= a b\na ::= \"x\"", {"line 1, column 12", "'b'"});
  refused("root = \"a\"", {"line 1, column 6", "expected '::=' after rule name 'root'"});
  refused("root ::= \"a\"\nfoo \"b\"", {"line 2, column 5", "expected '::='", "'foo'"});
  refused("root ::= \"abc", {"line 1, column 10", "unterminated string literal"});
  refused("root ::= \"abc\n\"", {"line 1, column 10", "unterminated string literal"});
  refused("root ::= [a-z", {"line 1, column 10", "unterminated character class"});
  refused("root ::= (\"a\" | \"b\"", {"line 1, column 10", "unbalanced parenthesis: '(' is never closed"});
  refused("root ::= \"a\")", {"line 1, column 13", "unbalanced parenthesis: ')'"});
  refused("root ::= x\nx ::= x \"a\"", {"left-recursive", "'x'", "defined at line 2, column 1"});
  refused("root ::= \"b\" | root \"a\"", {"left-recursive", "'root'"});
  refused("root ::= (\"a\"?)*", {"rule 'root' defined at line 1, column 1 is left-recursive", "repetitions"});
  refused("x ::= \"a\"", {"no 'root' rule"});
  refused("root ::= \"a\"\nroot ::= \"b\"", {"line 2, column 1", "rule 'root' is already defined at line 1, column 1"});
  refused("root ::= [z-a]", {"line 1, column 11", "range 'z-a' is out of order"});
  refused("root ::= \"\\q\"", {"line 1, column 11", "unknown escape '\\q'"});
  refused("root ::= \"\\x4\"", {"escape '\\x' needs 2 hex digits"});
  refused("root ::= \"\\uD800\"", {"is not a Unicode character"});
  refused("root ::= * \"a\"", {"line 1, column 10", "quantifier '*' has nothing to repeat"});
  refused("root ::= \"a\"{2", {"line 1, column 13", "not closed by '}'"});
  refused("root ::= \"a\"{}", {"needs a count"});
  refused("root ::= \"a\"{3,2}", {"minimum above its maximum"});
  refused("root ::= \"a\"{20000}", {"bound above 10000"});
  refused("root ::= []", {"line 1, column 10", "matches no character"});
  refused("root ::= \"a\" @", {"line 1, column 14", "unexpected '@'"});
  refused("::= \"a\"", {"line 1, column 1", "expected a rule name"});
  refused("root ::= " + std::string(300, '(') + std::string(300, ')'), {"nested deeper than 256"});
}

TEST_CASE("GBNF quantifiers apply to the whole last item, a literal or a group") {
  const auto g = gbnf_grammar(R"(root ::= "ab"+ ("c" "d")? [xy]{2})");
  grammar_recognizer r(g);
  CHECK(r.matches("ababxy"));
  CHECK(r.matches("abcdyy"));
  CHECK_FALSE(r.matches("abbxy"));
  CHECK_FALSE(r.matches("abcxy"));
  CHECK_FALSE(r.matches("abx"));
}

TEST_CASE("GBNF accepts CRLF line ends, spaces inside repetition braces and a final comment") {
  const auto g = gbnf_grammar("root ::= x{ 1 , 2 }\r\n  | \"z\"\r\nx ::= \"xy\" # no newline after this");
  grammar_recognizer r(g);
  CHECK(r.matches("xy"));
  CHECK(r.matches("xyxy"));
  CHECK(r.matches("z"));
  CHECK_FALSE(r.matches("xyxyxy"));
  CHECK_FALSE(r.matches(""));
}

TEST_CASE("random GBNF texts compile or are refused with invalid_argument_error, never anything else") {
  const std::vector<std::string> pieces = {"root", " ::= ", "x",  "x ::= ", "\"a\"", "\"", "[a-b]", "[^", "]",
                                           "(",    ")",     "|",  "*",      "+",     "?",  "{1,2}", "{",  "}",
                                           ".",    "\n",    "  ", "#c\n",   "\\",    "é",  "-",     "::="};
  std::mt19937 rng(5);
  int compiled = 0;
  for (int k = 0; k < 5000; ++k) {
    std::string text = k % 2 == 0 ? "root ::= " : "";
    const int length = 1 + static_cast<int>(rng() % 10);
    for (int j = 0; j < length; ++j)
      text += pieces[rng() % pieces.size()];
    try {
      const auto g = gbnf_grammar(text);
      grammar_recognizer r(g);
      r.matches("a");
      ++compiled;
    } catch (const invalid_argument_error& e) {
      CHECK_MESSAGE(std::string(e.what()).rfind("GBNF", 0) == 0, e.what());
    }
  }
  CHECK(compiled > 100);
}
