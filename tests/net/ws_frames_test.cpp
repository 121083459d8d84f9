// The WebSocket frames: client frames parsed into requests (ids echoed as
// given), bad frames refused with the id when it is known, server frames
// parsed back field by field.
#include <doctest/doctest.h>

#include <boost/json.hpp>

#include <cmath>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "net/ws_frames.hpp"

using namespace troupe;
using namespace troupe::net;
namespace json = boost::json;

namespace {
ws_generate generate(const std::string& text, const request_limits& limits = {}) {
  auto r = parse_ws_frame(text, limits);
  if (auto* e = std::get_if<ws_rejected>(&r))
    FAIL_CHECK("unexpected error: " << e->error.message);
  REQUIRE(std::holds_alternative<ws_generate>(r));
  return std::get<ws_generate>(std::move(r));
}

ws_rejected rejected(const std::string& text, const request_limits& limits = {}) {
  auto r = parse_ws_frame(text, limits);
  REQUIRE_MESSAGE(std::holds_alternative<ws_rejected>(r), "accepted: " << text);
  return std::get<ws_rejected>(std::move(r));
}

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
} // namespace

TEST_CASE("a generate frame with a prompt fills every field") {
  auto g = generate(R"({"type":"generate","id":"req-1","prompt":"Once","max_tokens":30,"temperature":0.8,
    "top_p":0.95,"top_k":40,"min_p":0.02,"seed":99,"stop":["\n\n"],"stop_token_ids":[2],"ignore_eos":true,
    "repetition_penalty":1.2,"frequency_penalty":0.1,"presence_penalty":0.2,"priority":1,"stream":true,
    "add_special_tokens":false})");
  CHECK(g.id_json == "\"req-1\"");
  CHECK(g.spec.messages.empty());
  CHECK(g.stream);
  CHECK(g.spec.prompt == "Once");
  CHECK_FALSE(g.spec.add_special_tokens);
  CHECK(g.spec.priority == 1);
  const auto& p = g.spec.params;
  CHECK(p.max_tokens == 30);
  CHECK(p.temperature == doctest::Approx(0.8));
  CHECK(p.top_p == doctest::Approx(0.95));
  CHECK(p.top_k == 40);
  CHECK(p.min_p == doctest::Approx(0.02));
  CHECK(*p.seed == 99u);
  CHECK(p.stop == std::vector<std::string>{"\n\n"});
  CHECK(p.stop_token_ids == std::vector<token_id>{2});
  CHECK(p.ignore_eos);
  CHECK(p.repetition_penalty == doctest::Approx(1.2));
  CHECK(p.frequency_penalty == doctest::Approx(0.1));
  CHECK(p.presence_penalty == doctest::Approx(0.2));
}

TEST_CASE("generate: prompt_ids, messages, defaults per input kind, stream false") {
  auto ids = generate(R"({"type":"generate","id":7,"prompt_ids":[1,2,3]})");
  CHECK(ids.id_json == "7");
  CHECK(ids.spec.prompt_ids == std::vector<token_id>{1, 2, 3});
  CHECK(ids.spec.params.max_tokens == 16);
  CHECK(ids.spec.add_special_tokens);
  CHECK(ids.stream);

  request_limits limits;
  limits.max_tokens_limit = 300;
  auto chat =
      generate(R"({"type":"generate","id":8,"messages":[{"role":"user","content":"hi"}],"stream":false})", limits);
  REQUIRE(chat.spec.messages.size() == 1);
  CHECK(chat.spec.messages[0].role == "user");
  CHECK(chat.spec.messages[0].content == "hi");
  CHECK(chat.spec.params.max_tokens == 300);
  CHECK_FALSE(chat.spec.add_special_tokens);
  CHECK_FALSE(chat.stream);

  auto prompt_as_ids = generate(R"({"type":"generate","id":9,"prompt":[5,6]})");
  CHECK(prompt_as_ids.spec.prompt_ids == std::vector<token_id>{5, 6});
}

TEST_CASE("ids are echoed as given: strings with escapes, negative and 64-bit integers") {
  CHECK(generate(R"({"type":"generate","id":"a\"b\\c","prompt":"x"})").id_json == R"("a\"b\\c")");
  CHECK(generate(R"({"type":"generate","id":-12,"prompt":"x"})").id_json == "-12");
  CHECK(generate(R"({"type":"generate","id":18446744073709551615,"prompt":"x"})").id_json == "18446744073709551615");
  CHECK(generate(R"({"type":"generate","id":"","prompt":"x"})").id_json == "\"\"");
}

TEST_CASE("a cancel frame carries its id") {
  auto r = parse_ws_frame(R"({"type":"cancel","id":"req-1"})", {});
  REQUIRE(std::holds_alternative<ws_cancel>(r));
  CHECK(std::get<ws_cancel>(r).id_json == "\"req-1\"");
  auto n = parse_ws_frame(R"({"id":3,"type":"cancel","extra":[1]})", {});
  REQUIRE(std::holds_alternative<ws_cancel>(n));
  CHECK(std::get<ws_cancel>(n).id_json == "3");
}

TEST_CASE("frames without a usable id are refused with id null") {
  for (std::string text :
       {"{", "not json", "[]", "42", R"({"type":"generate","prompt":"x"})", R"({"type":"cancel"})",
        R"({"type":"cancel","id":null})", R"({"type":"cancel","id":1.5})", R"({"type":"cancel","id":true})",
        R"({"type":"cancel","id":{"k":1}})", R"({"type":"cancel","id":[1]})"}) {
    INFO(text);
    auto r = rejected(text);
    CHECK(r.id_json == "null");
    CHECK(r.error.status == 400);
  }
  CHECK(rejected(R"({"type":"cancel","id":1.5})").error.param == "id");
}

TEST_CASE("frames with an id but bad content are refused with that id and the field") {
  struct bad_case {
    std::string text, param;
  };
  std::vector<bad_case> cases = {
      {R"({"id":"r","type":"resume"})", "type"},
      {R"({"id":"r"})", "type"},
      {R"({"id":"r","type":5})", "type"},
      {R"({"id":"r","type":"generate"})", "prompt"},
      {R"({"id":"r","type":"generate","prompt":"x","messages":[{"role":"user","content":"y"}]})", "prompt"},
      {R"({"id":"r","type":"generate","prompt":"x","prompt_ids":[1]})", "prompt"},
      {R"({"id":"r","type":"generate","prompt_ids":"1 2"})", "prompt_ids"},
      {R"({"id":"r","type":"generate","prompt_ids":[]})", "prompt_ids"},
      {R"({"id":"r","type":"generate","prompt_ids":[-4]})", "prompt_ids"},
      {R"({"id":"r","type":"generate","prompt":["a","b"]})", "prompt"},
      {R"({"id":"r","type":"generate","messages":[{"role":"bot","content":"y"}]})", "messages.[0].role"},
      {R"({"id":"r","type":"generate","prompt":"x","temperature":5})", "temperature"},
      {R"({"id":"r","type":"generate","prompt":"x","top_p":"1"})", "top_p"},
      {R"({"id":"r","type":"generate","prompt":"x","max_tokens":0})", "max_tokens"},
      {R"({"id":"r","type":"generate","prompt":"x","stop":[""]})", "stop"},
      {R"({"id":"r","type":"generate","prompt":"x","stream":"yes"})", "stream"},
      {R"({"id":"r","type":"generate","prompt":"x","seed":"1"})", "seed"},
      {R"({"id":"r","type":"generate","prompt":"x","priority":1.5})", "priority"},
  };
  for (const auto& c : cases) {
    INFO(c.text);
    auto r = rejected(c.text);
    CHECK(r.id_json == "\"r\"");
    CHECK(r.error.status == 400);
    CHECK(r.error.type == "invalid_request_error");
    CHECK(r.error.param == c.param);
  }
}

TEST_CASE("ws frames obey the depth limit and the prompt-length limit") {
  request_limits limits;
  limits.max_json_depth = 2;
  CHECK(generate(R"({"type":"generate","id":1,"prompt_ids":[1]})", limits).spec.prompt_ids.size() == 1);
  auto deep = rejected(R"({"type":"generate","id":1,"prompt_ids":[1],"x":[[1]]})", limits);
  CHECK(deep.error.status == 400);
  CHECK(deep.id_json == "null"); // the frame was never read
  limits = {};
  limits.max_prompt_tokens = 2;
  auto long_prompt = rejected(R"({"type":"generate","id":1,"prompt_ids":[1,2,3]})", limits);
  CHECK(long_prompt.id_json == "1");
  CHECK(long_prompt.error.code == "context_length_exceeded");
}

TEST_CASE("delta_frame parses back with the id, choice index 0, text and token ids") {
  std::vector<token_id> ids{450, 1095, 0};
  auto o = parse(delta_frame("\"req-1\"", "tab\there \"q\" \xc3\xa9", ids));
  CHECK(keys(o) == std::set<std::string>{"type", "id", "index", "text", "token_ids"});
  CHECK(o.at("type").as_string() == "delta");
  CHECK(o.at("id").as_string() == "req-1");
  CHECK(o.at("index").as_int64() == 0);
  CHECK(o.at("text").as_string() == "tab\there \"q\" \xc3\xa9");
  const auto& a = o.at("token_ids").as_array();
  REQUIRE(a.size() == 3);
  CHECK(a[0].as_int64() == 450);
  CHECK(a[1].as_int64() == 1095);
  CHECK(a[2].as_int64() == 0);

  auto empty = parse(delta_frame("7", "", {}));
  CHECK(empty.at("id").as_int64() == 7);
  CHECK(empty.at("text").as_string() == "");
  CHECK(empty.at("token_ids").as_array().empty());
}

TEST_CASE("delta_frame: the choice index always, finish_reason only on a choice's last delta") {
  std::vector<token_id> ids{7};
  std::vector<token_logprob> lps{{7, "x", -0.5f, {}}};
  auto mid = parse(delta_frame("3", "x", ids, lps, {}, "Say: ", 2));
  CHECK(keys(mid) == std::set<std::string>{"type", "id", "index", "text", "token_ids", "logprobs", "prompt_text"});
  CHECK(mid.at("index").as_int64() == 2);
  CHECK(mid.at("prompt_text").as_string() == "Say: ");
  CHECK(mid.at("logprobs").as_array()[0].at("token_id").as_int64() == 7);

  // A choice may end with a delta that has no text and no tokens.
  auto last = parse(delta_frame("3", "", {}, {}, {}, {}, 1, "length"));
  CHECK(keys(last) == std::set<std::string>{"type", "id", "index", "text", "token_ids", "finish_reason"});
  CHECK(last.at("index").as_int64() == 1);
  CHECK(last.at("text").as_string() == "");
  CHECK(last.at("token_ids").as_array().empty());
  CHECK(last.at("finish_reason").as_string() == "length");
}

TEST_CASE("generate: n and best_of are read, bad ones refused naming them") {
  auto g = generate(R"({"type":"generate","id":1,"prompt":"x","n":3,"best_of":5})");
  CHECK(g.spec.params.n == 3);
  CHECK(g.spec.params.best_of == 5);
  auto plain = generate(R"({"type":"generate","id":1,"prompt":"x"})");
  CHECK(plain.spec.params.n == 1);
  CHECK(plain.spec.params.best_of == 0);
  // The WebSocket streams best_of's n best when they are known: no refusal for stream true.
  CHECK(generate(R"({"type":"generate","id":1,"prompt":"x","stream":true,"best_of":4})").spec.params.best_of == 4);
  struct bad_case {
    std::string field, param;
  };
  for (const auto& c : std::vector<bad_case>{{R"("n":0)", "n"},
                                             {R"("n":129)", "n"},
                                             {R"("n":"2")", "n"},
                                             {R"("best_of":1.5)", "best_of"},
                                             {R"("n":4,"best_of":3)", "best_of"}}) {
    INFO(c.field);
    auto r = rejected(R"({"type":"generate","id":"r","prompt":"x",)" + c.field + "}");
    CHECK(r.id_json == "\"r\"");
    CHECK(r.error.param == c.param);
  }
}

TEST_CASE("done_frame carries the engine's reason, usage with totals and cached tokens, and timings") {
  finished f;
  f.id = 11;
  f.reason = "cancelled";
  f.usage.prompt_tokens = 20;
  f.usage.completion_tokens = 5;
  f.usage.cached_tokens = 16;
  f.timings.queue_ms = 0.25;
  f.timings.ttft_ms = 12.5;
  f.timings.tpot_ms = 3.125;
  f.timings.e2e_ms = 25;
  auto o = parse(done_frame("\"req-1\"", f));
  CHECK(keys(o) == std::set<std::string>{"type", "id", "finish_reason", "usage", "timings"});
  CHECK(o.at("type").as_string() == "done");
  CHECK(o.at("id").as_string() == "req-1");
  CHECK(o.at("finish_reason").as_string() == "cancelled");
  const auto& u = o.at("usage").as_object();
  CHECK(keys(u) == std::set<std::string>{"prompt_tokens", "completion_tokens", "total_tokens", "cached_tokens"});
  CHECK(u.at("prompt_tokens").as_int64() == 20);
  CHECK(u.at("completion_tokens").as_int64() == 5);
  CHECK(u.at("total_tokens").as_int64() == 25);
  CHECK(u.at("cached_tokens").as_int64() == 16);
  const auto& t = o.at("timings").as_object();
  CHECK(keys(t) == std::set<std::string>{"queue_ms", "ttft_ms", "tpot_ms", "e2e_ms"});
  CHECK(t.at("queue_ms").to_number<double>() == 0.25);
  CHECK(t.at("ttft_ms").to_number<double>() == 12.5);
  CHECK(t.at("tpot_ms").to_number<double>() == 3.125);
  CHECK(t.at("e2e_ms").to_number<double>() == 25.0);

  f.timings.tpot_ms = std::numeric_limits<double>::quiet_NaN(); // e.g. one output token
  CHECK(parse(done_frame("1", f)).at("timings").as_object().at("tpot_ms").is_null());
}

TEST_CASE("error_frame: the id, or null when unknown, with code and message") {
  auto o = parse(error_frame("\"req-1\"", "prompt_too_long", "the prompt has 9000 tokens"));
  CHECK(keys(o) == std::set<std::string>{"type", "id", "code", "message"});
  CHECK(o.at("type").as_string() == "error");
  CHECK(o.at("id").as_string() == "req-1");
  CHECK(o.at("code").as_string() == "prompt_too_long");
  CHECK(o.at("message").as_string() == "the prompt has 9000 tokens");
  CHECK(parse(error_frame("null", ws_invalid_request, "bad \"json\"")).at("id").is_null());
  CHECK(parse(error_frame("", ws_invalid_request, "x")).at("id").is_null());
}

TEST_CASE("round trip: a client's id comes back identical in delta, done and error frames") {
  for (std::string id : {R"("abc")", R"("\u00e9\n")", "0", "-5", "9007199254740993", R"("")"}) {
    INFO(id);
    auto r = parse_ws_frame(R"({"type":"generate","prompt":"x","id":)" + id + "}", {});
    REQUIRE(std::holds_alternative<ws_generate>(r));
    const auto& g = std::get<ws_generate>(r);
    auto original = json::parse(id);
    CHECK(parse(delta_frame(g.id_json, "t", std::vector<token_id>{1})).at("id") == original);
    CHECK(parse(done_frame(g.id_json, finished{})).at("id") == original);
    CHECK(parse(error_frame(g.id_json, "engine_error", "m")).at("id") == original);
    auto bad = rejected(R"({"type":"generate","prompt":"x","top_k":-9,"id":)" + id + "}");
    CHECK(parse(error_frame(bad.id_json, ws_invalid_request, bad.error.message)).at("id") == original);
  }
}

TEST_CASE("generate: tools, tool_choice and a history of calls are read as on /v1/chat/completions") {
  auto g = generate(R"({"type":"generate","id":1,"messages":[{"role":"user","content":"Hi"},
    {"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]},
    {"role":"tool","tool_call_id":"c1","content":"ok"}],
    "tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}],
    "tool_choice":"required","parallel_tool_calls":false})");
  REQUIRE(g.spec.messages.size() == 3);
  CHECK(g.spec.messages[1].tool_calls == std::vector<tool_call>{{"c1", "f", "{}"}});
  CHECK(g.spec.messages[2].tool_call_id == "c1");
  CHECK(g.spec.tools == std::vector<tool_function>{{"f", "", R"({"type":"object"})"}});
  CHECK(g.spec.choice_of_tool.type == tool_choice::mode::required);
  CHECK_FALSE(g.spec.parallel_tool_calls);
  auto r = rejected(R"({"type":"generate","id":"x","messages":[{"role":"user","content":"Hi"}],"tool_choice":"maybe"})");
  CHECK(r.id_json == "\"x\"");
  CHECK(r.error.param == "tool_choice");
}

TEST_CASE("generate: chat_template_kwargs as on /v1/chat/completions, and only with messages") {
  const std::string chat = R"({"type":"generate","id":"k","messages":[{"role":"user","content":"Hi"}],)";
  CHECK_FALSE(generate(chat + R"("chat_template_kwargs":{"enable_thinking":false}})").spec.enable_thinking);
  CHECK(generate(chat + R"("chat_template_kwargs":{"enable_thinking":true}})").spec.enable_thinking);
  CHECK(generate(chat + R"("stream":true})").spec.enable_thinking);
  auto r = rejected(chat + R"("chat_template_kwargs":{"thinking_budget":5}})");
  CHECK(r.id_json == "\"k\"");
  CHECK(r.error.param == "chat_template_kwargs.thinking_budget");
  CHECK(rejected(chat + R"("chat_template_kwargs":{"enable_thinking":1}})").error.param ==
        "chat_template_kwargs.enable_thinking");
  r = rejected(R"({"type":"generate","id":"k","prompt":"Hi","chat_template_kwargs":{"enable_thinking":false}})");
  CHECK(r.error.param == "chat_template_kwargs");
  CHECK(r.error.message.find("only taken with messages") != std::string::npos);
}

TEST_CASE("delta_frame carries tool calls numbered within the choice, and finish_reason tool_calls") {
  const std::vector<tool_call> calls{{"call_x", "f", R"({"a": 1})"}, {"call_y", "g", "{}"}};
  auto o = parse(delta_frame("3", "", {}, {}, {}, {}, 0, "tool_calls", calls, 2));
  CHECK(keys(o) == std::set<std::string>{"type", "id", "index", "text", "token_ids", "tool_calls", "finish_reason"});
  CHECK(o.at("tool_calls") == json::parse(R"([{"index":2,"id":"call_x","type":"function",
      "function":{"name":"f","arguments":"{\"a\": 1}"}},{"index":3,"id":"call_y","type":"function",
      "function":{"name":"g","arguments":"{}"}}])"));
  CHECK(o.at("finish_reason").as_string() == "tool_calls");
}
