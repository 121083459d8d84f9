// The OpenAI response builders, parsed back with Boost.JSON and checked field
// by field against OpenAI's shapes; SSE framing; the error body.
#include <doctest/doctest.h>

#include <boost/json.hpp>

#include <set>
#include <string>
#include <vector>

#include "net/api_error.hpp"
#include "net/openai_responses.hpp"

using namespace troupe;
using namespace troupe::net;
namespace json = boost::json;

namespace {
json::object parse(const std::string& text) {
  auto v = json::parse(text);
  REQUIRE(v.is_object());
  return v.get_object();
}

std::set<std::string> keys(const json::object& o) {
  std::set<std::string> out;
  for (const auto& kv : o)
    out.emplace(kv.key());
  return out;
}

usage_info usage(int prompt, int completion, int cached = 0) {
  usage_info u;
  u.prompt_tokens = prompt;
  u.completion_tokens = completion;
  u.cached_tokens = cached;
  return u;
}

void check_usage(const json::value& v, int prompt, int completion) {
  REQUIRE(v.is_object());
  const auto& u = v.get_object();
  CHECK(keys(u) == std::set<std::string>{"prompt_tokens", "completion_tokens", "total_tokens"});
  CHECK(u.at("prompt_tokens").as_int64() == prompt);
  CHECK(u.at("completion_tokens").as_int64() == completion);
  CHECK(u.at("total_tokens").as_int64() == prompt + completion);
}

void check_head(const json::object& o, const char* object, const char* id = "cmpl-1") {
  CHECK(o.at("id").as_string() == id);
  CHECK(o.at("object").as_string() == object);
  CHECK(o.at("created").as_int64() == 1700000000);
  CHECK(o.at("model").as_string() == "stories");
}

const json::object& only_choice(const json::object& o) {
  const auto& choices = o.at("choices").as_array();
  REQUIRE(choices.size() == 1);
  const auto& c = choices[0].as_object();
  CHECK(c.at("index").as_int64() == 0);
  CHECK(c.at("logprobs").is_null());
  return c;
}
} // namespace

TEST_CASE("finish reasons map to OpenAI's words, cancelled to abort") {
  CHECK(openai_finish_reason("stop") == "stop");
  CHECK(openai_finish_reason("length") == "length");
  CHECK(openai_finish_reason("cancelled") == "abort");
  CHECK(openai_finish_reason(openai_finish_reason("cancelled")) == "abort");
}

TEST_CASE("completion_response has OpenAI's text_completion shape") {
  auto o = parse(completion_response("cmpl-1", 1700000000, "stories", {{"Once upon", "length"}}, usage(5, 16, 3)));
  CHECK(keys(o) == std::set<std::string>{"id", "object", "created", "model", "choices", "usage"});
  check_head(o, "text_completion");
  const auto& c = only_choice(o);
  CHECK(keys(c) == std::set<std::string>{"index", "text", "logprobs", "finish_reason"});
  CHECK(c.at("text").as_string() == "Once upon");
  CHECK(c.at("finish_reason").as_string() == "length");
  check_usage(o.at("usage"), 5, 16);
  auto cancelled = parse(completion_response("cmpl-1", 1700000000, "stories", {{"", "cancelled"}}, usage(1, 0)));
  CHECK(only_choice(cancelled).at("finish_reason").as_string() == "abort");
}

TEST_CASE("completion_chunk carries text, a null finish_reason until the end, and usage null on request") {
  auto mid = parse(completion_chunk("cmpl-1", 1700000000, "stories", 0, " time", std::nullopt));
  CHECK(keys(mid) == std::set<std::string>{"id", "object", "created", "model", "choices"});
  check_head(mid, "text_completion");
  const auto& c = only_choice(mid);
  CHECK(keys(c) == std::set<std::string>{"index", "text", "logprobs", "finish_reason"});
  CHECK(c.at("text").as_string() == " time");
  CHECK(c.at("finish_reason").is_null());

  auto last = parse(completion_chunk("cmpl-1", 1700000000, "stories", 0, "", std::string_view("stop"), true));
  CHECK(only_choice(last).at("finish_reason").as_string() == "stop");
  REQUIRE(last.contains("usage"));
  CHECK(last.at("usage").is_null());
}

TEST_CASE("chat_response has OpenAI's chat.completion shape") {
  auto o = parse(chat_response("chatcmpl-9", 1700000000, "stories", {{"Hi there", "stop"}}, usage(12, 3)));
  CHECK(keys(o) == std::set<std::string>{"id", "object", "created", "model", "choices", "usage"});
  check_head(o, "chat.completion", "chatcmpl-9");
  const auto& c = only_choice(o);
  CHECK(keys(c) == std::set<std::string>{"index", "message", "logprobs", "finish_reason"});
  const auto& m = c.at("message").as_object();
  CHECK(keys(m) == std::set<std::string>{"role", "content"});
  CHECK(m.at("role").as_string() == "assistant");
  CHECK(m.at("content").as_string() == "Hi there");
  CHECK(c.at("finish_reason").as_string() == "stop");
  check_usage(o.at("usage"), 12, 3);
}

TEST_CASE("chat_chunk: the role first, then content deltas, then an empty delta with the reason") {
  auto first = parse(chat_chunk("chatcmpl-9", 1700000000, "stories", 0, std::string_view("assistant"),
                                std::string_view(""), std::nullopt));
  CHECK(keys(first) == std::set<std::string>{"id", "object", "created", "model", "choices"});
  check_head(first, "chat.completion.chunk", "chatcmpl-9");
  const auto& c1 = only_choice(first);
  CHECK(keys(c1) == std::set<std::string>{"index", "delta", "logprobs", "finish_reason"});
  CHECK(c1.at("delta").as_object().at("role").as_string() == "assistant");
  CHECK(c1.at("delta").as_object().at("content").as_string() == "");
  CHECK(c1.at("finish_reason").is_null());

  auto mid = parse(
      chat_chunk("chatcmpl-9", 1700000000, "stories", 0, std::nullopt, std::string_view("Hel"), std::nullopt, true));
  const auto& d = only_choice(mid).at("delta").as_object();
  CHECK(keys(d) == std::set<std::string>{"content"});
  CHECK(d.at("content").as_string() == "Hel");
  CHECK(mid.at("usage").is_null());

  auto last = parse(
      chat_chunk("chatcmpl-9", 1700000000, "stories", 0, std::nullopt, std::nullopt, std::string_view("cancelled")));
  CHECK(only_choice(last).at("delta").as_object().empty());
  CHECK(only_choice(last).at("finish_reason").as_string() == "abort");
}

TEST_CASE("usage_chunk has empty choices and the usage, with each endpoint's object") {
  auto chat = parse(usage_chunk(endpoint::chat, "chatcmpl-9", 1700000000, "stories", usage(4, 6)));
  CHECK(keys(chat) == std::set<std::string>{"id", "object", "created", "model", "choices", "usage"});
  check_head(chat, "chat.completion.chunk", "chatcmpl-9");
  CHECK(chat.at("choices").as_array().empty());
  check_usage(chat.at("usage"), 4, 6);
  auto text = parse(usage_chunk(endpoint::completions, "cmpl-1", 1700000000, "stories", usage(4, 6)));
  check_head(text, "text_completion");
  CHECK(text.at("choices").as_array().empty());
}

TEST_CASE("completion_response and chat_response list every choice by index with its own reason and logprobs") {
  std::vector<response_choice> choices(3);
  choices[0] = {"zero", "stop", json::object{{"tag", 0}}};
  choices[1] = {"one", "length", nullptr};
  choices[2] = {"", "cancelled", json::object{{"tag", 2}}};
  auto o = parse(completion_response("cmpl-1", 1700000000, "stories", choices, usage(3, 30)));
  const auto& list = o.at("choices").as_array();
  REQUIRE(list.size() == 3);
  const char* texts[] = {"zero", "one", ""};
  const char* reasons[] = {"stop", "length", "abort"};
  for (std::size_t i = 0; i < 3; ++i) {
    INFO("choice " << i);
    const auto& c = list[i].as_object();
    CHECK(c.at("index").as_int64() == static_cast<std::int64_t>(i));
    CHECK(c.at("text").as_string() == texts[i]);
    CHECK(c.at("finish_reason").as_string() == reasons[i]);
  }
  CHECK(list[0].at("logprobs").at("tag").as_int64() == 0);
  CHECK(list[1].at("logprobs").is_null());
  CHECK(list[2].at("logprobs").at("tag").as_int64() == 2);
  check_usage(o.at("usage"), 3, 30);

  auto chat = parse(chat_response("chatcmpl-9", 1700000000, "stories", choices, usage(3, 30)));
  const auto& messages = chat.at("choices").as_array();
  REQUIRE(messages.size() == 3);
  for (std::size_t i = 0; i < 3; ++i) {
    INFO("choice " << i);
    CHECK(messages[i].at("index").as_int64() == static_cast<std::int64_t>(i));
    CHECK(messages[i].at("message").at("role").as_string() == "assistant");
    CHECK(messages[i].at("message").at("content").as_string() == texts[i]);
    CHECK(messages[i].at("finish_reason").as_string() == reasons[i]);
  }
}

TEST_CASE("chunks carry the choice index they are given") {
  auto text = parse(completion_chunk("cmpl-1", 1700000000, "stories", 5, "x", std::nullopt));
  CHECK(text.at("choices").as_array()[0].at("index").as_int64() == 5);
  CHECK(text.at("choices").as_array()[0].at("text").as_string() == "x");
  auto chat =
      parse(chat_chunk("chatcmpl-9", 1700000000, "stories", 2, std::nullopt, std::nullopt, std::string_view("length")));
  CHECK(chat.at("choices").as_array()[0].at("index").as_int64() == 2);
  CHECK(chat.at("choices").as_array()[0].at("finish_reason").as_string() == "length");
}

TEST_CASE("models_list names the one model with vLLM's max_model_len") {
  auto o = parse(models_list("stories", 1700000000, 2048));
  CHECK(keys(o) == std::set<std::string>{"object", "data"});
  CHECK(o.at("object").as_string() == "list");
  const auto& data = o.at("data").as_array();
  REQUIRE(data.size() == 1);
  const auto& m = data[0].as_object();
  CHECK(keys(m) == std::set<std::string>{"id", "object", "created", "owned_by", "max_model_len"});
  CHECK(m.at("id").as_string() == "stories");
  CHECK(m.at("object").as_string() == "model");
  CHECK(m.at("created").as_int64() == 1700000000);
  CHECK(m.at("owned_by").as_string() == "troupe");
  CHECK(m.at("max_model_len").as_int64() == 2048);
}

TEST_CASE("text with quotes, newlines, control bytes and non-ASCII survives the round trip") {
  std::string text = "say \"hi\"\n\tthen \\ leave \x01 caf\xc3\xa9 \xe2\x9c\x93";
  auto o = parse(completion_chunk("cmpl-1", 1700000000, "stories", 0, text, std::nullopt));
  CHECK(std::string(only_choice(o).at("text").as_string()) == text);
  auto c = parse(chat_response("c", 1700000000, "stories", {{text, "stop"}}, usage(1, 1)));
  CHECK(std::string(only_choice(c).at("message").as_object().at("content").as_string()) == text);
}

TEST_CASE("SSE framing: data lines ended by a blank line, and the DONE sentinel") {
  CHECK(sse_event("{\"a\":1}") == "data: {\"a\":1}\n\n");
  CHECK(sse_done() == "data: [DONE]\n\n");
  // A chunk whose text holds newlines still fits one data line.
  auto chunk = completion_chunk("cmpl-1", 1700000000, "stories", 0, "a\nb\r\nc", std::nullopt);
  auto event = sse_event(chunk);
  REQUIRE(event.size() > 8);
  CHECK(event.rfind("data: ", 0) == 0);
  CHECK(event.substr(event.size() - 2) == "\n\n");
  auto payload = event.substr(6, event.size() - 8);
  CHECK(payload.find('\n') == std::string::npos);
  CHECK(payload.find('\r') == std::string::npos);
  CHECK(only_choice(parse(payload)).at("text").as_string() == "a\nb\r\nc");
}

TEST_CASE("openai_error_body: OpenAI's error object, param and code null when empty") {
  auto o = parse(openai_error_body(invalid_request("temperature must be in [0, 2], got 3", "temperature")));
  CHECK(keys(o) == std::set<std::string>{"error"});
  const auto& e = o.at("error").as_object();
  CHECK(keys(e) == std::set<std::string>{"message", "type", "param", "code"});
  CHECK(e.at("message").as_string() == "temperature must be in [0, 2], got 3");
  CHECK(e.at("type").as_string() == "invalid_request_error");
  CHECK(e.at("param").as_string() == "temperature");
  CHECK(e.at("code").is_null());

  auto bare = parse(openai_error_body(invalid_request("bad")));
  CHECK(bare.at("error").as_object().at("param").is_null());
  CHECK(bare.at("error").as_object().at("code").is_null());

  auto busy = parse(openai_error_body(too_many_requests("slow down")));
  CHECK(busy.at("error").as_object().at("code").as_string() == "rate_limit_exceeded");
}

TEST_CASE("the api_error constructors carry the documented statuses and types") {
  auto bad = invalid_request("m", "p");
  CHECK(bad.status == 400);
  CHECK(bad.type == "invalid_request_error");
  CHECK(bad.param == "p");
  CHECK(not_found("no such model", "model").status == 404);
  CHECK(not_found("no such model", "model").type == "invalid_request_error");
  CHECK(payload_too_large("big").status == 413);
  CHECK(payload_too_large("big").code == "payload_too_large");
  CHECK(unprocessable("m", "prompt").status == 422);
  CHECK(unprocessable("m", "prompt").param == "prompt");
  CHECK(too_many_requests("m").status == 429);
  CHECK(too_many_requests("m").type == "rate_limit_error");
  CHECK(unavailable("m").status == 503);
  CHECK(unavailable("m").type == "server_error");
  CHECK(unavailable("m").message == "m");
}
