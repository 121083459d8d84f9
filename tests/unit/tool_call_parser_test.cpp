// Tests for runtime/tools/tool_call_parser: each syntax's calls come out of the text, whole
// or streamed in pieces of any size (the same split every time); text that only looks like
// a call goes back to the client unchanged; whitespace that only separated calls is dropped.
#include "runtime/tools/tool_call_parser.hpp"

#include <doctest/doctest.h>

#include <string>
#include <vector>

using namespace troupe;
using troupe::runtime::tools::parsed_output;
using troupe::runtime::tools::tool_call_parser;
using troupe::runtime::tools::tool_syntax;

namespace {

// The output fed in pieces of `step` bytes (0: whole), then flushed; also checks that no
// text was released before it was known not to be a call.
parsed_output parse(tool_syntax s, const std::string& text, std::size_t step = 0) {
  tool_call_parser p(s);
  parsed_output all;
  auto take = [&](parsed_output part) {
    all.text += part.text;
    for (auto& c : part.calls)
      all.calls.push_back(std::move(c));
  };
  if (step == 0) {
    take(p.push(text));
  } else {
    for (std::size_t i = 0; i < text.size(); i += step)
      take(p.push(std::string_view(text).substr(i, step)));
  }
  take(p.flush());
  CHECK(p.calls_made() == static_cast<int>(all.calls.size()));
  return all;
}

// Every piece size gives the same split as the whole text.
parsed_output parse_every_way(tool_syntax s, const std::string& text) {
  const auto whole = parse(s, text);
  for (std::size_t step = 1; step <= text.size(); ++step) {
    INFO("pieces of " << step << " bytes");
    const auto streamed = parse(s, text, step);
    CHECK(streamed.text == whole.text);
    CHECK(streamed.calls == whole.calls);
  }
  return whole;
}

tool_call call(std::string name, std::string arguments) {
  return {{}, std::move(name), std::move(arguments)};
}

} // namespace

TEST_CASE("hermes: text, then <tool_call> blocks, each a call") {
  const auto out = parse_every_way(
      tool_syntax::hermes,
      "Let me look.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n"
      "<tool_call>\n{\"name\":\"get_time\",\"arguments\":\"{\\\"tz\\\":\\\"CET\\\"}\"}\n</tool_call>\n");
  CHECK(out.text == "Let me look.");
  REQUIRE(out.calls.size() == 2);
  CHECK(out.calls[0] == call("get_weather", R"({"city": "Paris"})")); // as the model wrote them
  CHECK(out.calls[1] == call("get_time", R"({"tz":"CET"})")); // arguments given as a string of JSON
}

TEST_CASE("text that ends like the start of a marker right before the marker is kept") {
  auto out = parse_every_way(tool_syntax::hermes, "a <<tool_call>{\"name\": \"f\"}</tool_call>");
  CHECK(out.text == "a <");
  CHECK(out.calls == std::vector<tool_call>{call("f", "{}")});
  out = parse_every_way(tool_syntax::mistral, "see [[TOOL_CALLS] [{\"name\": \"f\"}]");
  CHECK(out.text == "see [");
  CHECK(out.calls == std::vector<tool_call>{call("f", "{}")});
}

TEST_CASE("hermes: a block that is not a call stays text, as written") {
  const std::string bad = "A <tool_call>not json</tool_call> and <tool_call>{\"arguments\": {}}</tool_call> end";
  const auto out = parse_every_way(tool_syntax::hermes, bad);
  CHECK(out.text == bad);
  CHECK(out.calls.empty());
  // Something that only starts like the tag is text too, and so is trailing whitespace without calls.
  CHECK(parse_every_way(tool_syntax::hermes, "x <tool_ca y <tool <\n").text == "x <tool_ca y <tool <\n");
  CHECK(parse_every_way(tool_syntax::hermes, "  hello  \n world \n").text == "  hello  \n world \n");
}

TEST_CASE("hermes: a block the output ends inside is a call when its JSON is whole, else text") {
  auto out = parse_every_way(tool_syntax::hermes, "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n");
  CHECK(out.text.empty());
  CHECK(out.calls == std::vector<tool_call>{call("f", "{}")});
  out = parse_every_way(tool_syntax::hermes, "<tool_call>\n{\"name\": \"f\", \"argu");
  CHECK(out.text == "<tool_call>\n{\"name\": \"f\", \"argu");
  CHECK(out.calls.empty());
}

TEST_CASE("hermes: arguments missing are {} and arguments that are not an object refuse the call") {
  CHECK(parse(tool_syntax::hermes, "<tool_call>{\"name\": \"f\"}</tool_call>").calls ==
        std::vector<tool_call>{call("f", "{}")});
  const std::string array_args = "<tool_call>{\"name\": \"f\", \"arguments\": [1]}</tool_call>";
  CHECK(parse(tool_syntax::hermes, array_args).text == array_args);
  const std::string two = "<tool_call>{\"name\": \"f\"} {\"name\": \"g\"}</tool_call>";
  CHECK(parse(tool_syntax::hermes, two).text == two); // one call per block
}

TEST_CASE("llama3: a reply that is a JSON call (after <|python_tag|> or not) is calls, anything else text") {
  auto out = parse_every_way(tool_syntax::llama3, " {\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo\"}}");
  CHECK(out.text.empty());
  CHECK(out.calls == std::vector<tool_call>{call("get_weather", R"({"city": "Oslo"})")});
  out = parse_every_way(tool_syntax::llama3, "<|python_tag|>{\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\"}");
  CHECK(out.calls == std::vector<tool_call>{call("a", "{}"), call("b", "{}")});
  out = parse_every_way(tool_syntax::llama3, "{not a call} at all");
  CHECK(out.text == "{not a call} at all");
  CHECK(out.calls.empty());
  // Text streams as it comes: nothing is held once the first byte is not '{'.
  tool_call_parser p(tool_syntax::llama3);
  CHECK(p.push("Hello").text == "Hello");
  CHECK(p.push(" {\"name\": \"f\"}").text == " {\"name\": \"f\"}");
  CHECK(p.flush().calls.empty());
}

TEST_CASE("arguments keep the model's text: a number too large for a double is passed on unchanged") {
  const auto out = parse_every_way(tool_syntax::hermes,
                                   "<tool_call>{\"arguments\" : { \"x\": -0.56e+355, \"s\": \"a\\\"}\" } , \"name\": \"f\"}</tool_call>");
  CHECK(out.calls == std::vector<tool_call>{call("f", R"({ "x": -0.56e+355, "s": "a\"}" })")});
}

TEST_CASE("mistral: [TOOL_CALLS] then a list of calls, the marker shown or dropped by decoding") {
  auto out = parse_every_way(tool_syntax::mistral,
                             "Sure. [TOOL_CALLS] [{\"name\": \"f\", \"arguments\": {\"a\": 1}}, {\"name\": \"g\", "
                             "\"arguments\": {}}]");
  CHECK(out.text == "Sure.");
  CHECK(out.calls == std::vector<tool_call>{call("f", R"({"a": 1})"), call("g", "{}")});
  out = parse_every_way(tool_syntax::mistral, " [{\"name\": \"f\", \"arguments\": {}}]");
  CHECK(out.calls == std::vector<tool_call>{call("f", "{}")});
  CHECK(out.text.empty());
  out = parse_every_way(tool_syntax::mistral, "[1] is a footnote.");
  CHECK(out.text == "[1] is a footnote.");
  CHECK(out.calls.empty());
}
