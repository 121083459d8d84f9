// The structured-output fields on every API: OpenAI's response_format and vLLM's guided_* /
// structured_outputs land in one output_constraint on completions, chat and the WebSocket
// generate frame; wrong types, unknown formats and two constraints at once are a 400 naming
// the field.
#include <doctest/doctest.h>

#include <boost/json.hpp>

#include <string>
#include <vector>

#include "net/openai_requests.hpp"
#include "net/ws_frames.hpp"

using namespace troupe;
using namespace troupe::net;
using kind = output_constraint::kind;

namespace {

std::string completion_with(const std::string& extra) {
  return R"({"model":"m","prompt":"hi",)" + extra + "}";
}
std::string chat_with(const std::string& extra) {
  return R"({"model":"m","messages":[{"role":"user","content":"hi"}],)" + extra + "}";
}

output_constraint completion_constraint(const std::string& extra) {
  auto r = parse_completion_request(completion_with(extra), {});
  if (auto* e = std::get_if<api_error>(&r))
    FAIL("unexpected error: " << e->message);
  return std::get<completion_request>(r).spec.params.constraint;
}

api_error completion_error(const std::string& extra) {
  auto r = parse_completion_request(completion_with(extra), {});
  REQUIRE_MESSAGE(std::holds_alternative<api_error>(r), "accepted: " << extra);
  return std::get<api_error>(r);
}

// The same JSON text, whatever its spacing or key order inside objects.
boost::json::value json_of(const std::string& text) {
  return boost::json::parse(text);
}

} // namespace

TEST_CASE("response_format: text is no constraint, json_object and json_schema are read with the schema") {
  CHECK(completion_constraint(R"("response_format":{"type":"text"})").empty());
  CHECK(completion_constraint(R"("response_format":null)").empty());
  CHECK(completion_constraint(R"("response_format":{"type":"json_object"})").type == kind::json_object);
  const auto c =
      completion_constraint(R"("response_format":{"type":"json_schema","json_schema":{"name":"person","strict":true,)"
                            R"("schema":{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]}}})");
  CHECK(c.type == kind::json_schema);
  CHECK(json_of(c.text) == json_of(R"({"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]})"));

  // The same on chat.
  auto r = parse_chat_request(chat_with(R"("response_format":{"type":"json_object"})"), {});
  REQUIRE(std::holds_alternative<chat_request>(r));
  CHECK(std::get<chat_request>(r).spec.params.constraint.type == kind::json_object);
}

TEST_CASE("vLLM's guided fields and structured_outputs are read into the same constraint") {
  auto c = completion_constraint(R"("guided_json":{"type":"string"})");
  CHECK(c.type == kind::json_schema);
  CHECK(json_of(c.text) == json_of(R"({"type":"string"})"));
  c = completion_constraint(R"("guided_json":"{\"type\": \"integer\"}")");
  CHECK(c.type == kind::json_schema);
  CHECK(json_of(c.text) == json_of(R"({"type":"integer"})"));
  c = completion_constraint(R"("guided_regex":"[a-z]+")");
  CHECK(c.type == kind::regex);
  CHECK(c.text == "[a-z]+");
  c = completion_constraint(R"("guided_choice":["yes","no"])");
  CHECK(c.type == kind::choice);
  CHECK(c.choices == std::vector<std::string>{"yes", "no"});
  c = completion_constraint(R"("guided_grammar":"root ::= \"a\"")");
  CHECK(c.type == kind::grammar);
  CHECK(c.text == "root ::= \"a\"");
  c = completion_constraint(R"("structured_outputs":{"regex":"x+"})");
  CHECK(c.type == kind::regex);
  CHECK(completion_constraint(R"("structured_outputs":{"choice":["a"]})").type == kind::choice);
  CHECK(completion_constraint(R"("structured_outputs":{"json_object":true})").type == kind::json_object);
  CHECK(completion_constraint(R"("structured_outputs":{"json":{"type":"null"}})").type == kind::json_schema);
  CHECK(completion_constraint(R"("structured_outputs":{"grammar":"root ::= \"b\""})").type == kind::grammar);
  CHECK(completion_constraint(R"("structured_outputs":{})").empty());
}

TEST_CASE("the WebSocket generate frame takes the same fields") {
  auto r = parse_ws_frame(R"({"type":"generate","id":1,"prompt":"hi","guided_choice":["a","b"]})", {});
  REQUIRE(std::holds_alternative<ws_generate>(r));
  CHECK(std::get<ws_generate>(r).spec.params.constraint.type == kind::choice);
  r = parse_ws_frame(R"({"type":"generate","id":2,"prompt":"hi","response_format":{"type":"bogus"}})", {});
  REQUIRE(std::holds_alternative<ws_rejected>(r));
  CHECK(std::get<ws_rejected>(r).error.param == "response_format");
}

TEST_CASE("bad structured-output fields are a 400 naming the field") {
  const std::vector<std::pair<std::string, std::string>> bad{
      {R"("response_format":"json")", "response_format"},
      {R"("response_format":{})", "response_format"},
      {R"("response_format":{"type":"yaml"})", "response_format"},
      {R"("response_format":{"type":"json_schema"})", "response_format"},
      {R"("response_format":{"type":"json_schema","json_schema":{"schema":[1]}})", "response_format"},
      {R"("guided_json":[1])", "guided_json"},
      {R"("guided_regex":5)", "guided_regex"},
      {R"("guided_choice":"yes")", "guided_choice"},
      {R"("guided_choice":[1])", "guided_choice"},
      {R"("guided_choice":[])", "guided_choice"},
      {R"("guided_choice":["a",""])", "guided_choice"},
      {R"("guided_grammar":{})", "guided_grammar"},
      {R"("guided_regex":"")", "guided_regex"},
      {R"("structured_outputs":[])", "structured_outputs"},
      {R"("structured_outputs":{"regex":"a","choice":["b"]})", "structured_outputs"},
      {R"("guided_regex":"a","guided_choice":["b"])", "guided_choice"},
      {R"("response_format":{"type":"json_object"},"guided_regex":"a")", "guided_regex"},
      {R"("guided_regex":"a","ignore_eos":true)", "ignore_eos"},
  };
  for (const auto& [extra, param] : bad) {
    INFO(extra);
    const auto e = completion_error(extra);
    CHECK(e.status == 400);
    CHECK(e.param == param);
    CHECK_FALSE(e.message.empty());
  }
  // Too long: the text bound is the engine's, checked here first.
  const std::string huge(max_constraint_text_bytes + 1, 'a');
  CHECK(completion_error(R"("guided_regex":")" + huge + "\"").param == "guided_regex");
}
