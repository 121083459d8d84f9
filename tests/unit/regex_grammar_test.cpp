// The regex front end: the grammar accepts exactly the strings PCRE2 fully matches (UTF
// mode, anchored at both ends), on chosen and on random strings, and every unsupported
// construct is refused by name and position.
#include <doctest/doctest.h>

#include <random>
#include <string>
#include <vector>

#include "runtime/errors.hpp"
#include "runtime/structured/grammar_matcher.hpp"
#include "runtime/structured/regex_grammar.hpp"
#include "tests/support/grammar_recognizer.hpp"
#include "tests/support/pcre_full_match.hpp"

using namespace troupe::runtime::structured;
using troupe::invalid_argument_error;
using troupe::test::grammar_recognizer;
using troupe::test::pcre_full_match;

namespace {

// Checks every text; returns how many PCRE2 accepted, so that callers can see the
// comparison was not all refusals.
int agrees_with_pcre(const std::string& pattern, const std::vector<std::string>& texts) {
  const auto g = regex_grammar(pattern);
  grammar_recognizer ours(g);
  const grammar_matcher walker(g); // what the engine runs, byte by byte
  pcre_full_match theirs(pattern, PCRE2_ALT_BSUX); // \uHHHH as JavaScript reads it
  int accepted = 0;
  for (const auto& text : texts) {
    const bool expected = theirs.matches(text);
    accepted += expected;
    CHECK_MESSAGE(ours.matches(text) == expected, "pattern " << pattern << " on '" << text << "'");
    const auto walked = walker.advance(walker.start(), text);
    CHECK_MESSAGE((!walked.dead() && walker.accepts(walked)) == expected,
                  "matcher: pattern " << pattern << " on '" << text << "'");
  }
  return accepted;
}

void refused(const std::string& pattern, const std::string& named) {
  try {
    regex_grammar(pattern);
    FAIL("accepted the pattern " << pattern);
  } catch (const invalid_argument_error& e) {
    CHECK_MESSAGE(std::string(e.what()).find(named) != std::string::npos,
                  "pattern " << pattern << ": message '" << e.what() << "' does not name " << named);
    CHECK(e.param == "structured_output");
  }
}

// Candidates every pattern is tried on: empty, ASCII, near-misses, non-ASCII of each
// UTF-8 length, whitespace and newlines.
const std::vector<std::string> common = {"",
                                         "a",
                                         "b",
                                         "ab",
                                         "abc",
                                         "aa",
                                         "aaa",
                                         "abab",
                                         "ba",
                                         "0",
                                         "7",
                                         "42",
                                         "123",
                                         "1234",
                                         "-1",
                                         "1.5",
                                         "1.",
                                         ".5",
                                         "x",
                                         "xy",
                                         "_",
                                         "A",
                                         "Z",
                                         " ",
                                         "\t",
                                         "\n",
                                         "\r\n",
                                         "a\n",
                                         "a b",
                                         "é",
                                         "日",
                                         "😀",
                                         "aé",
                                         "é日😀",
                                         "\xC3\xA9"
                                         "a",
                                         "{}",
                                         "[]",
                                         "()",
                                         "\\",
                                         "/",
                                         "-",
                                         ".",
                                         "*",
                                         "a.b",
                                         "a-b",
                                         "abcabc",
                                         "cat",
                                         "dog",
                                         "cats",
                                         "ca",
                                         "yes",
                                         "no",
                                         "true",
                                         "false",
                                         "null",
                                         "2024-01-31",
                                         "12:30",
                                         "a1_b2",
                                         "AB12",
                                         "ab12",
                                         "hello world",
                                         "#ff00aa",
                                         "#FFF",
                                         "+1",
                                         "1e10",
                                         "-0.25",
                                         "aaaa",
                                         "aaaaa",
                                         "bbb",
                                         "abb",
                                         "Ab",
                                         "]",
                                         "ac",
                                         "bc",
                                         "\b",
                                         "*+?()[]{}|^$",
                                         "ü",
                                         "ÿ日",
                                         "\n\t",
                                         "c",
                                         "cd",
                                         "abcd",
                                         "ab-12",
                                         "ab-",
                                         "-12"};

} // namespace

TEST_CASE("regexes accept exactly what PCRE2 fully matches on chosen strings") {
  const std::vector<std::string> patterns = {
      "",
      "a",
      "abc",
      "a|b",
      "ab|cd|",
      "(|)a{1,}",
      "(|a|)b+c",
      "a*",
      "a+",
      "a?",
      "a{3}",
      "a{2,}",
      "a{1,3}",
      "a{0,2}b",
      "(ab)*",
      "(?:ab)+c?",
      "(?<word>[a-z]+)-(?P<n>\\d+)",
      "[abc]+",
      "[a-c0-9_]*",
      "[^a]",
      "[^a-z\\n]+",
      "[\\d.]+",
      "[-a]",
      "[a-]+",
      "[a\\-z]",
      "[\\]\\[]",
      ".",
      ".*",
      ".+b",
      "\\d+",
      "\\D",
      "\\w+",
      "\\W+",
      "\\s",
      "\\S+",
      "[\\s\\d]+",
      "[^\\W\\d]+",
      "\\.",
      "\\\\",
      "\\/",
      "\\-",
      "\\*\\+\\?\\(\\)\\[\\]\\{\\}\\|\\^\\$",
      "\\n|\\t|\\r\\n",
      "\\x41\\x62",
      "\\u00e9|\\u65e5",
      "[\\u00e0-\\u00ff]+",
      "[\\x00-\\x7F]+",
      "é+",
      "日本?",
      "[é日😀]",
      "[^é]",
      "😀*",
      "^abc$",
      "^(a|b)*$",
      "(^a|^b)c",
      "a$|b$",
      "-?\\d+(\\.\\d+)?([eE][+-]?\\d+)?",
      "\\d{4}-\\d{2}-\\d{2}",
      "\\d{1,2}:\\d{2}",
      "#[0-9a-fA-F]{3}|#[0-9a-fA-F]{6}",
      "(true|false|null)",
      "(cat|dog)s?",
      "(yes|no)|x",
      "(a*)*",
      "(a*)+",
      "(a?)*b",
      "(a|)+",
      "(a?b?)*",
      "(a*b*)*c?",
      "(|a)*",
      "()*",
      "(a*){2,3}",
      "((ab)?(cd)*)+",
      "a*?b",
      "a+?",
      "a{1,3}?",
      "a??b",
      "a*+",
      "\\d++",
      "[ab]{2}+",
      "(a|ab)(c|bcd)(d*)",
      "(a|b)*abb",
      "(a+|b+)*",
      "[a-z]+ [a-z]+",
      "[+-]?[0-9]+",
      "a.b|a-b",
      "[.]",
      "[*]+",
      "a{0}",
      "a{0}b",
      "(ab){0,0}c?",
      "[\\b]",
      "\\{\\}",
  };
  int accepting = 0;
  for (const auto& p : patterns)
    if (agrees_with_pcre(p, common) > 0)
      ++accepting;
    else
      MESSAGE("no candidate matches " << p);
  CHECK(accepting == static_cast<int>(patterns.size()));
}

TEST_CASE("regexes agree with PCRE2 on random strings over a small alphabet") {
  const std::vector<std::string> patterns = {
      "(a|b)*",     "a*b*c*",         "(ab|ba)+",     "[ab]{2,4}",
      "a?b?c?",     "(a|bc)*c",       "[^a]*",        ".a.",
      "(aa|a)*b",   "(a*b)*",         "\\d+",         "[a-c]+0?",
      "(é|a)+",     "[^é\\d]*",       "é?.é?",        "(a|b|c){3}",
      "c(a|b)*c",   "((a|b)c)*",      "(a*|b*)*c",    "a{1,2}b{0,2}",
      "(ab?)+",     "(0|1(01*0)*1)*", "a*?b+?c??",    "[0-9a]{2,}",
      "(?:a|é)c*",  "[abc]*a[abc]",   "(a|b)*a(a|b)", "(?<x>a)(?<y>b)*",
      "^(ca|ab)*$", "a+b*+",          "(a|b)*?c",     "-?(0|[1-9][0-9]*)",
  };
  const std::vector<std::string> alphabet = {"a", "b", "c", "0", "1", "é", "-", "\n"};
  std::mt19937 rng(20261206);
  int accepting = 0;
  for (const auto& p : patterns) {
    std::vector<std::string> texts;
    for (int k = 0; k < 300; ++k) {
      std::string t;
      const int length = static_cast<int>(rng() % 8);
      for (int j = 0; j < length; ++j)
        t += alphabet[rng() % alphabet.size()];
      texts.push_back(std::move(t));
    }
    accepting += agrees_with_pcre(p, texts) > 0;
  }
  CHECK(accepting >= static_cast<int>(patterns.size()) - 3);
}

TEST_CASE("escapes beyond PCRE2's syntax mean what JavaScript and PCRE mean") {
  auto g = regex_grammar("\\uD83D\\uDE00|\\x{1F601}|\\u{e9}|\\0");
  grammar_recognizer r(g);
  CHECK(r.matches("😀"));
  CHECK(r.matches("😁"));
  CHECK(r.matches("é"));
  CHECK(r.matches(std::string(1, '\0')));
  CHECK_FALSE(r.matches("\xED\xA0\xBD")); // the high surrogate alone, as CESU-8
  CHECK_FALSE(r.matches("e"));
}

TEST_CASE("a class of code points never matches bytes that are not UTF-8") {
  auto g = regex_grammar(".*");
  grammar_recognizer r(g);
  CHECK(r.matches("héllo 日本 😀"));
  CHECK_FALSE(r.matches("\xC3"));             // cut short
  CHECK_FALSE(r.matches("\xC0\xAF"));         // overlong
  CHECK_FALSE(r.matches("\xED\xA0\x80"));     // a surrogate
  CHECK_FALSE(r.matches("\xF4\x90\x80\x80")); // past U+10FFFF
  CHECK_FALSE(r.matches("\n"));
}

TEST_CASE("add_regex adds a named rule to a grammar that other rules can use") {
  grammar g;
  const int digits = add_regex(g, "\\d+", "digits");
  const int root = g.add_rule("root", {sequence{element::byte('['), element::ref(digits), element::byte(']')}});
  g.set_root(root);
  g.validate();
  grammar_recognizer r(g);
  CHECK(g.at(digits).name == "digits");
  CHECK(r.matches("[123]"));
  CHECK_FALSE(r.matches("[]"));
  CHECK_FALSE(r.matches("123"));
}

TEST_CASE("unsupported regex constructs are refused by name and position") {
  refused("(a)\\1", "backreference '\\1' at position 3");
  refused("(?<x>a)\\k<x>", "backreference '\\k'");
  refused("(?P=x)", "backreference");
  refused("a(?=b)", "lookaround '(?=' at position 1");
  refused("a(?!b)", "lookaround '(?!'");
  refused("(?<=a)b", "lookaround '(?<='");
  refused("(?<!a)b", "lookaround '(?<!'");
  refused("\\bword", "word boundary '\\b' at position 0");
  refused("a\\B", "word boundary '\\B'");
  refused("(ab", "unbalanced parenthesis: '(' at position 0 is never closed");
  refused("ab)", "unbalanced parenthesis: ')' at position 2");
  refused("((a)|b", "never closed");
  refused("[ab", "unbalanced bracket: '[' at position 0 is never closed");
  refused("a]", "unbalanced bracket: ']' at position 1");
  refused("a}", "unbalanced brace");
  refused("*a", "quantifier '*' at position 0 has nothing to repeat");
  refused("a|+", "quantifier '+' at position 2 has nothing to repeat");
  refused("(?)", "group syntax");
  refused("(*)", "nothing to repeat");
  refused("{2}", "quantifier '{' at position 0 has nothing to repeat");
  refused("^*", "nothing to repeat");
  refused("a**", "follows another quantifier");
  refused("a{2}{3}", "follows another quantifier");
  refused("a{,3}", "starts no repetition");
  refused("a{3,2}", "minimum above its maximum");
  refused("a{10001}", "bound above 10000");
  refused("[z-a]", "range 'z-a' at position 1 is out of order");
  refused("[\\d-z]", "class escape");
  refused("\\q", "unknown escape '\\q' at position 0");
  refused("\\e", "unknown escape '\\e'");
  refused("\\x4", "escape '\\x' at position 0 needs 2 hex digits");
  refused("\\u12", "needs 4 hex digits");
  refused("\\x{110000}", "above U+10FFFF");
  refused("\\uD800", "lone surrogate");
  refused("abc\\", "lone backslash");
  refused("\\p{L}", "Unicode property '\\p'");
  refused("\\Aabc", "anchor '\\A'");
  refused("a^b", "anchor '^' at position 1 is only supported at the start");
  refused("a$b", "anchor '$' at position 1 is only supported at the end");
  refused("(a$)*", "anchor '$'");
  refused("(?i)abc", "group syntax '(?i'");
  refused("(?>a+)b", "atomic group");
  refused("a++a", "possessive quantifier at position 1");
  refused("(ab)*+", "possessive quantifier");
  refused("[]", "empty class '[]'");
  refused("[^]", "class '[^]'");
  refused("[[:alpha:]]", "POSIX class");
  refused("[^\\s\\S]", "matches no character");
  refused("\\01", "octal escape");
  refused("\xC3(", "not valid UTF-8 at position 0");
  refused(std::string(max_regex_length + 1, 'a'), "more than the 16384 supported");
  refused(std::string(300, '(') + std::string(300, ')'), "nested deeper than 256");
  std::string huge;
  for (int k = 0; k < 8; ++k)
    huge += "a{0,10000}";
  refused(huge, "grammar elements");
}

TEST_CASE("a pattern of the largest supported length compiles") {
  const auto g = regex_grammar(std::string(max_regex_length, 'a'));
  grammar_recognizer r(g);
  CHECK(r.matches(std::string(max_regex_length, 'a')));
  CHECK_FALSE(r.matches(std::string(max_regex_length - 1, 'a')));
}

TEST_CASE("patterns built to blow up compile in bounded time or are refused") {
  std::string optional_run = "(";
  for (int k = 0; k < 2000; ++k)
    optional_run += "a?";
  refused(optional_run + ")*", "grammar elements");

  std::string many_stars;
  for (int k = 0; k < 3000; ++k)
    many_stars += "(a*)*";
  const auto g = regex_grammar(many_stars);
  grammar_recognizer r(g);
  CHECK(r.matches("aaaa"));

  std::string nested;
  for (int k = 0; k < 200; ++k)
    nested += "(";
  nested += "a?b?";
  for (int k = 0; k < 200; ++k)
    nested += ")*";
  agrees_with_pcre(nested, {"", "ab", "ba", "abba", "c", "aab"});
}

TEST_CASE("random patterns are refused with invalid_argument_error or agree with PCRE2") {
  const std::vector<std::string> pieces = {"a", "b", "é", "(", ")", "|", "*", "+",  "?", "[",   "]", "^",
                                           "-", ".", "{", "}", "1", "2", ",", "\\", "d", "(?:", "$", "\\n"};
  const std::vector<std::string> alphabet = {"a", "b", "é", "1", "2", "-", ",", "\n", "d", "{"};
  std::mt19937 rng(42);
  int compiled = 0;
  for (int k = 0; k < 3000; ++k) {
    std::string pattern;
    const int length = 1 + static_cast<int>(rng() % 8);
    for (int j = 0; j < length; ++j)
      pattern += pieces[rng() % pieces.size()];
    bool ours = true;
    try {
      regex_grammar(pattern);
    } catch (const invalid_argument_error&) {
      ours = false;
    }
    int error = 0;
    PCRE2_SIZE offset = 0;
    auto* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), PCRE2_UTF | PCRE2_ALT_BSUX,
                               &error, &offset, nullptr);
    const bool theirs = code != nullptr;
    pcre2_code_free(code);
    CHECK_MESSAGE((theirs || !ours), "we accept a pattern PCRE2 refuses: " << pattern);
    if (ours && theirs) {
      ++compiled;
      std::vector<std::string> texts;
      for (int t = 0; t < 40; ++t) {
        std::string text;
        const int n = static_cast<int>(rng() % 6);
        for (int j = 0; j < n; ++j)
          text += alphabet[rng() % alphabet.size()];
        texts.push_back(std::move(text));
      }
      agrees_with_pcre(pattern, texts);
    }
  }
  CHECK(compiled > 300);
}
