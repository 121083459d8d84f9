// The OpenAI request parsers: every field lands in the request_spec, defaults
// are OpenAI's, and each bad input gets the exact status, type and param.
#include <doctest/doctest.h>

#include <string>
#include <utility>
#include <vector>

#include "net/openai_requests.hpp"

using namespace troupe;
using namespace troupe::net;

namespace {
completion_request completion(const std::string& body, const request_limits& limits = {}) {
  auto r = parse_completion_request(body, limits);
  if (auto* e = std::get_if<api_error>(&r))
    FAIL_CHECK("unexpected error: " << e->message);
  REQUIRE(std::holds_alternative<completion_request>(r));
  return std::get<completion_request>(std::move(r));
}

chat_request chat(const std::string& body, const request_limits& limits = {}) {
  auto r = parse_chat_request(body, limits);
  if (auto* e = std::get_if<api_error>(&r))
    FAIL_CHECK("unexpected error: " << e->message);
  REQUIRE(std::holds_alternative<chat_request>(r));
  return std::get<chat_request>(std::move(r));
}

api_error completion_error(const std::string& body, const request_limits& limits = {}) {
  auto r = parse_completion_request(body, limits);
  REQUIRE_MESSAGE(std::holds_alternative<api_error>(r), "accepted: " << body);
  return std::get<api_error>(std::move(r));
}

api_error chat_error(const std::string& body, const request_limits& limits = {}) {
  auto r = parse_chat_request(body, limits);
  REQUIRE_MESSAGE(std::holds_alternative<api_error>(r), "accepted: " << body);
  return std::get<api_error>(std::move(r));
}

// A completions body with one more field: `extra` is `"name": value`.
std::string with(const std::string& extra) {
  return R"({"model":"m","prompt":"hi",)" + extra + "}";
}
std::string chat_with(const std::string& extra) {
  return R"({"model":"m","messages":[{"role":"user","content":"hi"}],)" + extra + "}";
}

void check_400(const api_error& e, const std::string& param) {
  CHECK(e.status == 400);
  CHECK(e.type == "invalid_request_error");
  CHECK(e.param == param);
  CHECK_FALSE(e.message.empty());
}

std::string nested_arrays(int depth) {
  return std::string(depth, '[') + std::string(depth, ']');
}
} // namespace

TEST_CASE("completions: every field is parsed into the request") {
  auto r = completion(R"({
    "model": "stories", "prompt": "Once upon a time", "max_tokens": 40, "temperature": 0.7, "top_p": 0.9,
    "n": 1, "stream": true, "stream_options": {"include_usage": true}, "stop": ["\n", "The end"],
    "seed": 1234, "frequency_penalty": 0.5, "presence_penalty": -0.5, "logprobs": 3, "echo": true,
    "user": "alice", "top_k": 50, "min_p": 0.05, "repetition_penalty": 1.1, "ignore_eos": true,
    "stop_token_ids": [2, 13], "priority": -3, "add_special_tokens": false, "best_of": 1})");
  CHECK(r.model == "stories");
  CHECK(r.spec.prompt == "Once upon a time");
  CHECK(r.spec.prompt_ids.empty());
  CHECK_FALSE(r.spec.add_special_tokens);
  CHECK(r.stream);
  CHECK(r.include_usage);
  CHECK(r.echo);
  CHECK(r.logprobs == 3);
  CHECK(r.spec.priority == -3);
  const auto& p = r.spec.params;
  CHECK(p.max_tokens == 40);
  CHECK(p.temperature == doctest::Approx(0.7));
  CHECK(p.top_p == doctest::Approx(0.9));
  CHECK(p.top_k == 50);
  CHECK(p.min_p == doctest::Approx(0.05));
  REQUIRE(p.seed.has_value());
  CHECK(*p.seed == 1234u);
  CHECK(p.repetition_penalty == doctest::Approx(1.1));
  CHECK(p.frequency_penalty == doctest::Approx(0.5));
  CHECK(p.presence_penalty == doctest::Approx(-0.5));
  CHECK(p.stop == std::vector<std::string>{"\n", "The end"});
  CHECK(p.stop_token_ids == std::vector<token_id>{2, 13});
  CHECK(p.ignore_eos);
  CHECK(p.n == 1);
  CHECK(p.best_of == 1);
}

TEST_CASE("completions: OpenAI's defaults when fields are absent or null") {
  for (auto body : {std::string(R"({"prompt":"hi"})"),
                    with(R"("max_tokens":null,"temperature":null,"top_p":null,"stop":null,"seed":null,)"
                         R"("stream":null,"logprobs":null,"n":null,"stream_options":null,"user":null)")}) {
    INFO(body);
    auto r = completion(body);
    CHECK(r.spec.params.max_tokens == 16);
    CHECK(r.spec.params.temperature == 1.0f);
    CHECK(r.spec.params.top_p == 1.0f);
    CHECK(r.spec.params.top_k == 0);
    CHECK_FALSE(r.spec.params.seed.has_value());
    CHECK(r.spec.params.stop.empty());
    CHECK_FALSE(r.spec.params.ignore_eos);
    CHECK(r.spec.add_special_tokens);
    CHECK(r.spec.priority == 0);
    CHECK_FALSE(r.stream);
    CHECK_FALSE(r.echo);
    CHECK_FALSE(r.include_usage);
    CHECK(r.logprobs == -1);
    CHECK(r.spec.params.n == 1);
    CHECK(r.spec.params.best_of == 0);
    CHECK(r.spec.params.choices() == 1);
  }
  CHECK(completion(R"({"prompt":"hi"})").model.empty());
}

TEST_CASE("completions: a single stop string, temperature 0 and whole-number doubles") {
  auto r = completion(with(R"("stop":"###","temperature":0,"max_tokens":32.0,"logprobs":0)"));
  CHECK(r.spec.params.stop == std::vector<std::string>{"###"});
  CHECK(r.spec.params.greedy());
  CHECK(r.spec.params.max_tokens == 32);
  CHECK(r.logprobs == 0);
}

TEST_CASE("completions: seeds keep all 64 bits, negative ones their two's complement") {
  CHECK(*completion(with(R"("seed":18446744073709551615)")).spec.params.seed == 18446744073709551615ull);
  CHECK(*completion(with(R"("seed":-1)")).spec.params.seed == 18446744073709551615ull);
  check_400(completion_error(with(R"("seed":1e30)")), "seed");
}

TEST_CASE("completions: the prompt as token ids or a one-element batch") {
  auto ids = completion(R"({"prompt":[1, 15043, 29892]})");
  CHECK(ids.spec.prompt.empty());
  CHECK(ids.spec.prompt_ids == std::vector<token_id>{1, 15043, 29892});

  auto one_text = completion(R"({"prompt":["only one"]})");
  CHECK(one_text.spec.prompt == "only one");
  CHECK(one_text.spec.prompt_ids.empty());

  auto one_ids = completion(R"({"prompt":[[7, 8]]})");
  CHECK(one_ids.spec.prompt_ids == std::vector<token_id>{7, 8});

  CHECK(completion(R"({"prompt":""})").spec.prompt.empty());
}

TEST_CASE("completions: prompt batches and bad token ids are refused on prompt") {
  auto batch = completion_error(R"({"prompt":["a","b"]})");
  check_400(batch, "prompt");
  CHECK(batch.message.find("batch") != std::string::npos);
  check_400(completion_error(R"({"prompt":[[1],[2]]})"), "prompt");
  for (auto body : {R"({"prompt":[]})", R"({"prompt":[[]]})", R"({"prompt":[1,"a"]})", R"({"prompt":[1,2.5]})",
                    R"({"prompt":[-1]})", R"({"prompt":[2147483648]})", R"({"prompt":[{"a":1}]})", R"({"prompt":5})",
                    R"({"prompt":{"text":"x"}})", R"({"prompt":[true]})"}) {
    INFO(body);
    check_400(completion_error(body), "prompt");
  }
}

TEST_CASE("completions: token-id prompts longer than max_prompt_tokens are context_length_exceeded") {
  request_limits limits;
  limits.max_prompt_tokens = 4;
  CHECK(completion(R"({"prompt":[1,2,3,4]})", limits).spec.prompt_ids.size() == 4);
  for (auto body : {R"({"prompt":[1,2,3,4,5]})", R"({"prompt":[[1,2,3,4,5]]})"}) {
    auto e = completion_error(body, limits);
    check_400(e, "prompt");
    CHECK(e.code == "context_length_exceeded");
  }
}

TEST_CASE("completions: a missing or null prompt is a 400 on prompt") {
  check_400(completion_error(R"({"model":"m"})"), "prompt");
  check_400(completion_error(R"({"model":"m","prompt":null})"), "prompt");
}

TEST_CASE("completions: unknown fields are ignored, whatever their type") {
  auto r = completion(with(R"("frobnicate":{"a":[1,2,{"b":null}]},"metadata":"x","suffix":"","logit_bias":{})"));
  CHECK(r.spec.prompt == "hi");
}

TEST_CASE("completions: a known field of the wrong type is a 400 naming it") {
  std::vector<std::pair<std::string, std::string>> cases = {
      {R"("model":5)", "model"},
      {R"("max_tokens":"16")", "max_tokens"},
      {R"("max_tokens":16.5)", "max_tokens"},
      {R"("temperature":"hot")", "temperature"},
      {R"("top_p":true)", "top_p"},
      {R"("n":"1")", "n"},
      {R"("n":1.5)", "n"},
      {R"("n":[2])", "n"},
      {R"("best_of":"1")", "best_of"},
      {R"("best_of":2.5)", "best_of"},
      {R"("best_of":true)", "best_of"},
      {R"("stream":"yes")", "stream"},
      {R"("stream":1)", "stream"},
      {R"("stream":true,"stream_options":1)", "stream_options"},
      {R"("stream":true,"stream_options":{"include_usage":"yes"})", "stream_options.include_usage"},
      {R"("stop":5)", "stop"},
      {R"("stop":[1])", "stop"},
      {R"("stop":{"s":"x"})", "stop"},
      {R"("seed":1.5)", "seed"},
      {R"("seed":"42")", "seed"},
      {R"("frequency_penalty":"0")", "frequency_penalty"},
      {R"("presence_penalty":[])", "presence_penalty"},
      {R"("logprobs":true)", "logprobs"},
      {R"("echo":1)", "echo"},
      {R"("user":5)", "user"},
      {R"("suffix":5)", "suffix"},
      {R"("logit_bias":[1])", "logit_bias"},
      {R"("logit_bias":{"5":"high"})", "logit_bias"},
      {R"("logit_bias":{"5":null})", "logit_bias"},
      {R"("min_tokens":"3")", "min_tokens"},
      {R"("min_tokens":1.5)", "min_tokens"},
      {R"("top_k":1.5)", "top_k"},
      {R"("top_k":"5")", "top_k"},
      {R"("min_p":"x")", "min_p"},
      {R"("repetition_penalty":false)", "repetition_penalty"},
      {R"("ignore_eos":0)", "ignore_eos"},
      {R"("stop_token_ids":"1")", "stop_token_ids"},
      {R"("stop_token_ids":["a"])", "stop_token_ids"},
      {R"("priority":"high")", "priority"},
      {R"("add_special_tokens":"no")", "add_special_tokens"},
  };
  for (const auto& [field, param] : cases) {
    INFO(field);
    check_400(completion_error(with(field)), param);
  }
}

TEST_CASE("completions: values out of range are a 400 naming the field") {
  std::vector<std::pair<std::string, std::string>> cases = {
      {R"("temperature":-0.1)", "temperature"},
      {R"("temperature":2.01)", "temperature"},
      {R"("temperature":1e400)", "temperature"},
      {R"("top_p":0)", "top_p"},
      {R"("top_p":1.5)", "top_p"},
      {R"("top_p":1e-50)", "top_p"}, // a float zero: caught by sampling_params::validate
      {R"("max_tokens":0)", "max_tokens"},
      {R"("max_tokens":-5)", "max_tokens"},
      {R"("max_tokens":4097)", "max_tokens"},
      {R"("max_tokens":1e20)", "max_tokens"},
      {R"("max_tokens":99999999999999999999)", "max_tokens"},
      {R"("n":0)", "n"},
      {R"("n":-1)", "n"},
      {R"("n":129)", "n"},
      {R"("n":4294967296)", "n"},
      {R"("best_of":-1)", "best_of"},
      {R"("best_of":129)", "best_of"},
      {R"("n":3,"best_of":2)", "best_of"}, // best_of below n
      {R"("stop":["a","b","c","d","e","f","g","h","i"])", "stop"},
      {R"("stop":"")", "stop"},
      {R"("stop":["ok",""])", "stop"},
      {R"("logprobs":21)", "logprobs"},
      {R"("logprobs":-1)", "logprobs"},
      {R"("top_k":-2)", "top_k"},
      {R"("min_p":1.5)", "min_p"},
      {R"("min_p":-0.1)", "min_p"},
      {R"("repetition_penalty":0)", "repetition_penalty"},
      {R"("frequency_penalty":2.5)", "frequency_penalty"},
      {R"("presence_penalty":-3)", "presence_penalty"},
      {R"("stop_token_ids":[-1])", "stop_token_ids"},
      {R"("priority":4294967296)", "priority"},
      {R"("stream_options":{"include_usage":true})", "stream_options"},
      {R"("stream":false,"stream_options":{})", "stream_options"},
      {R"("logit_bias":{"5":100.5})", "logit_bias"},
      {R"("logit_bias":{"5":-101})", "logit_bias"},
      {R"("logit_bias":{"5":1e400})", "logit_bias"},
      {R"("logit_bias":{"-1":1})", "logit_bias"},
      {R"("logit_bias":{"abc":1})", "logit_bias"},
      {R"("logit_bias":{"5x":1})", "logit_bias"},
      {R"("logit_bias":{"":1})", "logit_bias"},
      {R"("logit_bias":{"4294967296":1})", "logit_bias"},
      {R"("logit_bias":{"7":1,"07":2})", "logit_bias"}, // the same token twice
      {R"("min_tokens":-1)", "min_tokens"},
      {R"("min_tokens":17)", "min_tokens"}, // above max_tokens (16 by default)
      {R"("suffix":" and then")", "suffix"},
  };
  for (const auto& [field, param] : cases) {
    INFO(field);
    check_400(completion_error(with(field)), param);
  }
  check_400(completion_error(with(R"("stop":")" + std::string(257, 'x') + "\"")), "stop");
  CHECK(completion(with(R"("stop":")" + std::string(256, 'x') + "\"")).spec.params.stop[0].size() == 256);
}

TEST_CASE("completions: n and best_of are read into the sampling parameters") {
  auto three = completion(with(R"("n":3)"));
  CHECK(three.spec.params.n == 3);
  CHECK(three.spec.params.best_of == 0);
  CHECK(three.spec.params.choices() == 3);
  auto best = completion(with(R"("n":2,"best_of":5)"));
  CHECK(best.spec.params.n == 2);
  CHECK(best.spec.params.best_of == 5);
  CHECK(best.spec.params.choices() == 5);
  auto most = completion(with(R"("n":128,"best_of":128.0)"));
  CHECK(most.spec.params.n == 128);
  CHECK(most.spec.params.best_of == 128);
  CHECK(completion(with(R"("best_of":4)")).spec.params.choices() == 4); // n defaults to 1
  CHECK(completion(with(R"("n":2,"best_of":null)")).spec.params.best_of == 0);
}

TEST_CASE("completions and chat: best_of above n cannot be streamed") {
  auto e = completion_error(with(R"("stream":true,"n":2,"best_of":3)"));
  check_400(e, "best_of");
  CHECK(e.message.find("cannot be streamed") != std::string::npos);
  check_400(completion_error(with(R"("stream":true,"best_of":2)")), "best_of");
  check_400(chat_error(chat_with(R"("stream":true,"best_of":2)")), "best_of");
  // Streaming n choices is fine, and so is best_of equal to n; best_of above n is fine unstreamed.
  auto streamed = completion(with(R"("stream":true,"n":3,"best_of":3)"));
  CHECK(streamed.stream);
  CHECK(streamed.spec.params.n == 3);
  CHECK(streamed.spec.params.best_of == 3);
  CHECK(completion(with(R"("stream":false,"n":2,"best_of":3)")).spec.params.best_of == 3);
  CHECK(chat(chat_with(R"("stream":true,"n":4)")).spec.params.n == 4);
}

TEST_CASE("completions: logit_bias and min_tokens are read into the sampling parameters") {
  auto r = completion(with(R"("logit_bias":{"50256":-100,"7":2.5,"0":100},"min_tokens":4,"max_tokens":10)"));
  const auto& p = r.spec.params;
  REQUIRE(p.logit_bias.size() == 3);
  auto bias_of = [&](troupe::token_id id) {
    for (const auto& b : p.logit_bias)
      if (b.id == id)
        return b.bias;
    FAIL("no bias for " << id);
    return 0.0f;
  };
  CHECK(bias_of(50256) == -100.0f);
  CHECK(bias_of(7) == 2.5f);
  CHECK(bias_of(0) == 100.0f);
  CHECK(p.min_tokens == 4);
  CHECK(completion(with(R"("logit_bias":{})")).spec.params.logit_bias.empty());
  CHECK(completion(with(R"("min_tokens":16)")).spec.params.min_tokens == 16);
  // OpenAI's limit: 300 entries.
  std::string many = R"("logit_bias":{)";
  for (int i = 0; i < 301; ++i)
    many += (i ? "," : "") + ("\"" + std::to_string(i) + "\":1");
  check_400(completion_error(with(many + "}")), "logit_bias");
  many = R"("logit_bias":{)";
  for (int i = 0; i < 300; ++i)
    many += (i ? "," : "") + ("\"" + std::to_string(i) + "\":1");
  CHECK(completion(with(many + "}")).spec.params.logit_bias.size() == 300);
}

TEST_CASE("completions: the limits bound max_tokens, stop strings and logprobs") {
  request_limits limits;
  limits.max_tokens_limit = 100;
  limits.max_stop_strings = 2;
  limits.max_stop_length = 3;
  limits.max_logprobs = 5;
  CHECK(completion(with(R"("max_tokens":100,"stop":["abc","d"],"logprobs":5)"), limits).spec.params.max_tokens == 100);
  check_400(completion_error(with(R"("max_tokens":101)"), limits), "max_tokens");
  check_400(completion_error(with(R"("stop":["a","b","c"])"), limits), "stop");
  check_400(completion_error(with(R"("stop":"abcd")"), limits), "stop");
  check_400(completion_error(with(R"("logprobs":6)"), limits), "logprobs");
}

TEST_CASE("completions: malformed, non-object and invalid UTF-8 bodies are a 400 without param") {
  for (std::string body :
       {"", "{", "{\"prompt\":\"hi\"", "{\"prompt\":\"hi\"} trailing", "{'prompt':'hi'}", "{\"prompt\":\"hi\",}", "[]",
        "\"prompt\"", "42", "null", "[{\"prompt\":\"hi\"}]", "{\"prompt\":\"\xff\xfe\"}"}) {
    INFO(body);
    check_400(completion_error(body), "");
  }
}

TEST_CASE("completions: JSON nested deeper than max_json_depth is refused") {
  request_limits limits;
  limits.max_json_depth = 4;
  // The body object is depth 1, so an unknown field may hold 3 more levels.
  CHECK(completion(with(R"("x":)" + nested_arrays(3)), limits).spec.prompt == "hi");
  auto e = completion_error(with(R"("x":)" + nested_arrays(4)), limits);
  check_400(e, "");
  CHECK(e.message.find("deeper") != std::string::npos);
  // The default limit (32) stops a deep-nesting bomb.
  check_400(completion_error(with(R"("x":)" + nested_arrays(100000))), "");
  check_400(completion_error(with(R"("x":)" + nested_arrays(32))), "");
  CHECK(completion(with(R"("x":)" + nested_arrays(31))).spec.prompt == "hi");
}

TEST_CASE("chat: every field is parsed into the request") {
  auto r = chat(R"({
    "model": "stories",
    "messages": [
      {"role": "system", "content": "Be brief."},
      {"role": "user", "content": [{"type": "text", "text": "Hello"}, {"type": "text", "text": "there"}], "name": "bob"},
      {"role": "assistant", "content": "Hi!"}
    ],
    "max_tokens": 99, "max_completion_tokens": 64, "temperature": 0.2, "top_p": 0.5, "n": 1, "stream": true,
    "stream_options": {"include_usage": true}, "stop": "END", "seed": 7, "frequency_penalty": 1,
    "presence_penalty": 1.5, "logprobs": true, "top_logprobs": 4, "user": "u", "top_k": 8, "min_p": 0.1,
    "repetition_penalty": 1.3, "ignore_eos": true, "stop_token_ids": [0], "priority": 2})");
  CHECK(r.model == "stories");
  const auto& m = r.spec.messages;
  REQUIRE(m.size() == 3);
  CHECK((m[0].role == "system" && m[0].content == "Be brief."));
  CHECK((m[1].role == "user" && m[1].content == "Hello\nthere"));
  CHECK((m[2].role == "assistant" && m[2].content == "Hi!"));
  CHECK(r.spec.tools.empty());
  CHECK(r.spec.choice_of_tool.type == tool_choice::mode::automatic);
  CHECK(r.stream);
  CHECK(r.include_usage);
  CHECK(r.top_logprobs == 4);
  CHECK(r.spec.priority == 2);
  CHECK_FALSE(r.spec.add_special_tokens);
  CHECK(r.spec.prompt.empty());
  const auto& p = r.spec.params;
  CHECK(p.max_tokens == 64); // max_completion_tokens wins over max_tokens
  CHECK(p.temperature == doctest::Approx(0.2));
  CHECK(p.top_p == doctest::Approx(0.5));
  CHECK(p.stop == std::vector<std::string>{"END"});
  CHECK(*p.seed == 7u);
  CHECK(p.frequency_penalty == doctest::Approx(1.0));
  CHECK(p.presence_penalty == doctest::Approx(1.5));
  CHECK(p.top_k == 8);
  CHECK(p.min_p == doctest::Approx(0.1));
  CHECK(p.repetition_penalty == doctest::Approx(1.3));
  CHECK(p.ignore_eos);
  CHECK(p.stop_token_ids == std::vector<token_id>{0});
}

TEST_CASE("chat: defaults, max_tokens alone, and logprobs without top_logprobs") {
  request_limits limits;
  limits.max_tokens_limit = 777;
  auto r = chat(R"({"messages":[{"role":"user","content":"hi"}]})", limits);
  CHECK(r.spec.params.max_tokens == 777); // "until the context is full"
  CHECK(r.top_logprobs == -1);
  CHECK_FALSE(r.stream);
  CHECK_FALSE(r.include_usage);
  CHECK(r.model.empty());
  CHECK(chat(chat_with(R"("max_tokens":12)")).spec.params.max_tokens == 12);
  CHECK(chat(chat_with(R"("logprobs":true)")).top_logprobs == 0);
  CHECK(chat(chat_with(R"("logprobs":false)")).top_logprobs == -1);
  CHECK(chat(chat_with(R"("add_special_tokens":true)")).spec.add_special_tokens);
  CHECK(r.spec.params.n == 1);
  CHECK(r.spec.params.best_of == 0);
}

TEST_CASE("chat: n and best_of are read into the sampling parameters") {
  auto r = chat(chat_with(R"("n":3,"logprobs":true,"top_logprobs":2)"));
  CHECK(r.spec.params.n == 3);
  CHECK(r.spec.params.best_of == 0);
  CHECK(r.top_logprobs == 2);
  auto best = chat(chat_with(R"("n":2,"best_of":6)"));
  CHECK(best.spec.params.n == 2);
  CHECK(best.spec.params.best_of == 6);
}

TEST_CASE("chat: bad messages are a 400 naming the message and field") {
  std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"model":"m"})", "messages"},
      {R"({"messages":null})", "messages"},
      {R"({"messages":"hi"})", "messages"},
      {R"({"messages":[]})", "messages"},
      {R"({"messages":["hi"]})", "messages.[0]"},
      {R"({"messages":[{"content":"hi"}]})", "messages.[0].role"},
      {R"({"messages":[{"role":5,"content":"hi"}]})", "messages.[0].role"},
      // A tool message answers a call: its id is required.
      {R"({"messages":[{"role":"user","content":"a"},{"role":"tool","content":"b"}]})", "messages.[1].tool_call_id"},
      {R"({"messages":[{"role":"wizard","content":"hi"}]})", "messages.[0].role"},
      {R"({"messages":[{"role":"user"}]})", "messages.[0].content"},
      {R"({"messages":[{"role":"assistant","content":null}]})", "messages.[0].content"},
      {R"({"messages":[{"role":"user","content":5}]})", "messages.[0].content"},
      {R"({"messages":[{"role":"user","content":[]}]})", "messages.[0].content"},
      {R"({"messages":[{"role":"user","content":["hi"]}]})", "messages.[0].content.[0]"},
      {R"({"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]})",
       "messages.[0].content.[0].type"},
      {R"({"messages":[{"role":"user","content":[{"text":"hi"}]}]})", "messages.[0].content.[0].type"},
      {R"({"messages":[{"role":"user","content":[{"type":"text"}]}]})", "messages.[0].content.[0].text"},
      {R"({"messages":[{"role":"user","content":[{"type":"text","text":1}]}]})", "messages.[0].content.[0].text"},
  };
  for (const auto& [body, param] : cases) {
    INFO(body);
    check_400(chat_error(body), param);
  }
}

TEST_CASE("chat: field errors are a 400 naming the field") {
  std::vector<std::pair<std::string, std::string>> cases = {
      {R"("logprobs":1)", "logprobs"},
      {R"("top_logprobs":3)", "top_logprobs"}, // needs logprobs: true
      {R"("logprobs":true,"top_logprobs":21)", "top_logprobs"},
      {R"("logprobs":true,"top_logprobs":"3")", "top_logprobs"},
      {R"("max_completion_tokens":0)", "max_completion_tokens"},
      {R"("max_completion_tokens":5000)", "max_completion_tokens"},
      {R"("max_completion_tokens":"5")", "max_completion_tokens"},
      {R"("max_tokens":0,"max_completion_tokens":5)", "max_tokens"},
      {R"("n":0)", "n"},
      {R"("n":200)", "n"},
      {R"("n":"2")", "n"},
      {R"("n":2,"best_of":1)", "best_of"},
      {R"("temperature":3)", "temperature"},
      {R"("stream_options":{"include_usage":true})", "stream_options"},
      {R"("stop":[1,2])", "stop"},
  };
  for (const auto& [field, param] : cases) {
    INFO(field);
    check_400(chat_error(chat_with(field)), param);
  }
}

TEST_CASE("chat: malformed and too-deep bodies are a 400") {
  check_400(chat_error("{\"messages\":"), "");
  check_400(chat_error("[1]"), "");
  request_limits limits;
  limits.max_json_depth = 3;
  // body (1) > messages (2) > message (3) > content parts (4): too deep for 3.
  check_400(chat_error(R"({"messages":[{"role":"user","content":[{"type":"text","text":"x"}]}]})", limits), "");
  CHECK(chat(R"({"messages":[{"role":"user","content":"x"}]})", limits).spec.messages.size() == 1);
}

TEST_CASE("logprobs, echo, prompt_logprobs and num_speculative_tokens land in the request") {
  auto c = completion(R"({"prompt":"hi","logprobs":3,"echo":true})");
  CHECK(c.spec.params.logprobs == 3);
  CHECK(c.spec.params.prompt_logprobs == 3); // echo with logprobs scores the prompt too
  CHECK(c.spec.echo);
  auto plain = completion(R"({"prompt":"hi","logprobs":0})");
  CHECK(plain.spec.params.prompt_logprobs == -1);
  auto extra = completion(R"({"prompt":"hi","prompt_logprobs":2,"num_speculative_tokens":0})");
  CHECK(extra.spec.params.prompt_logprobs == 2);
  CHECK(extra.spec.num_speculative_tokens == 0);
  CHECK(completion(R"({"prompt":"hi"})").spec.num_speculative_tokens == -1); // the engine's setting
  auto ch = chat(R"({"messages":[{"role":"user","content":"x"}],"logprobs":true,"top_logprobs":4})");
  CHECK(ch.spec.params.logprobs == 4);
  auto e = completion_error(R"({"prompt":"hi","num_speculative_tokens":17})");
  CHECK(e.status == 400);
  CHECK(e.param == "num_speculative_tokens");
  auto lp = completion_error(R"({"prompt":"hi","logprobs":21})");
  CHECK(lp.param == "logprobs");
}

TEST_CASE("chat: tools, tool_choice, parallel_tool_calls and a history of calls and results") {
  auto r = chat(R"({"messages":[
      {"role":"user","content":"Weather?"},
      {"role":"assistant","content":null,"tool_calls":[{"id":"call_9","type":"function",
        "function":{"name":"get_weather","arguments":"{\"city\":\"Oslo\"}"}}]},
      {"role":"tool","tool_call_id":"call_9","content":"-3"}],
    "tools":[{"type":"function","function":{"name":"get_weather","description":"Now",
      "parameters":{"type":"object","properties":{"city":{"type":"string"}}},"strict":true}},
      {"type":"function","function":{"name":"no-params"}}],
    "tool_choice":{"type":"function","function":{"name":"get_weather"}},
    "parallel_tool_calls":false})");
  const auto& m = r.spec.messages;
  REQUIRE(m.size() == 3);
  CHECK(m[1].content.empty());
  REQUIRE(m[1].tool_calls.size() == 1);
  CHECK(m[1].tool_calls[0] == tool_call{"call_9", "get_weather", R"({"city":"Oslo"})"});
  CHECK(m[2].role == "tool");
  CHECK(m[2].tool_call_id == "call_9");
  CHECK(m[2].content == "-3");
  REQUIRE(r.spec.tools.size() == 2);
  CHECK(r.spec.tools[0] ==
        tool_function{"get_weather", "Now", R"({"type":"object","properties":{"city":{"type":"string"}}})"});
  CHECK(r.spec.tools[1].parameters == tool_function{}.parameters); // none given: an object without properties
  CHECK(r.spec.choice_of_tool == tool_choice{tool_choice::mode::function, "get_weather"});
  CHECK_FALSE(r.spec.parallel_tool_calls);
  for (const auto& [text, mode] : std::vector<std::pair<std::string, tool_choice::mode>>{
           {"none", tool_choice::mode::none}, {"auto", tool_choice::mode::automatic},
           {"required", tool_choice::mode::required}})
    CHECK(chat(chat_with(R"("tool_choice":")" + text + "\"")).spec.choice_of_tool.type == mode);
}

TEST_CASE("chat: chat_template_kwargs.enable_thinking is read, other keys and types are a 400 naming them") {
  CHECK(chat(chat_with(R"("chat_template_kwargs":{"enable_thinking":false})")).spec.enable_thinking == false);
  CHECK(chat(chat_with(R"("chat_template_kwargs":{"enable_thinking":true})")).spec.enable_thinking);
  // Absent, null, or an empty object: the template's default, thinking on.
  CHECK(chat(chat_with(R"("temperature":1)")).spec.enable_thinking);
  CHECK(chat(chat_with(R"("chat_template_kwargs":null)")).spec.enable_thinking);
  CHECK(chat(chat_with(R"("chat_template_kwargs":{})")).spec.enable_thinking);
  CHECK(chat(chat_with(R"("chat_template_kwargs":{"enable_thinking":null})")).spec.enable_thinking);
  // Only vLLM's form: a top-level enable_thinking is an unknown field, ignored.
  CHECK(chat(chat_with(R"("enable_thinking":false)")).spec.enable_thinking);

  auto e = chat_error(chat_with(R"("chat_template_kwargs":{"enable_thinking":false,"add_vision_id":true})"));
  check_400(e, "chat_template_kwargs.add_vision_id");
  CHECK(e.message.find("'chat_template_kwargs.add_vision_id' is not supported") != std::string::npos);
  check_400(chat_error(chat_with(R"("chat_template_kwargs":{"enable_thinking":"false"})")),
            "chat_template_kwargs.enable_thinking");
  check_400(chat_error(chat_with(R"("chat_template_kwargs":{"enable_thinking":0})")),
            "chat_template_kwargs.enable_thinking");
  check_400(chat_error(chat_with(R"("chat_template_kwargs":[])")), "chat_template_kwargs");
  check_400(chat_error(chat_with(R"("chat_template_kwargs":"enable_thinking=false")")), "chat_template_kwargs");
}

TEST_CASE("chat: bad tools, tool_choice and tool_calls are a 400 naming the field") {
  const std::string weather = R"({"type":"function","function":{"name":"w"}})";
  std::vector<std::pair<std::string, std::string>> cases = {
      {R"("tools":{})", "tools"},
      {R"("tools":[5])", "tools.[0]"},
      {R"("tools":[{"function":{"name":"w"}}])", "tools.[0].type"},
      {R"("tools":[{"type":"code_interpreter"}])", "tools.[0].type"},
      {R"("tools":[{"type":"function"}])", "tools.[0].function"},
      {R"("tools":[{"type":"function","function":{}}])", "tools.[0].function.name"},
      {R"("tools":[{"type":"function","function":{"name":"has space"}}])", "tools.[0].function.name"},
      {R"("tools":[{"type":"function","function":{"name":")" + std::string(65, 'x') + R"("}}])",
       "tools.[0].function.name"},
      {R"("tools":[{"type":"function","function":{"name":"w","parameters":"{}"}}])", "tools.[0].function.parameters"},
      {R"("tools":[{"type":"function","function":{"name":"w","description":3}}])", "tools.[0].function.description"},
      {R"("tools":[{"type":"function","function":{"name":"w","strict":"yes"}}])", "tools.[0].function.strict"},
      {R"("tool_choice":"any")", "tool_choice"},
      {R"("tool_choice":5)", "tool_choice"},
      {R"("tool_choice":{"type":"function"})", "tool_choice.function"},
      {R"("tool_choice":{"type":"function","function":{"name":""}})", "tool_choice.function.name"},
      {R"("parallel_tool_calls":"no")", "parallel_tool_calls"},
  };
  for (const auto& [extra, param] : cases) {
    INFO(extra);
    check_400(chat_error(chat_with(extra)), param);
  }
  std::string many = R"("tools":[)";
  for (int i = 0; i <= max_tools; ++i)
    many += (i ? "," : "") + weather;
  check_400(chat_error(chat_with(many + "]")), "tools");
  const std::vector<std::pair<std::string, std::string>> messages = {
      {R"({"role":"user","content":"a","tool_calls":[]})", "messages.[0].tool_calls"},
      {R"({"role":"assistant","tool_calls":{}})", "messages.[0].tool_calls"},
      {R"({"role":"assistant","tool_calls":[{"type":"function","function":{"name":"w"}}]})",
       "messages.[0].tool_calls.[0].function.arguments"},
      {R"({"role":"assistant","tool_calls":[{"type":"function","function":{"name":"w","arguments":"[1]"}}]})",
       "messages.[0].tool_calls.[0].function.arguments"},
      {R"({"role":"assistant","tool_calls":[{"type":"function","function":{"name":"w","arguments":{}}}]})",
       "messages.[0].tool_calls.[0].function.arguments"},
      {R"({"role":"assistant","tool_calls":[{"type":"other"}]})", "messages.[0].tool_calls.[0].type"},
      {R"({"role":"assistant","content":null,"tool_calls":[]})", "messages.[0].content"},
      {R"({"role":"tool","tool_call_id":5,"content":"x"})", "messages.[0].tool_call_id"},
  };
  for (const auto& [message, param] : messages) {
    INFO(message);
    check_400(chat_error(R"({"messages":[)" + message + "]}"), param);
  }
}
