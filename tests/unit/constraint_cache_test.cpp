// The constraint cache: each kind of constraint compiles to the grammar its front end gives,
// a constraint is compiled once per text (hits counted at admission only, least recently used
// evicted), a bad one throws naming what is wrong, and one that no token sequence of the
// vocabulary can satisfy is refused.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <thread>
#include <vector>

#include "runtime/errors.hpp"
#include "runtime/structured/constraint_cache.hpp"
#include "tests/support/grammar_recognizer.hpp"

using namespace troupe;
using namespace troupe::runtime::structured;
using kind = output_constraint::kind;

namespace {

std::shared_ptr<const token_vocabulary> letters_and_digits() {
  std::vector<std::optional<std::string>> tokens{std::nullopt}; // 0: a stop token
  for (char c = 'a'; c <= 'z'; ++c)
    tokens.emplace_back(std::string(1, c));
  for (char c = '0'; c <= '9'; ++c)
    tokens.emplace_back(std::string(1, c));
  for (const std::string t : {"{", "}", "\"", ":", ",", " ", "[", "]", "true", "false", "null", "-", "."})
    tokens.emplace_back(t);
  return std::make_shared<const token_vocabulary>(std::move(tokens));
}

bool accepts(const output_constraint& c, const std::string& text) {
  const auto g = compile_grammar(c);
  return troupe::test::grammar_recognizer(g).matches(text);
}

} // namespace

TEST_CASE("each constraint kind compiles to its language") {
  CHECK(accepts({kind::choice, {}, {"yes", "no"}}, "no"));
  CHECK_FALSE(accepts({kind::choice, {}, {"yes", "no"}}, "n"));
  CHECK(accepts({kind::regex, "a[0-9]{2}", {}}, "a42"));
  CHECK_FALSE(accepts({kind::regex, "a[0-9]{2}", {}}, "a4"));
  CHECK(accepts({kind::grammar, "root ::= \"x\"+", {}}, "xxx"));
  CHECK(accepts({kind::json_object, {}, {}}, R"({"a":[1,true,null]})"));
  CHECK_FALSE(accepts({kind::json_object, {}, {}}, "[1]"));
  CHECK(accepts({kind::json_schema, R"({"type":"integer"})", {}}, "-17"));
  CHECK_FALSE(accepts({kind::json_schema, R"({"type":"integer"})", {}}, "1.5"));
}

TEST_CASE("a constraint compiles once per text, hits count at admission, the least recently used goes first") {
  constraint_cache cache(letters_and_digits(), /*capacity=*/2);
  const output_constraint a{kind::regex, "[a-c]+", {}}, b{kind::choice, {}, {"x", "y"}}, c{kind::regex, "[0-9]", {}};
  const auto first = cache.get(a);
  CHECK(cache.get(a) == first);
  CHECK(cache.get(a, /*admission=*/false) == first);
  auto s = cache.stats();
  CHECK(s.requests == 2);
  CHECK(s.compiled == 1);
  CHECK(s.hits == 1);
  CHECK(s.compile_ms >= 0.0);
  cache.get(b);
  cache.get(a); // a is now the most recently used: c evicts b
  cache.get(c);
  CHECK(cache.get(a) == first);
  CHECK(cache.stats().compiled == 3);
  cache.get(b); // compiled again
  CHECK(cache.stats().compiled == 4);
  // Choices that differ only in how they split are different constraints.
  const auto ab = cache.get({kind::choice, {}, {"ab", "c"}});
  const auto a_bc = cache.get({kind::choice, {}, {"a", "bc"}});
  CHECK(ab != a_bc);
}

TEST_CASE("bad constraints throw naming the problem, and one the vocabulary cannot write is refused") {
  constraint_cache cache(letters_and_digits());
  const std::vector<std::pair<output_constraint, std::string>> bad{
      {{kind::json_schema, "{\"type\":", {}}, "not valid JSON"},
      {{kind::json_schema, R"({"type":"object","minProperties":1})", {}}, "minProperties"},
      {{kind::regex, "(?=a)b", {}}, "lookaround"},
      {{kind::grammar, "root ::= undefined-rule", {}}, "undefined-rule"},
      // The vocabulary has no uppercase letter and no byte token: nothing can start this output.
      {{kind::regex, "[A-Z]+", {}}, "admits no output"},
      {{kind::choice, {}, {"Yes", "No"}}, "admits no output"},
  };
  for (const auto& [c, what] : bad) {
    INFO(what);
    CHECK_THROWS_WITH_AS(cache.get(c), doctest::Contains(what.c_str()), invalid_argument_error);
  }
  CHECK(cache.stats().compiled == 0);
  // The empty string as a whole sentence is fine: the stop id is allowed at once.
  CHECK_NOTHROW(cache.get({kind::regex, "(ab)?", {}}));
}

TEST_CASE("requests that bring the same constraint at once share one compile, or one error") {
  constraint_cache cache(letters_and_digits());
  // A schema whose compile takes a while, so that the threads overlap.
  std::string schema = R"({"type":"object","properties":{)";
  for (int i = 0; i < 40; ++i)
    schema += (i ? "," : "") + ("\"p" + std::to_string(i) + R"(":{"type":"integer","minimum":-999,"maximum":999})");
  schema += "}}";
  const output_constraint good{kind::json_schema, schema, {}}, bad{kind::json_schema, R"({"not": {}})", {}};
  constexpr int threads = 8;
  std::vector<std::shared_ptr<const compiled_constraint>> got(threads);
  std::vector<int> refused(threads, 0);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      got[static_cast<std::size_t>(t)] = cache.get(good);
      try {
        cache.get(bad);
      } catch (const invalid_argument_error&) {
        refused[static_cast<std::size_t>(t)] = 1;
      }
    });
  for (auto& th : pool)
    th.join();
  for (const auto& g : got)
    CHECK(g == got[0]);
  CHECK(std::count(refused.begin(), refused.end(), 1) == threads);
  const auto s = cache.stats();
  CHECK(s.compiled == 1);
  CHECK(s.hits == threads - 1);
  CHECK(s.requests == 2 * threads);
}
