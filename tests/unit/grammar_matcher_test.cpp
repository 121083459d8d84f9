// The structured-output core: the grammar's matcher accepts exactly what an independent
// recognizer accepts, UTF-8 classes match exactly their code points, bad grammars are refused
// by name, and token masks allow exactly the tokens that can continue a sentence (checked
// by brute force over a finite language), with stop ids only once the output is complete.
#include <doctest/doctest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "runtime/errors.hpp"
#include "runtime/structured/compiled_constraint.hpp"
#include "runtime/structured/gbnf_grammar.hpp"
#include "runtime/structured/grammar.hpp"
#include "runtime/structured/grammar_matcher.hpp"
#include "runtime/structured/sequence_constraint.hpp"
#include "runtime/structured/token_vocabulary.hpp"
#include "runtime/tokenizer/utf8.hpp"
#include "tests/support/ambiguous_grammar.hpp"
#include "tests/support/data_root.hpp"
#include "tests/support/grammar_recognizer.hpp"

using namespace troupe::runtime;
using namespace troupe::runtime::structured;

namespace {

// S ::= "(" S ")" S | "" : balanced parentheses (recursion in the middle and at the end).
grammar balanced() {
  grammar g;
  const int s = g.add_rule("s");
  g.add_alternative(s, {element::byte('('), element::ref(s), element::byte(')'), element::ref(s)});
  g.add_alternative(s, {});
  g.set_root(s);
  g.validate();
  return g;
}

// [a-c]{2,4} ("x" | "yz")* "!"?
grammar repeats() {
  grammar g;
  sequence body;
  body.push_back(g.repeat("abc", {element::any_of({{'a', 'c'}})}, 2, 4));
  body.push_back(g.star("tail", {g.choice("xyz", {grammar::literal("x"), grammar::literal("yz")})}));
  body.push_back(g.optional("bang", grammar::literal("!")));
  g.set_root(g.add_rule("root", {body}));
  g.validate();
  return g;
}

// A quoted string of non-ASCII-quote code points: "\"" [^"\\\x00-\x1f]* "\"".
grammar quoted() {
  grammar g;
  sequence body = grammar::literal("\"");
  body.push_back(g.star("chars", {g.code_points("char", {{'"', '"'}, {'\\', '\\'}, {0, 0x1F}}, true)}));
  body.push_back(element::byte('"'));
  g.set_root(g.add_rule("root", {body}));
  g.validate();
  return g;
}

// ("" | "" | "a") "1"+ : a rule whose first alternatives are empty, followed by a rule. An
// empty alternative goes on into what follows the rule; the next alternative must still
// start from the stack as it was (the fuzzer found the matcher accepting "" here).
grammar empty_first_choice() {
  grammar g;
  sequence body;
  body.push_back(g.choice("maybe_a", {{}, {}, grammar::literal("a")}));
  body.push_back(g.plus("ones", grammar::literal("1")));
  g.set_root(g.add_rule("root", {body}));
  g.validate();
  return g;
}

bool matcher_accepts(const grammar& g, const std::string& text) {
  grammar_matcher m(g);
  const auto s = m.advance(m.start(), text);
  return !s.dead() && m.accepts(s);
}

std::string random_string(std::mt19937& rng, const std::string& alphabet, std::size_t max_len) {
  std::uniform_int_distribution<std::size_t> len(0, max_len), pick(0, alphabet.size() - 1);
  std::string out;
  for (std::size_t n = len(rng); n > 0; --n)
    out += alphabet[pick(rng)];
  return out;
}

std::string utf8(char32_t c) {
  std::string out;
  tokenizer_detail::append_char(out, c);
  return out;
}

// A vocabulary of the given strings, ids in order; std::nullopt for an id with no bytes.
std::shared_ptr<const token_vocabulary> vocab_of(std::vector<std::optional<std::string>> tokens) {
  return std::make_shared<const token_vocabulary>(std::move(tokens));
}

} // namespace

TEST_CASE("the matcher accepts exactly the strings the recognizer derives") {
  std::mt19937 rng(7);
  struct grammar_case {
    grammar g;
    std::string alphabet;
  };
  std::vector<grammar_case> cases{
      {balanced(), "()x"}, {repeats(), "abcxyz!d"}, {quoted(), "\"a\\\x01"}, {empty_first_choice(), "a1x"}};
  for (auto& c : cases) {
    troupe::test::grammar_recognizer rec(c.g);
    int accepted = 0;
    for (int i = 0; i < 3000; ++i) {
      const auto s = random_string(rng, c.alphabet, 9);
      const bool expected = rec.matches(s);
      accepted += expected ? 1 : 0;
      CHECK_MESSAGE(matcher_accepts(c.g, s) == expected, "\"" << s << "\"");
    }
    CHECK(accepted > 10); // the alphabets hit the languages, not only their complements
  }
  CHECK(matcher_accepts(balanced(), "(()())()"));
  CHECK_FALSE(matcher_accepts(balanced(), "(()"));
  CHECK(matcher_accepts(repeats(), "abxyzx!"));
  CHECK_FALSE(matcher_accepts(repeats(), "abcab"));
  CHECK(matcher_accepts(quoted(), "\"h\xC3\xA9llo \xF0\x9F\x98\x80\""));
  CHECK_FALSE(matcher_accepts(quoted(), "\"a\"b\""));
  CHECK_FALSE(matcher_accepts(empty_first_choice(), ""));
  CHECK_FALSE(matcher_accepts(empty_first_choice(), "a"));
  CHECK(matcher_accepts(empty_first_choice(), "1"));
  CHECK(matcher_accepts(empty_first_choice(), "a11"));
}

TEST_CASE("a UTF-8 class matches exactly the encodings of its code points, never a surrogate or a broken sequence") {
  const std::vector<std::pair<char32_t, char32_t>> ranges{{0x41, 0x5A},      {0x7F, 0x801},        {0xD000, 0xE100},
                                                          {0xFFF0, 0x10010}, {0x10FFF0, 0x10FFFF}, {0, 0x10FFFF}};
  std::mt19937 rng(11);
  for (const auto& [lo, hi] : ranges) {
    grammar g;
    g.set_root(g.add_rule("root", {{g.code_points("c", {{lo, hi}}, false)}}));
    g.validate();
    grammar_matcher m(g);
    std::uniform_int_distribution<std::uint32_t> any(0, 0x10FFFF);
    for (int i = 0; i < 4000; ++i) {
      const char32_t c = i < 64 ? lo + static_cast<char32_t>(i) : any(rng);
      if (c > 0x10FFFF)
        continue;
      const bool surrogate = c >= 0xD800 && c <= 0xDFFF;
      const bool inside = c >= lo && c <= hi && !surrogate;
      const auto s = m.advance(m.start(), utf8(c));
      CHECK_MESSAGE((!s.dead() && m.accepts(s)) == inside, "U+" << std::hex << static_cast<std::uint32_t>(c));
    }
    // A lead byte with no continuation, or a continuation byte alone, is never a character.
    for (const std::string broken : {"\xC3", "\x80", "\xE2\x82", "\xF0\x9F\x98"}) {
      const auto s = m.advance(m.start(), broken);
      CHECK_FALSE((!s.dead() && m.accepts(s)));
    }
  }
  // Negation: everything but the listed code points.
  grammar g;
  g.set_root(g.add_rule("root", {{g.code_points("c", {{'a', 'z'}}, true)}}));
  g.validate();
  CHECK(matcher_accepts(g, "A"));
  CHECK(matcher_accepts(g, "\xE2\x82\xAC"));
  CHECK_FALSE(matcher_accepts(g, "q"));
}

TEST_CASE("nested repetitions keep states small: a repetition's copies go on at one position") {
  // (((("a" "b"?)+)+)...)+ nested 20 deep: every level may or may not end after each item, but
  // each level's future is the same whichever copy it is in, so the states stay a few stacks.
  std::string text = "root ::= " + std::string(20, '(') + "\"a\" \"b\"?";
  for (int k = 0; k < 20; ++k)
    text += ")+";
  const auto g = gbnf_grammar(text);
  const grammar_matcher m(g);
  auto s = m.start();
  for (const char c : std::string("abaabaaabaaaab")) {
    s = m.advance(s, static_cast<std::uint8_t>(c));
    REQUIRE_FALSE(s.dead());
    CHECK(s.stacks.size() <= 3);
  }
  CHECK(m.accepts(s));
  CHECK(m.advance(s, 'b').dead()); // "bb" never
}

TEST_CASE("a grammar too ambiguous to follow is refused on the byte where its state outgrows the bound") {
  // r0 ::= "a" r1 "x" | "a" r1 "y", ... r14 ::= "a" r14 "x" | "z": after n a's, each choice of
  // x or y for them (and of the next level's alternative) is a stack of its own, 2^(n+1). At
  // least 15 a's come first: the state after the 11th (4096 stacks) is followed, the 12th's
  // (8192 stacks of 13 entries) is refused.
  const auto g = gbnf_grammar(troupe::test::branching_gbnf(14));
  const grammar_matcher m(g);
  auto s = m.start();
  for (int k = 0; k < 11; ++k)
    s = m.advance(s, 'a');
  CHECK(s.stacks.size() == 4096);
  try {
    (void)m.advance(s, 'a');
    FAIL("the state after the 12th 'a' was followed");
  } catch (const invalid_argument_error& e) {
    CHECK(std::string(e.what()).find("too ambiguous") != std::string::npos);
    CHECK(e.param == "structured_output");
  }
  // Less deep, the same shape is followed to its end.
  CHECK(matcher_accepts(gbnf_grammar(troupe::test::branching_gbnf(3)), "aaaazxyxy"));
  CHECK_FALSE(matcher_accepts(gbnf_grammar(troupe::test::branching_gbnf(3)), "aaaazxyx"));
}

TEST_CASE("grammars the matcher cannot walk are refused, naming the rule") {
  grammar left;
  const int e = left.add_rule("expr");
  left.add_alternative(e, {element::ref(e), element::byte('+')});
  left.add_alternative(e, {element::byte('1')});
  left.set_root(e);
  CHECK_THROWS_WITH_AS(left.validate(), doctest::Contains("'expr' is left-recursive"), invalid_argument_error);

  // Left recursion through a nullable prefix is still left recursion.
  grammar hidden;
  const int a = hidden.add_rule("a"), b = hidden.add_rule("b");
  hidden.add_alternative(b, {});
  hidden.add_alternative(a, {element::ref(b), element::ref(a), element::byte('x')});
  hidden.add_alternative(a, {element::byte('y')});
  hidden.set_root(a);
  CHECK_THROWS_WITH_AS(hidden.validate(), doctest::Contains("left-recursive"), invalid_argument_error);

  grammar undefined;
  const int r = undefined.add_rule("root"), u = undefined.add_rule("missing");
  undefined.add_alternative(r, {element::ref(u)});
  undefined.set_root(r);
  CHECK_THROWS_WITH_AS(undefined.validate(), doctest::Contains("'missing' is referenced but never defined"),
                       invalid_argument_error);

  grammar endless;
  const int x = endless.add_rule("xs");
  endless.add_alternative(x, {element::byte('x'), element::ref(x)});
  endless.set_root(x);
  CHECK_THROWS_WITH_AS(endless.validate(), doctest::Contains("'xs' derives no finite string"), invalid_argument_error);

  grammar none;
  CHECK_THROWS_WITH_AS(none.validate(), doctest::Contains("no root"), invalid_argument_error);

  grammar huge;
  CHECK_THROWS_WITH_AS(huge.repeat("x", grammar::literal("x"), 0, max_repeat_bound + 1),
                       doctest::Contains("repetition bounds"), invalid_argument_error);
}

TEST_CASE("a token mask allows exactly the tokens that continue some sentence, stop ids only at its end") {
  const std::vector<std::string> choices{"yes", "no", "maybe", "nope", "no way"};
  grammar g;
  std::vector<sequence> alternatives;
  for (const auto& c : choices)
    alternatives.push_back(grammar::literal(c));
  g.set_root(g.add_rule("choice", alternatives));
  g.validate();
  // Tokens: single letters, pieces, a token spanning two words, special tokens without bytes.
  std::vector<std::optional<std::string>> tokens{std::nullopt, std::nullopt}; // 0: bos, 1: eos
  for (const std::string t : {"y",   "e",  "s",   "n",   "o",   "m",     "a",   "b", "p",    " ",    "w",
                              "yes", "no", "nop", "ope", "o w", "maybe", "may", "x", "yess", " way", "be"})
    tokens.emplace_back(t);
  auto vocab = vocab_of(tokens);
  auto compiled = std::make_shared<const compiled_constraint>(g, vocab);
  const std::vector<token_id> stops{1};

  // Brute force over the finite language: after text t, token x is allowed iff some choice
  // starts with t + x; the stop id iff t is a choice.
  std::mt19937 rng(3);
  std::uniform_int_distribution<token_id> pick(2, static_cast<token_id>(tokens.size() - 1));
  int checked = 0;
  for (int trial = 0; trial < 400; ++trial) {
    sequence_constraint seq(compiled);
    std::vector<token_id> output;
    std::string text;
    for (int len = 0; len < 6; ++len) {
      std::vector<token_id> banned;
      REQUIRE(seq.banned_after(output, stops, banned));
      std::vector<token_id> allowed;
      for (token_id id = 0; id < static_cast<token_id>(tokens.size()); ++id) {
        bool ok = false;
        if (id == 1)
          ok = std::find(choices.begin(), choices.end(), text) != choices.end();
        else if (tokens[static_cast<std::size_t>(id)])
          for (const auto& c : choices)
            ok |= c.starts_with(text + *tokens[static_cast<std::size_t>(id)]);
        CHECK_MESSAGE(std::binary_search(banned.begin(), banned.end(), id) == !ok,
                      "after \"" << text << "\" token " << id);
        if (ok && id != 1)
          allowed.push_back(id);
        ++checked;
      }
      if (allowed.empty())
        break;
      // Walk on by an allowed token, or now and then a refused one (the state goes dead and
      // banned_after says so).
      const token_id next = trial % 7 == 0 && len == 1 ? pick(rng) : allowed[rng() % allowed.size()];
      output.push_back(next);
      text += *tokens[static_cast<std::size_t>(next)];
      if (!std::any_of(choices.begin(), choices.end(), [&](const std::string& c) { return c.starts_with(text); })) {
        std::vector<token_id> banned_dead;
        CHECK_FALSE(seq.banned_after(output, stops, banned_dead));
        CHECK(banned_dead.empty());
        break;
      }
    }
  }
  CHECK(checked > 5000);
}

TEST_CASE("a sequence's constraint follows rollbacks: the mask after a rewritten output is the fresh one") {
  auto g = balanced();
  auto vocab = vocab_of({std::nullopt, "(", ")", "()", "((", "))", ")("});
  auto compiled = std::make_shared<const compiled_constraint>(g, vocab);
  const std::vector<token_id> stops{0};
  sequence_constraint walked(compiled);
  std::vector<token_id> banned, fresh_banned;
  // Speculation tried ( ( ( then rolled back to ( ): the states follow the output given.
  walked.banned_after(std::vector<token_id>{1, 1, 1}, stops, banned);
  walked.banned_after(std::vector<token_id>{1, 2}, stops, banned);
  sequence_constraint fresh(compiled);
  fresh.banned_after(std::vector<token_id>{1, 2}, stops, fresh_banned);
  CHECK(banned == fresh_banned);
  // After "()" the output is complete: the stop id is allowed, ")" is not.
  CHECK_FALSE(std::binary_search(banned.begin(), banned.end(), 0));
  CHECK(std::binary_search(banned.begin(), banned.end(), 2));
  // After "(" it is not.
  walked.banned_after(std::vector<token_id>{1}, stops, banned);
  CHECK(std::binary_search(banned.begin(), banned.end(), 0));
  CHECK_FALSE(std::binary_search(banned.begin(), banned.end(), 2));
}

TEST_CASE("token bytes: SentencePiece pieces keep their space, byte tokens are their byte, GPT-2 maps back to bytes") {
  const auto root = troupe::testing::find_data_root();
  const auto stories = tokenizer::load(root / "models/stories260k");
  const auto vocab = token_vocabulary::from_tokenizer(stories, static_cast<int>(stories.vocab_size()));
  // Every token's bytes, in order, are the decoded text (after the first, whose space decode strips).
  const auto ids = stories.encode("Once upon a time, there was a cat. It said: \"h\xC3\xA9!\"", false);
  std::string joined;
  for (const auto id : ids) {
    REQUIRE(vocab.bytes(id).has_value());
    joined += *vocab.bytes(id);
  }
  CHECK(joined == " " + stories.decode(ids));
  CHECK_FALSE(vocab.bytes(*stories.bos_id()).has_value());
  CHECK_FALSE(vocab.bytes(*stories.eos_id()).has_value());
  if (const auto byte_token = stories.token_to_id("<0x0A>"))
    CHECK(*vocab.bytes(*byte_token) == "\n");

  const auto gpt2 = tokenizer::load(root / "tests/data/gpt2");
  const auto gpt2_ids = gpt2.encode("Hello, w\xC3\xB6rld \xF0\x9F\x98\x80 {\"a\": 1}", false);
  std::string gpt2_joined;
  for (const auto id : gpt2_ids)
    gpt2_joined += *gpt2.token_bytes(id);
  CHECK(gpt2_joined == gpt2.decode(gpt2_ids));
}
