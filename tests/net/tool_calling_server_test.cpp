// Tool calling through troupe's server on the bundled model: /v1/chat/completions answers
// with message.tool_calls (JSON) or tool_calls deltas (SSE) that agree, the WebSocket with
// tool_calls in delta frames; finish_reason is "tool_calls"; bad tool requests are 400s with
// a clear message while the server keeps serving.
#include <doctest/doctest.h>

#include <string>

#include "tests/support/served_engine.hpp"

using namespace troupe;
using namespace troupe::testing;

namespace {

// A tool small enough that the instructions and its schema fit the bundled model's 512 tokens.
const std::string tool_json = R"({"type":"function","function":{"name":"w","parameters":{"type":"object",
  "properties":{"c":{"type":"string","maxLength":3}},"required":["c"]}}})";

std::string chat_body(const std::string& extra) {
  return R"({"messages":[{"role":"user","content":"Hi"}],"tools":[)" + tool_json +
         R"(],"temperature":0,"max_tokens":200,"parallel_tool_calls":false)" + extra + "}";
}

// The tool calls of an SSE stream, merged by index as OpenAI's clients do, and its finish_reason.
boost::json::array sse_tool_calls(const std::string& body, std::string& finish) {
  boost::json::array calls;
  std::size_t pos = 0;
  while ((pos = body.find("data: ", pos)) != std::string::npos) {
    const auto end = body.find("\n\n", pos);
    const auto payload = body.substr(pos + 6, end - pos - 6);
    pos = end;
    if (payload == "[DONE]")
      break;
    const auto chunk = json_of(payload);
    const auto& choices = chunk.at("choices").as_array();
    if (choices.empty())
      continue;
    const auto& c = choices[0].as_object();
    if (!c.at("finish_reason").is_null())
      finish = c.at("finish_reason").as_string().c_str();
    if (const auto* list = c.at("delta").as_object().if_contains("tool_calls"))
      for (const auto& call : list->as_array()) {
        const auto index = static_cast<std::size_t>(call.at("index").as_int64());
        REQUIRE(index == calls.size()); // whole calls, in order
        auto copy = call.as_object();
        copy.erase("index");
        calls.push_back(std::move(copy));
      }
  }
  return calls;
}

} // namespace

TEST_CASE("HTTP: tool_choice required gives the same valid call as JSON and as SSE deltas") {
  served_engine s;
  const auto plain = http_call(s.port, http::verb::post, "/v1/chat/completions", chat_body(R"(,"tool_choice":"required")"));
  REQUIRE(plain.status == 200);
  const auto body = json_of(plain.body);
  const auto& choice = body.at("choices").as_array()[0].as_object();
  CHECK(choice.at("finish_reason").as_string() == "tool_calls");
  const auto& message = choice.at("message").as_object();
  CHECK(message.at("content").is_null());
  const auto& calls = message.at("tool_calls").as_array();
  REQUIRE(calls.size() == 1);
  const auto& call = calls[0].as_object();
  CHECK(std::string(call.at("id").as_string().c_str()).starts_with("call_"));
  CHECK(call.at("type").as_string() == "function");
  CHECK(call.at("function").at("name").as_string() == "w");
  const auto arguments = boost::json::parse(call.at("function").at("arguments").as_string());
  REQUIRE(arguments.is_object());
  REQUIRE(arguments.as_object().contains("c"));
  CHECK(arguments.at("c").as_string().size() <= 3);

  const auto streamed =
      http_call(s.port, http::verb::post, "/v1/chat/completions", chat_body(R"(,"tool_choice":"required","stream":true)"));
  REQUIRE(streamed.status == 200);
  std::string finish;
  const auto streamed_calls = sse_tool_calls(streamed.body, finish);
  CHECK(finish == "tool_calls");
  CHECK(sse_text(streamed.body, true).empty());
  REQUIRE(streamed_calls.size() == 1);
  CHECK(streamed_calls[0].at("function") == call.at("function")); // greedy: the same call
  const auto metrics = http_call(s.port, http::verb::get, "/metrics", "");
  CHECK(metrics.body.find("troupe:tool_calls_total{model_name=\"stories260k\"} 2") != std::string::npos);
}

TEST_CASE("WebSocket: a named function's call comes in a delta frame, done says tool_calls") {
  served_engine s;
  ws_client c(s.port);
  c.send(R"({"type":"generate","id":"t1","messages":[{"role":"user","content":"Hi"}],"tools":[)" + tool_json +
         R"(],"tool_choice":{"type":"function","function":{"name":"w"}},"temperature":0,"max_tokens":200})");
  boost::json::array calls;
  std::string text;
  boost::json::object done;
  for (;;) {
    auto f = c.read();
    if (f.at("type") != "delta") {
      done = std::move(f);
      break;
    }
    text += f.at("text").as_string().c_str();
    if (const auto* list = f.if_contains("tool_calls"))
      for (const auto& call : list->as_array())
        calls.push_back(call);
  }
  CHECK(done.at("type").as_string() == "done");
  CHECK(done.at("finish_reason").as_string() == "tool_calls");
  CHECK(text.empty());
  REQUIRE(calls.size() == 1);
  CHECK(calls[0].at("index").as_int64() == 0);
  CHECK(calls[0].at("function").at("name").as_string() == "w");
  CHECK(boost::json::parse(calls[0].at("function").at("arguments").as_string()).is_object());
}

TEST_CASE("HTTP: a history of calls and results is served, and tool_choice auto leaves the text to the model") {
  served_engine s;
  const auto r = http_call(s.port, http::verb::post, "/v1/chat/completions",
                           R"({"messages":[{"role":"user","content":"Hi"},
                                {"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function",
                                  "function":{"name":"w","arguments":"{\"c\":\"ab\"}"}}]},
                                {"role":"tool","tool_call_id":"call_1","content":"sunny"}],
                               "tools":[)" + tool_json + R"(],"temperature":0,"max_tokens":12})");
  REQUIRE(r.status == 200);
  const auto body = json_of(r.body);
  const auto& choice = body.at("choices").as_array()[0].as_object();
  CHECK(choice.at("finish_reason").as_string() != "tool_calls"); // the tiny model writes a story
  CHECK_FALSE(choice.at("message").at("content").as_string().empty());
}

TEST_CASE("HTTP: bad tool requests are 400s that say why, and the server keeps serving") {
  served_engine s;
  struct bad_case {
    std::string body, words;
  };
  const std::vector<bad_case> cases{
      {chat_body(R"(,"tool_choice":{"type":"function","function":{"name":"x"}})"), "not among the tools"},
      {R"({"messages":[{"role":"user","content":"Hi"}],"tool_choice":"required"})", "needs tools"},
      {R"({"messages":[{"role":"user","content":"Hi"}],"tools":[)" + tool_json + "," + tool_json + "]}", "used twice"},
      {R"({"messages":[{"role":"user","content":"Hi"}],"tool_choice":"required","tools":[{"type":"function",
         "function":{"name":"f","parameters":{"type":"object","properties":{"a":{"type":"number","multipleOf":3}}}}}]})",
       "multipleOf"},
      {chat_body(R"(,"tool_choice":"required","response_format":{"type":"json_object"})"), "cannot be combined"},
      {chat_body(R"(,"tool_choice":"sometimes")"), "tool_choice"},
  };
  for (const auto& c : cases) {
    INFO(c.body);
    const auto r = http_call(s.port, http::verb::post, "/v1/chat/completions", c.body);
    CHECK(r.status == 400);
    CHECK_MESSAGE(r.body.find(c.words) != std::string::npos, r.body);
  }
  const auto ok = http_call(s.port, http::verb::post, "/v1/chat/completions", chat_body(R"(,"tool_choice":"required")"));
  CHECK(ok.status == 200);
}
