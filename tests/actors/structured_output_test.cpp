// Structured output through the engine's actors: every constrained output (choice, regex, JSON
// schema, GBNF) is a sentence of its constraint, greedy and sampled, with speculation as without
// (greedy tokens identical, so rejected drafts roll the parse state back); a bad constraint is
// the request's error and the engine keeps serving; the metrics count what was compiled.
#include <doctest/doctest.h>

#include <boost/json.hpp>

#include <algorithm>
#include <regex>

#include "tests/support/ambiguous_grammar.hpp"
#include "tests/support/engine_harness.hpp"

using namespace troupe;
using namespace troupe::testing;

namespace {

request_spec constrained(std::string prompt, output_constraint c, float temperature, std::uint64_t seed,
                         int max_tokens = 48) {
  auto spec = greedy_spec(std::move(prompt), max_tokens, /*ignore_eos=*/false);
  spec.params.temperature = temperature;
  spec.params.seed = seed;
  spec.params.constraint = std::move(c);
  return spec;
}

output_constraint choice_of(std::vector<std::string> choices) {
  return {output_constraint::kind::choice, {}, std::move(choices)};
}
output_constraint regex_of(std::string pattern) {
  return {output_constraint::kind::regex, std::move(pattern), {}};
}
output_constraint schema_of(std::string schema) {
  return {output_constraint::kind::json_schema, std::move(schema), {}};
}

const std::vector<std::string> animals{"cat", "dog", "a big bird", "fish", "the little dog"};
// Bounded, so every sample completes within max_tokens even one byte per token.
const std::string name_regex = "[A-Z][a-z]{1,7} (is|was) [0-9]{1,3}( years old)?\\.";
const std::string person_schema = R"({"type": "object",
  "properties": {"name": {"type": "string", "maxLength": 10},
                 "age": {"type": "integer", "minimum": 0, "maximum": 120},
                 "happy": {"type": "boolean"},
                 "pets": {"type": "array", "items": {"enum": ["cat", "dog"]}, "maxItems": 2}},
  "required": ["name", "age", "happy", "pets"], "additionalProperties": false})";

// The person schema, checked by hand: the object it promises, nothing else.
bool is_person(const std::string& text, std::string& why) {
  boost::system::error_code ec;
  auto v = boost::json::parse(text, ec);
  if (ec || !v.is_object()) {
    why = "not a JSON object";
    return false;
  }
  const auto& o = v.get_object();
  if (o.size() != 4) {
    why = "not exactly 4 properties";
    return false;
  }
  const auto* name = o.if_contains("name");
  const auto* age = o.if_contains("age");
  const auto* happy = o.if_contains("happy");
  const auto* pets = o.if_contains("pets");
  if (!name || !name->is_string() || !age || !(age->is_int64() || age->is_uint64()) || !happy || !happy->is_bool() ||
      !pets || !pets->is_array()) {
    why = "a property is missing or of the wrong type";
    return false;
  }
  const auto n = age->is_int64() ? age->get_int64() : static_cast<std::int64_t>(age->get_uint64());
  if (n < 0 || n > 120 || pets->get_array().size() > 2) {
    why = "age or pets out of bounds";
    return false;
  }
  for (const auto& p : pets->get_array())
    if (!p.is_string() || (p.get_string() != "cat" && p.get_string() != "dog")) {
      why = "a pet outside the enum";
      return false;
    }
  return true;
}

} // namespace

TEST_CASE("constrained outputs are sentences of their constraints, greedy and sampled") {
  engine_fixture f(stories_engine_config());
  std::vector<request_spec> specs;
  for (std::uint64_t seed = 1; seed <= 6; ++seed) {
    const float t = seed == 1 ? 0.0f : 1.0f;
    specs.push_back(constrained("Once upon a time, there was a", choice_of(animals), t, seed));
    specs.push_back(constrained("Lily was a girl.", regex_of(name_regex), t, seed));
    specs.push_back(constrained("Tom said:", schema_of(person_schema), t, seed, 160));
  }
  const auto out = f.run(specs);
  const std::regex name_re(name_regex);
  int schema_complete = 0;
  for (std::size_t i = 0; i < out.size(); ++i) {
    INFO("request " << i << ": \"" << out[i].text << "\"");
    REQUIRE(out[i].finished);
    const auto& c = specs[i].params.constraint;
    if (c.type == output_constraint::kind::choice) {
      CHECK(out[i].final.reason == "stop");
      CHECK(std::find(animals.begin(), animals.end(), out[i].text) != animals.end());
    } else if (c.type == output_constraint::kind::regex) {
      CHECK(out[i].final.reason == "stop");
      CHECK(std::regex_match(out[i].text, name_re));
    } else if (out[i].final.reason == "stop") {
      std::string why;
      CHECK_MESSAGE(is_person(out[i].text, why), why);
      ++schema_complete;
    }
  }
  // Strings are bounded; the JSON completes unless a sample spends its tokens on spaces.
  CHECK(schema_complete >= 4);
  const auto s = f.settled_stats();
  CHECK(s.constrained_requests == specs.size());
  CHECK(s.constraint_compiles == 3);
  CHECK(s.constraint_cache_hits == specs.size() - 3);
  CHECK_FALSE(s.constraint_mask_us.empty());
}

TEST_CASE("a GBNF grammar and json_object constrain the output too") {
  engine_fixture f(stories_engine_config());
  const std::string gbnf =
      "root ::= greeting \" \" name \"!\"\n"
      "greeting ::= \"Hi\" | \"Hello\"  # two ways\n"
      "name ::= [A-Z] [a-z]{1,6}\n";
  auto out = f.run({constrained("Once upon a time", {output_constraint::kind::grammar, gbnf, {}}, 1.0f, 5),
                    constrained("Once upon a time", {output_constraint::kind::json_object, {}, {}}, 0.0f, 1, 200)});
  REQUIRE(out[0].finished);
  CHECK(out[0].final.reason == "stop");
  CHECK(std::regex_match(out[0].text, std::regex("(Hi|Hello) [A-Z][a-z]{1,6}!")));
  REQUIRE(out[1].finished);
  // Greedy json_object either completes into an object or runs out of tokens inside one.
  if (out[1].final.reason == "stop") {
    boost::system::error_code ec;
    auto v = boost::json::parse(out[1].text, ec);
    CHECK_FALSE(ec);
    CHECK(v.is_object());
  } else {
    CHECK(out[1].text.find('{') != std::string::npos);
  }
}

TEST_CASE("speculation keeps constrained greedy output exact: rejected drafts roll the parse state back") {
  auto plain_cfg = stories_engine_config();
  std::vector<request_spec> specs{constrained("Once upon a time, there was a", choice_of(animals), 0.0f, 1),
                                  constrained("Lily was a girl.", regex_of(name_regex), 0.0f, 1),
                                  constrained("Tom said:", schema_of(person_schema), 0.0f, 1, 160)};
  std::vector<std::string> reference;
  {
    engine_fixture plain(plain_cfg);
    for (const auto& o : plain.run(specs))
      reference.push_back(o.text);
  }
  for (const std::string method : {"ngram", "draft"}) {
    auto cfg = stories_engine_config();
    cfg.speculative_method = method;
    cfg.num_speculative_tokens = 3;
    cfg.draft_model = stories_dir().string();
    engine_fixture spec(cfg);
    const auto out = spec.run(specs);
    for (std::size_t i = 0; i < out.size(); ++i) {
      INFO(method << " request " << i);
      REQUIRE(out[i].finished);
      CHECK(out[i].text == reference[i]);
    }
    // Sampled requests with a draft's probabilities: rejection sampling over masked rows still
    // gives sentences of the constraint.
    std::vector<request_spec> sampled;
    for (std::uint64_t seed = 1; seed <= 4; ++seed)
      sampled.push_back(constrained("Lily was a girl.", regex_of(name_regex), 1.0f, seed));
    for (const auto& o : spec.run(sampled)) {
      REQUIRE(o.finished);
      CHECK(std::regex_match(o.text, std::regex(name_regex)));
    }
  }
}

TEST_CASE("a bad constraint is the request's error and the engine keeps serving") {
  engine_fixture f(stories_engine_config());
  const std::vector<std::pair<output_constraint, std::string>> bad{
      {regex_of("(ab"), "regex"},
      {regex_of("a\\1"), "regex"},
      {schema_of("{\"type\": \"object\""), "not valid JSON"},
      {schema_of(R"({"type": "string", "multipleOf": 3})"), "multipleOf"},
      {{output_constraint::kind::grammar, "root ::= root \"a\"", {}}, "left-recursive"},
      {{output_constraint::kind::grammar, "start ::= \"a\"", {}}, "root"},
      {choice_of({}), "guided_choice"},
      // Every derivation goes on for ever: no finite output satisfies it.
      {{output_constraint::kind::grammar, "root ::= \"x\" root", {}}, "no finite"},
  };
  std::vector<request_spec> specs;
  for (const auto& [c, _] : bad)
    specs.push_back(constrained("Once", c, 0.0f, 1));
  auto ignoring = constrained("Once", choice_of(animals), 0.0f, 1);
  ignoring.params.ignore_eos = true;
  specs.push_back(ignoring);
  specs.push_back(constrained("Once upon a time, there was a", choice_of(animals), 0.0f, 1));
  const auto out = f.run(specs);
  for (std::size_t i = 0; i < bad.size(); ++i) {
    INFO("bad constraint " << i);
    REQUIRE(out[i].failed);
    CHECK(out[i].error.code == "invalid_request");
    CHECK(out[i].error.message.find(bad[i].second) != std::string::npos);
  }
  REQUIRE(out[bad.size()].failed);
  CHECK(out[bad.size()].error.message.find("ignore_eos") != std::string::npos);
  REQUIRE(out.back().finished);
  CHECK(std::find(animals.begin(), animals.end(), out.back().text) != animals.end());
}

TEST_CASE("a constraint too ambiguous to follow fails its request alone, mid-step, and the batch goes on") {
  engine_fixture f(stories_engine_config());
  // It compiles (its start state is small) and its output starts with at least 15 a's, but the
  // matcher refuses the state after the 12th: the mask made in the executor for a row in the
  // middle of the output is where it fails.
  const std::vector<request_spec> specs{
      constrained("Once upon a time, there was a", choice_of(animals), 0.0f, 1),
      constrained("Once", {output_constraint::kind::grammar, test::branching_gbnf(14), {}}, 0.0f, 1),
      greedy_spec("Lily and Ben", 12, /*ignore_eos=*/true),
  };
  const auto out = f.run(specs);
  REQUIRE(out[1].failed);
  CHECK(out[1].error.code == "invalid_request");
  CHECK(out[1].error.message.find("too ambiguous") != std::string::npos);
  // Mid-output: the a's before the refused state were streamed.
  CHECK(out[1].text.size() >= 4);
  CHECK(out[1].text.find_first_not_of('a') == std::string::npos);
  REQUIRE(out[0].finished);
  CHECK(std::find(animals.begin(), animals.end(), out[0].text) != animals.end());
  REQUIRE(out[2].finished);
  CHECK(out[2].token_ids.size() == 12);
  // The engine keeps serving: the same plain request again gives the same text.
  const auto again = f.run({specs[2]});
  REQUIRE(again[0].finished);
  CHECK(again[0].text == out[2].text);
}

TEST_CASE("every choice of n and best_of is constrained on its own") {
  engine_fixture f(stories_engine_config());
  auto spec = constrained("Lily was a girl.", regex_of(name_regex), 1.0f, 3);
  spec.params.n = 3;
  auto best = constrained("Once upon a time, there was a", choice_of(animals), 1.0f, 4);
  best.params.n = 2;
  best.params.best_of = 4;
  const auto out = f.run({spec, best});
  REQUIRE(out[0].finished);
  REQUIRE(out[0].choices.size() == 3);
  for (const auto& [index, c] : out[0].choices) {
    INFO("choice " << index << ": \"" << c.text << "\"");
    CHECK(c.finish_reason == "stop");
    CHECK(std::regex_match(c.text, std::regex(name_regex)));
  }
  REQUIRE(out[1].finished);
  REQUIRE(out[1].choices.size() == 2);
  for (const auto& [index, c] : out[1].choices)
    CHECK(std::find(animals.begin(), animals.end(), c.text) != animals.end());
}
