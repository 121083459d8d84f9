// generation_reply with several choices: the JSON answer lists every choice by index with
// its own text, logprobs and finish reason; the SSE stream tags each chunk with its choice,
// ends each choice when its last delta comes, and leaves finish_stream only the unfinished
// ones; one choice gives byte for byte the stream it gave before choices existed.
#include <doctest/doctest.h>

#include <boost/json.hpp>

#include <string>
#include <vector>

#include "net/generation_reply.hpp"

using namespace troupe;
using namespace troupe::net;
namespace json = boost::json;

namespace {
constexpr std::int64_t created = 1700000000;

token_logprob lp(token_id id, std::string token, float logprob) {
  return {id, std::move(token), logprob, {}};
}

usage_info usage(int prompt, int completion) {
  usage_info u;
  u.prompt_tokens = prompt;
  u.completion_tokens = completion;
  return u;
}

finished done_with(std::string reason, usage_info u = usage(4, 9)) {
  finished f;
  f.reason = std::move(reason);
  f.usage = u;
  return f;
}

// The JSON of one "data: {...}\n\n" event.
json::object event_json(const std::string& event) {
  REQUIRE(event.starts_with("data: {"));
  REQUIRE(event.ends_with("\n\n"));
  auto v = json::parse(event.substr(6, event.size() - 8));
  REQUIRE(v.is_object());
  return v.get_object();
}

// The one choice of a chunk.
const json::object& chunk_choice(const json::object& chunk) {
  const auto& list = chunk.at("choices").as_array();
  REQUIRE(list.size() == 1);
  return list[0].as_object();
}

generation_reply reply(reply_shape shape, int n, bool include_usage = false, bool want_logprobs = false) {
  return generation_reply(shape, "stories", created, 1, n, include_usage, want_logprobs);
}

std::vector<std::string> tokens_of(const json::value& logprobs) {
  std::vector<std::string> out;
  for (const auto& t : logprobs.at("tokens").as_array())
    out.emplace_back(t.as_string());
  return out;
}
} // namespace

TEST_CASE("n = 3 completions JSON: three choices by index, each with its text, reason and logprobs") {
  auto r = reply(reply_shape::completion_json, 3, false, true);
  std::vector<token_logprob> a1{lp(10, "Once", -0.5f)}, b1{lp(20, "The", -1.0f)}, c1{lp(30, "A", -2.0f)};
  std::vector<token_logprob> a2{lp(11, " upon", -0.25f)}, b_stop{lp(2, "</s>", -0.125f)};
  // Interleaved, as the engine sends them; a JSON answer gets no chunks.
  auto none = r.on_delta(1, "", "The", {}, b1, "");
  CHECK_FALSE(none.text);
  CHECK_FALSE(none.finish);
  r.on_delta(0, "", "Once", {}, a1, "");
  r.on_delta(2, "", "A", {}, c1, "length");
  r.on_delta(0, "", " upon", {}, a2, "length");
  r.on_delta(1, "", "", {}, b_stop, "stop"); // the stop token: no text, its logprob kept
  auto body = json::parse(r.json_body(done_with("length"))).as_object();
  CHECK(body.at("id").as_string() == "cmpl-1");
  const auto& choices = body.at("choices").as_array();
  REQUIRE(choices.size() == 3);
  for (std::size_t i = 0; i < 3; ++i)
    CHECK(choices[i].at("index").as_int64() == static_cast<std::int64_t>(i));
  CHECK(choices[0].at("text").as_string() == "Once upon");
  CHECK(choices[1].at("text").as_string() == "The");
  CHECK(choices[2].at("text").as_string() == "A");
  CHECK(choices[0].at("finish_reason").as_string() == "length");
  CHECK(choices[1].at("finish_reason").as_string() == "stop"); // its own, not finished::reason
  CHECK(choices[2].at("finish_reason").as_string() == "length");
  CHECK(tokens_of(choices[0].at("logprobs")) == std::vector<std::string>{"Once", " upon"});
  CHECK(tokens_of(choices[1].at("logprobs")) == std::vector<std::string>{"The", "</s>"});
  CHECK(tokens_of(choices[2].at("logprobs")) == std::vector<std::string>{"A"});
  // Each choice's text_offset counts from the start of its own text.
  const auto& offsets = choices[0].at("logprobs").at("text_offset").as_array();
  REQUIRE(offsets.size() == 2);
  CHECK(offsets[0].as_int64() == 0);
  CHECK(offsets[1].as_int64() == 4);
  CHECK(choices[1].at("logprobs").at("text_offset").as_array()[0].as_int64() == 0);
  CHECK(choices[1].at("logprobs").at("token_logprobs").as_array()[1].as_double() == -0.125);
  CHECK(body.at("usage").at("completion_tokens").as_int64() == 9);
}

TEST_CASE("n = 2 chat JSON: each message is its own, echo leads each choice, cancelled ones end with abort") {
  auto r = reply(reply_shape::chat_json, 2, false, true);
  r.on_delta(1, "", "Hi", {}, std::vector<token_logprob>{lp(5, "Hi", -0.5f)}, "");
  r.on_delta(0, "", "Hello", {}, std::vector<token_logprob>{lp(6, "Hello", -0.75f)}, "stop");
  // Choice 1 had no finish delta: the request was cancelled, so it ends with finished::reason.
  auto body = json::parse(r.json_body(done_with("cancelled"))).as_object();
  CHECK(body.at("object").as_string() == "chat.completion");
  const auto& choices = body.at("choices").as_array();
  REQUIRE(choices.size() == 2);
  CHECK(choices[0].at("index").as_int64() == 0);
  CHECK(choices[0].at("message").at("content").as_string() == "Hello");
  CHECK(choices[0].at("finish_reason").as_string() == "stop");
  CHECK(choices[0].at("logprobs").at("content").as_array()[0].at("token").as_string() == "Hello");
  CHECK(choices[1].at("index").as_int64() == 1);
  CHECK(choices[1].at("message").at("content").as_string() == "Hi");
  CHECK(choices[1].at("finish_reason").as_string() == "abort");
  const auto& second = choices[1].at("logprobs").at("content").as_array();
  REQUIRE(second.size() == 1);
  CHECK(second[0].at("logprob").as_double() == -0.5);

  auto echo = reply(reply_shape::completion_json, 2);
  echo.on_delta(0, "Say: ", "yes", {}, {}, "stop");
  echo.on_delta(1, "Say: ", "no", {}, {}, "stop");
  auto echoed = json::parse(echo.json_body(done_with("stop"))).as_object();
  CHECK(echoed.at("choices").as_array()[0].at("text").as_string() == "Say: yes");
  CHECK(echoed.at("choices").as_array()[1].at("text").as_string() == "Say: no");
}

TEST_CASE("n = 3 completions SSE: chunks carry their index, each choice ends when its last delta comes") {
  auto r = reply(reply_shape::completion_sse, 3, true, true);
  auto opening = r.open_stream();
  REQUIRE(opening);
  CHECK(opening->events.empty()); // completions have no role chunk

  auto b = r.on_delta(1, "", "Two", {}, std::vector<token_logprob>{lp(7, "Two", -1.5f)}, "");
  REQUIRE(b.text);
  CHECK_FALSE(b.finish);
  auto b_chunk = chunk_choice(event_json(*b.text));
  CHECK(b_chunk.at("index").as_int64() == 1);
  CHECK(b_chunk.at("text").as_string() == "Two");
  CHECK(b_chunk.at("finish_reason").is_null());
  CHECK(tokens_of(b_chunk.at("logprobs")) == std::vector<std::string>{"Two"});

  // Text and the end in one delta: the text chunk, then the choice's finish chunk with nothing pending.
  auto a = r.on_delta(0, "", "One", {}, std::vector<token_logprob>{lp(8, "One", -0.5f)}, "length");
  REQUIRE(a.text);
  REQUIRE(a.finish);
  CHECK(chunk_choice(event_json(*a.text)).at("index").as_int64() == 0);
  CHECK(chunk_choice(event_json(*a.text)).at("text").as_string() == "One");
  auto a_end = chunk_choice(event_json(*a.finish));
  CHECK(a_end.at("index").as_int64() == 0);
  CHECK(a_end.at("text").as_string() == "");
  CHECK(a_end.at("finish_reason").as_string() == "length");
  CHECK(a_end.at("logprobs").is_null());
  CHECK(event_json(*a.finish).at("usage").is_null());

  // A stop token: no text, so no content chunk, only the finish chunk carrying its logprob.
  auto c = r.on_delta(2, "", "", {}, std::vector<token_logprob>{lp(2, "</s>", -0.25f)}, "stop");
  CHECK_FALSE(c.text);
  REQUIRE(c.finish);
  auto c_end = chunk_choice(event_json(*c.finish));
  CHECK(c_end.at("index").as_int64() == 2);
  CHECK(c_end.at("finish_reason").as_string() == "stop");
  CHECK(tokens_of(c_end.at("logprobs")) == std::vector<std::string>{"</s>"});

  // Only choice 1 is still open: finish_stream ends it with finished::reason, then usage, then [DONE].
  auto tail = r.finish_stream(done_with("cancelled", usage(4, 3)));
  REQUIRE(tail.size() == 3);
  auto b_end = chunk_choice(event_json(tail[0]));
  CHECK(b_end.at("index").as_int64() == 1);
  CHECK(b_end.at("finish_reason").as_string() == "abort");
  auto usage_chunk = event_json(tail[1]);
  CHECK(usage_chunk.at("choices").as_array().empty());
  CHECK(usage_chunk.at("usage").at("completion_tokens").as_int64() == 3);
  CHECK(tail[2] == "data: [DONE]\n\n");
}

TEST_CASE("n = 3 chat SSE: one role chunk per choice, indexed content, finish_stream skips ended choices") {
  auto r = reply(reply_shape::chat_sse, 3);
  auto opening = r.open_stream();
  REQUIRE(opening);
  REQUIRE(opening->events.size() == 3);
  for (int i = 0; i < 3; ++i) {
    auto role = chunk_choice(event_json(opening->events[static_cast<std::size_t>(i)]));
    CHECK(role.at("index").as_int64() == i);
    CHECK(role.at("delta").at("role").as_string() == "assistant");
    CHECK(role.at("delta").at("content").as_string() == "");
    CHECK(role.at("finish_reason").is_null());
  }
  CHECK_FALSE(r.open_stream()); // the opening comes once

  auto c = r.on_delta(2, "", "Hey", {}, {}, "");
  REQUIRE(c.text);
  CHECK(chunk_choice(event_json(*c.text)).at("index").as_int64() == 2);
  CHECK(chunk_choice(event_json(*c.text)).at("delta").at("content").as_string() == "Hey");
  auto a = r.on_delta(0, "", "", {}, {}, "stop");
  CHECK_FALSE(a.text);
  REQUIRE(a.finish);
  auto a_end = chunk_choice(event_json(*a.finish));
  CHECK(a_end.at("index").as_int64() == 0);
  CHECK(a_end.at("delta").as_object().empty());
  CHECK(a_end.at("finish_reason").as_string() == "stop");
  auto b = r.on_delta(1, "", "Yo", {}, {}, "length");
  REQUIRE(b.finish);
  CHECK(chunk_choice(event_json(*b.finish)).at("finish_reason").as_string() == "length");

  // Choice 2 never got its finish delta (cancelled): only it is ended here; no usage chunk was asked.
  auto tail = r.finish_stream(done_with("cancelled"));
  REQUIRE(tail.size() == 2);
  auto c_end = chunk_choice(event_json(tail[0]));
  CHECK(c_end.at("index").as_int64() == 2);
  CHECK(c_end.at("finish_reason").as_string() == "abort");
  CHECK(tail[1] == "data: [DONE]\n\n");
}

TEST_CASE("n = 3 SSE: when every choice ended by its delta, finish_stream sends only usage and DONE") {
  auto r = reply(reply_shape::completion_sse, 3, true);
  r.open_stream();
  for (int i = 0; i < 3; ++i)
    CHECK(r.on_delta(i, "", "x", {}, {}, "stop").finish);
  auto tail = r.finish_stream(done_with("stop"));
  REQUIRE(tail.size() == 2);
  CHECK(event_json(tail[0]).at("choices").as_array().empty());
  CHECK(tail[1] == "data: [DONE]\n\n");
}

TEST_CASE("n = 1: the stream's bytes are the same whether the last delta or finished ends the choice") {
  const std::string text_chunk_once =
      R"(data: {"id":"cmpl-1","object":"text_completion","created":1700000000,"model":"stories",)"
      R"("choices":[{"index":0,"text":"Once","logprobs":null,"finish_reason":null}],"usage":null})"
      "\n\n";
  const std::string finish_chunk =
      R"(data: {"id":"cmpl-1","object":"text_completion","created":1700000000,"model":"stories",)"
      R"("choices":[{"index":0,"text":"","logprobs":null,"finish_reason":"stop"}],"usage":null})"
      "\n\n";
  const std::string usage_chunk =
      R"(data: {"id":"cmpl-1","object":"text_completion","created":1700000000,"model":"stories",)"
      R"("choices":[],"usage":{"prompt_tokens":4,"completion_tokens":2,"total_tokens":6}})"
      "\n\n";
  const std::string expected = text_chunk_once + finish_chunk + usage_chunk + "data: [DONE]\n\n";

  // Today's engine: no finish_reason on deltas; finished ends the choice.
  auto before = reply(reply_shape::completion_sse, 1, true);
  std::string got_before;
  REQUIRE(before.open_stream());
  auto once = before.on_delta(0, "", "Once", {}, {}, "");
  REQUIRE(once.text);
  CHECK_FALSE(once.finish);
  got_before += *once.text;
  CHECK_FALSE(before.on_delta(0, "", "", {}, {}, "").text); // the stop token's delta, no text
  for (const auto& e : before.finish_stream(done_with("stop", usage(4, 2))))
    got_before += e;
  CHECK(got_before == expected);

  // The engine with choices: the stop token's delta carries the reason.
  auto after = reply(reply_shape::completion_sse, 1, true);
  std::string got_after;
  REQUIRE(after.open_stream());
  got_after += *after.on_delta(0, "", "Once", {}, {}, "").text;
  auto last = after.on_delta(0, "", "", {}, {}, "stop");
  CHECK_FALSE(last.text);
  REQUIRE(last.finish);
  got_after += *last.finish;
  for (const auto& e : after.finish_stream(done_with("stop", usage(4, 2))))
    got_after += e;
  CHECK(got_after == expected);
}

TEST_CASE("n = 1 chat: one role chunk, and the same bytes either way the choice ends") {
  const std::string role =
      R"(data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"stories",)"
      R"("choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]})"
      "\n\n";
  const std::string content =
      R"(data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"stories",)"
      R"("choices":[{"index":0,"delta":{"content":"Hi"},"logprobs":{"content":[{"token":"Hi","logprob":-5E-1,)"
      R"("bytes":[72,105],"top_logprobs":[]}]},"finish_reason":null}]})"
      "\n\n";
  const std::string finish =
      R"(data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,"model":"stories",)"
      R"("choices":[{"index":0,"delta":{},"logprobs":{"content":[{"token":"!","logprob":-2.5E-1,)"
      R"("bytes":[33],"top_logprobs":[]}]},"finish_reason":"length"}]})"
      "\n\n";
  // Boost.JSON writes doubles in its shortest form: -0.5 is -5E-1 on the wire, as it was before choices.
  const std::string expected = role + content + finish + "data: [DONE]\n\n";
  const std::vector<token_logprob> hi{lp(9, "Hi", -0.5f)}, bang{lp(3, "!", -0.25f)};

  for (bool finish_on_delta : {false, true}) {
    INFO("finish on the last delta: " << finish_on_delta);
    auto r = reply(reply_shape::chat_sse, 1, false, true);
    auto opening = r.open_stream();
    REQUIRE(opening);
    REQUIRE(opening->events.size() == 1);
    std::string got = opening->events[0];
    got += *r.on_delta(0, "", "Hi", {}, hi, "").text;
    // Half a character: its logprob waits for the choice's next chunk, here the finish chunk.
    auto last = r.on_delta(0, "", "", {}, bang, finish_on_delta ? "length" : "");
    CHECK_FALSE(last.text);
    CHECK(last.finish.has_value() == finish_on_delta);
    if (last.finish)
      got += *last.finish;
    for (const auto& e : r.finish_stream(done_with("length")))
      got += e;
    CHECK(got == expected);
  }
}

TEST_CASE("a delta for an index beyond n is dropped, not written into another choice") {
  auto r = reply(reply_shape::completion_sse, 2);
  r.open_stream();
  auto stray = r.on_delta(2, "", "x", {}, {}, "stop");
  CHECK_FALSE(stray.text);
  CHECK_FALSE(stray.finish);
  auto tail = r.finish_stream(done_with("stop"));
  REQUIRE(tail.size() == 3); // both choices still end in finish_stream
  CHECK(chunk_choice(event_json(tail[0])).at("index").as_int64() == 0);
  CHECK(chunk_choice(event_json(tail[1])).at("index").as_int64() == 1);
}

TEST_CASE("chat with tool calls: JSON has message.tool_calls (content null when only calls), SSE a tool_calls delta") {
  const std::vector<tool_call> first{{"call_a", "get_weather", R"({"city": "Paris"})"}};
  const std::vector<tool_call> second{{"call_b", "open_ticket", "{}"}};
  {
    auto r = reply(reply_shape::chat_json, 2);
    r.on_delta(0, "", "", {}, {}, "", first, 0);
    r.on_delta(0, "", "", {}, {}, "tool_calls", second, 1);
    r.on_delta(1, "", "Just text.", {}, {}, "stop");
    const auto body = json::parse(r.json_body(done_with("tool_calls"))).as_object();
    const auto& choices = body.at("choices").as_array();
    const auto& called = choices[0].as_object();
    CHECK(called.at("finish_reason").as_string() == "tool_calls");
    const auto& message = called.at("message").as_object();
    CHECK(message.at("role").as_string() == "assistant");
    CHECK(message.at("content").is_null());
    const auto& calls = message.at("tool_calls").as_array();
    REQUIRE(calls.size() == 2);
    CHECK(calls[0] == json::parse(R"({"id":"call_a","type":"function",
                                      "function":{"name":"get_weather","arguments":"{\"city\": \"Paris\"}"}})"));
    CHECK(calls[1].at("function").at("name").as_string() == "open_ticket");
    CHECK_FALSE(calls[0].as_object().contains("index")); // a message's calls have no index
    const auto& plain = choices[1].at("message").as_object();
    CHECK(plain.at("content").as_string() == "Just text.");
    CHECK_FALSE(plain.contains("tool_calls"));
  }
  {
    auto r = reply(reply_shape::chat_sse, 1, /*include_usage=*/true);
    REQUIRE(r.open_stream());
    auto text = r.on_delta(0, "", "Let me see.", {}, {}, "");
    REQUIRE(text.text);
    auto calls = r.on_delta(0, "", "", {}, {}, "tool_calls", second, 1);
    REQUIRE(calls.text); // the tool-call chunk
    REQUIRE(calls.finish);
    const auto chunk = event_json(*calls.text);
    CHECK(chunk.at("usage").is_null());
    const auto& c = chunk_choice(chunk);
    CHECK(c.at("finish_reason").is_null());
    const auto& delta = c.at("delta").as_object();
    CHECK_FALSE(delta.contains("content"));
    CHECK(delta.at("tool_calls") == json::parse(R"([{"index":1,"id":"call_b","type":"function",
                                                     "function":{"name":"open_ticket","arguments":"{}"}}])"));
    CHECK(chunk_choice(event_json(*calls.finish)).at("finish_reason").as_string() == "tool_calls");
    // Text and calls in one delta: the text's chunk first, then the calls'.
    auto r2 = reply(reply_shape::chat_sse, 1);
    r2.open_stream();
    auto both = r2.on_delta(0, "", "Hi", {}, {}, "", first, 0);
    REQUIRE(both.text);
    const auto split = both.text->find("\n\ndata: ");
    REQUIRE(split != std::string::npos);
    CHECK(chunk_choice(event_json(both.text->substr(0, split + 2))).at("delta").at("content").as_string() == "Hi");
    CHECK(chunk_choice(event_json(both.text->substr(split + 2))).at("delta").at("tool_calls").as_array().size() == 1);
  }
}
