// Tests for runtime/structured/tool_call_grammar and runtime/tools/tool_request: the
// grammar derives exactly the calls tool_prompt writes, and every string it derives from
// 500 random argument schemas parses (tool_call_parser) into calls of the offered tools
// whose arguments validate against their schema (an independent validator); the request
// checks refuse what cannot be served.
#include "runtime/structured/tool_call_grammar.hpp"

#include <doctest/doctest.h>

#include <boost/json.hpp>

#include <map>
#include <random>

#include "runtime/errors.hpp"
#include "runtime/tools/tool_call_parser.hpp"
#include "runtime/tools/tool_prompt.hpp"
#include "runtime/tools/tool_request.hpp"
#include "tests/support/grammar_recognizer.hpp"
#include "tests/support/grammar_sampler.hpp"
#include "tests/support/json_schema_validator.hpp"
#include "tests/support/random_schema.hpp"

using namespace troupe;
using troupe::runtime::chat_format;
using troupe::runtime::structured::grammar;
using troupe::runtime::structured::tool_call_grammar;
using troupe::runtime::structured::tool_call_grammar_from_text;
using troupe::runtime::tools::plan_tools;
using troupe::runtime::tools::tool_syntax;

namespace {

const std::vector<tool_function> two_tools{
    {"get_weather", "", R"({"type":"object","properties":{"city":{"type":"string","maxLength":8}},"required":["city"],"additionalProperties":false})"},
    {"no_args", "", R"({"type":"object","properties":{}})"}};

std::string hermes_block(const std::string& call) {
  return "<tool_call>\n" + call + "\n</tool_call>";
}

} // namespace

TEST_CASE("the grammar derives the calls tool_prompt writes, for the offered tools only") {
  const tool_call paris{"", "get_weather", R"({"city":"Paris"})"};
  const tool_call none{"", "no_args", "{}"};
  const tool_call other{"", "delete_all", "{}"};
  using runtime::tools::call_json;
  {
    const auto g = tool_call_grammar(tool_syntax::hermes, two_tools, /*parallel=*/true);
    test::grammar_recognizer r(g);
    const auto a = hermes_block(call_json(tool_syntax::hermes, paris));
    const auto b = hermes_block(call_json(tool_syntax::hermes, none));
    CHECK(r.matches(a));
    CHECK(r.matches(a + "\n" + b + "\n" + a));
    CHECK_FALSE(r.matches(""));
    CHECK_FALSE(r.matches(a + "\n"));
    CHECK_FALSE(r.matches(hermes_block(call_json(tool_syntax::hermes, other))));
    CHECK_FALSE(r.matches(hermes_block(R"({"name": "get_weather", "arguments": {"city":"Paris","x":1}})")));
    CHECK_FALSE(r.matches(hermes_block(R"({"name": "get_weather", "arguments": {}})"))); // city is required
    const auto single = tool_call_grammar(tool_syntax::hermes, two_tools, /*parallel=*/false);
    test::grammar_recognizer one(single);
    CHECK(one.matches(a));
    CHECK_FALSE(one.matches(a + "\n" + b));
  }
  {
    const auto g = tool_call_grammar(tool_syntax::llama3, two_tools, true);
    test::grammar_recognizer r(g);
    CHECK(r.matches(call_json(tool_syntax::llama3, paris)));
    CHECK_FALSE(r.matches(call_json(tool_syntax::hermes, paris))); // "arguments" is not Llama's key
  }
  {
    const auto g = tool_call_grammar(tool_syntax::mistral, two_tools, true);
    test::grammar_recognizer r(g);
    const auto a = call_json(tool_syntax::mistral, paris);
    const auto b = call_json(tool_syntax::mistral, none);
    CHECK(r.matches("[" + a + "]"));
    CHECK(r.matches("[" + a + ", " + b + "]"));
    CHECK_FALSE(r.matches("[]"));
    const auto single = tool_call_grammar(tool_syntax::mistral, two_tools, false);
    test::grammar_recognizer one(single);
    CHECK_FALSE(one.matches("[" + a + ", " + b + "]"));
  }
}

TEST_CASE("500 random argument schemas: every derived reply parses into valid calls of the offered tools") {
  test::random_schema schemas(424242);
  std::mt19937_64 rng(99);
  int calls_checked = 0;
  for (int i = 0; i < 500; ++i) {
    // Two tools with random parameters, in each syntax in turn.
    std::vector<tool_function> tools{{"first_tool", "", boost::json::serialize(schemas.next())},
                                     {"second-tool", "", boost::json::serialize(schemas.next())}};
    std::map<std::string, boost::json::value> schema_of;
    for (const auto& t : tools)
      schema_of[t.name] = boost::json::parse(t.parameters);
    const auto syntax = static_cast<tool_syntax>(i % 3);
    const bool parallel = i % 2 == 0;
    INFO("syntax " << to_string(syntax) << ", parallel " << parallel);
    INFO(tools[0].parameters);
    INFO(tools[1].parameters);
    grammar g;
    REQUIRE_NOTHROW(g = tool_call_grammar(syntax, tools, parallel));
    test::grammar_sampler sampler(g, 160);
    for (int k = 0; k < 4; ++k) {
      const std::string reply = sampler.sample(rng);
      INFO(reply);
      runtime::tools::tool_call_parser parser(syntax);
      auto out = parser.push(reply);
      auto tail = parser.flush();
      out.text += tail.text;
      out.calls.insert(out.calls.end(), tail.calls.begin(), tail.calls.end());
      CHECK(out.text.empty());
      REQUIRE_FALSE(out.calls.empty());
      if (!parallel || syntax == tool_syntax::llama3)
        CHECK(out.calls.size() == 1);
      for (const auto& c : out.calls) {
        REQUIRE(schema_of.count(c.name) == 1);
        std::string why;
        CHECK_MESSAGE(test::validates(schema_of[c.name], boost::json::parse(c.arguments), &why), why);
        ++calls_checked;
      }
    }
  }
  CHECK(calls_checked >= 2000);
}

TEST_CASE("the constraint text round-trips, and a tool whose schema does not compile is named") {
  const auto text = runtime::structured::tool_call_constraint_text(tool_syntax::hermes, two_tools, false);
  const auto g = tool_call_grammar_from_text(text);
  test::grammar_recognizer r(g);
  CHECK(r.matches(hermes_block(R"({"name": "no_args", "arguments": {}})")));
  const std::vector<tool_function> bad{{"fancy", "", R"({"type":"object","patternProperties":{}})"}};
  try {
    tool_call_grammar(tool_syntax::hermes, bad, true);
    FAIL("a schema with patternProperties compiled");
  } catch (const invalid_argument_error& e) {
    CHECK(e.param == "tools");
    CHECK(std::string(e.what()).starts_with("tool \"fancy\": "));
    CHECK(std::string(e.what()).find("patternProperties") != std::string::npos);
  }
  CHECK_THROWS_AS(tool_call_grammar(tool_syntax::hermes, {}, true), invalid_argument_error);
  CHECK_THROWS_AS(tool_call_grammar_from_text("{\"syntax\":\"hermes\"}"), invalid_argument_error);
}

TEST_CASE("plan_tools: what is rendered, constrained and parsed for each tool_choice") {
  using mode = tool_choice::mode;
  const output_constraint none_other;
  auto p = plan_tools(chat_format::chatml, true, two_tools, {mode::automatic, {}}, true, none_other);
  CHECK(p.prompt_tools == two_tools);
  CHECK(p.parse_calls);
  CHECK(p.constraint.empty());
  p = plan_tools(chat_format::chatml, true, two_tools, {mode::none, {}}, true, none_other);
  CHECK(p.prompt_tools.empty());
  CHECK_FALSE(p.parse_calls);
  p = plan_tools(chat_format::llama3, true, two_tools, {mode::required, {}}, true, none_other);
  CHECK(p.constraint.type == output_constraint::kind::tool_calls);
  CHECK(p.constraint.text.find("\"syntax\":\"llama3\"") != std::string::npos);
  CHECK(p.constraint.text.find("\"parallel\":true") != std::string::npos);
  p = plan_tools(chat_format::chatml, true, two_tools, {mode::function, "no_args"}, true, none_other);
  CHECK(p.constraint.text.find("get_weather") == std::string::npos); // only the named one
  CHECK(p.constraint.text.find("\"parallel\":false") != std::string::npos);
  p = plan_tools(chat_format::plain, true, {}, {mode::automatic, {}}, true, none_other);
  CHECK_FALSE(p.parse_calls);
}

TEST_CASE("plan_tools refuses what cannot be served, naming the field") {
  using mode = tool_choice::mode;
  const output_constraint none_other;
  auto refuses = [](auto&& call, const std::string& param, const std::string& words) {
    try {
      call();
      FAIL("not refused: " << words);
    } catch (const invalid_argument_error& e) {
      CHECK(e.param == param);
      CHECK_MESSAGE(std::string(e.what()).find(words) != std::string::npos, e.what());
    }
  };
  refuses([&] { plan_tools(chat_format::chatml, true, {}, {mode::required, {}}, true, none_other); }, "tool_choice",
          "needs tools");
  refuses([&] { plan_tools(chat_format::chatml, true, two_tools, {mode::function, "nope"}, true, none_other); },
          "tool_choice", "not among the tools");
  refuses([&] { plan_tools(chat_format::chatml, false, two_tools, {mode::automatic, {}}, true, none_other); }, "tools",
          "only taken with a chat");
  refuses([&] {
    plan_tools(chat_format::chatml, true, std::vector<tool_function>{two_tools[0], two_tools[0]}, {mode::automatic, {}},
               true, none_other);
  }, "tools", "used twice");
  refuses([&] {
    plan_tools(chat_format::chatml, true, std::vector<tool_function>{{"bad name", "", "{}"}}, {mode::automatic, {}}, true,
               none_other);
  },
          "tools", "must be 1 to 64");
  refuses([&] {
    plan_tools(chat_format::chatml, true, two_tools, {mode::required, {}}, true,
               output_constraint{output_constraint::kind::json_object, {}, {}});
  }, "tool_choice", "cannot be combined with a json_object constraint");
  refuses([&] {
    plan_tools(chat_format::chatml, true, std::vector<tool_function>(max_tools + 1, two_tools[1]),
               {mode::automatic, {}}, true, none_other);
  }, "tools", "at most 128 tools");
}
