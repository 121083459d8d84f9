// Chat template options through troupe's server: chat_template_kwargs.enable_thinking reaches
// the prompt of a model whose template takes Qwen3's switch (HTTP and WebSocket), changes
// nothing for one whose template does not, and bad kwargs are 400s naming the key while the
// server keeps serving.
#include <doctest/doctest.h>

#include <filesystem>
#include <string>

#include "tests/support/served_engine.hpp"
#include "tests/support/temp_dir.hpp"

using namespace troupe;
using namespace troupe::testing;

namespace {

// Qwen3's generation prompt with its thinking switch; the rest is ChatML.
constexpr std::string_view qwen3_template =
    R"({%- for m in messages %}{{- '<|im_start|>' + m.role + '\n' + m.content + '<|im_end|>' + '\n' }}{%- endfor %})"
    R"({%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }})"
    R"({%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\n\n</think>\n\n' }}{%- endif %})"
    R"({%- endif %})";

// stories260k's files in a temporary folder with a chat_template.jinja of our choosing. Its
// tokenizer has no ChatML tokens, so the markers are spelt out in ordinary tokens: the prompt's
// length still tells which text was rendered.
struct templated_stories {
  temp_dir dir{"troupe_chat_template"};
  explicit templated_stories(std::string_view chat_template) {
    for (const auto& entry : std::filesystem::directory_iterator(stories_dir()))
      std::filesystem::copy_file(entry.path(), dir.path / entry.path().filename());
    dir.write("chat_template.jinja", std::string(chat_template));
  }
  engine_config config() const {
    auto c = stories_engine_config();
    c.model_path = dir.path.string();
    return c;
  }
};

std::string chat_body(const std::string& extra) {
  return R"({"messages":[{"role":"user","content":"Tell me a story"}],"max_tokens":2,"temperature":0)" + extra + "}";
}

// usage.prompt_tokens of a chat request that must succeed.
std::int64_t prompt_tokens(std::uint16_t port, const std::string& extra) {
  const auto r = http_call(port, http::verb::post, "/v1/chat/completions", chat_body(extra));
  REQUIRE_MESSAGE(r.status == 200, r.body);
  return json_of(r.body).at("usage").at("prompt_tokens").to_number<std::int64_t>();
}

// How many tokens the engine makes of `text` (with BOS, as a ChatML prompt is tokenized).
std::int64_t token_count(std::uint16_t port, const std::string& text) {
  boost::json::object body{{"prompt", text}};
  const auto r = http_call(port, http::verb::post, "/tokenize", boost::json::serialize(body));
  REQUIRE(r.status == 200);
  return json_of(r.body).at("count").to_number<std::int64_t>();
}

} // namespace

TEST_CASE("HTTP and WebSocket: enable_thinking false ends the prompt with Qwen3's empty think block") {
  templated_stories model(qwen3_template);
  served_engine s(model.config());
  const std::string rendered = "<|im_start|>user\nTell me a story<|im_end|>\n<|im_start|>assistant\n";
  const auto thinking = token_count(s.port, rendered);
  const auto not_thinking = token_count(s.port, rendered + "<think>\n\n</think>\n\n");
  REQUIRE(not_thinking > thinking);
  CHECK(prompt_tokens(s.port, "") == thinking);
  CHECK(prompt_tokens(s.port, R"(,"chat_template_kwargs":{"enable_thinking":true})") == thinking);
  CHECK(prompt_tokens(s.port, R"(,"chat_template_kwargs":{"enable_thinking":false})") == not_thinking);
  CHECK(prompt_tokens(s.port, R"(,"chat_template_kwargs":{"enable_thinking":false},"stream":false)") == not_thinking);

  ws_client c(s.port);
  c.send(R"({"type":"generate","id":1,"messages":[{"role":"user","content":"Tell me a story"}],)"
         R"("chat_template_kwargs":{"enable_thinking":false},"max_tokens":2,"temperature":0})");
  for (;;) {
    auto f = c.read();
    if (f.at("type") == "delta")
      continue;
    REQUIRE(f.at("type").as_string() == "done");
    CHECK(f.at("usage").at("prompt_tokens").to_number<std::int64_t>() == not_thinking);
    break;
  }
}

TEST_CASE("HTTP: a template without the switch ignores enable_thinking, as Jinja would") {
  served_engine s; // stories260k: no chat template, the plain format
  CHECK(prompt_tokens(s.port, R"(,"chat_template_kwargs":{"enable_thinking":false})") == prompt_tokens(s.port, ""));
}

TEST_CASE("HTTP: unknown kwargs and a non-boolean enable_thinking are 400s, and the server keeps serving") {
  served_engine s;
  const auto unknown =
      http_call(s.port, http::verb::post, "/v1/chat/completions",
                chat_body(R"(,"chat_template_kwargs":{"enable_thinking":false,"add_generation_prompt":false})"));
  CHECK(unknown.status == 400);
  const auto error = json_of(unknown.body).at("error").as_object();
  CHECK(error.at("param").as_string() == "chat_template_kwargs.add_generation_prompt");
  CHECK(std::string(error.at("message").as_string().c_str()).find("add_generation_prompt") != std::string::npos);

  const auto not_bool = http_call(s.port, http::verb::post, "/v1/chat/completions",
                                  chat_body(R"(,"chat_template_kwargs":{"enable_thinking":"no"},"stream":true)"));
  CHECK(not_bool.status == 400);
  CHECK(json_of(not_bool.body).at("error").at("param").as_string() == "chat_template_kwargs.enable_thinking");

  const auto not_object =
      http_call(s.port, http::verb::post, "/v1/chat/completions", chat_body(R"(,"chat_template_kwargs":true)"));
  CHECK(not_object.status == 400);
  CHECK(json_of(not_object.body).at("error").at("param").as_string() == "chat_template_kwargs");

  // Still serving.
  CHECK(http_call(s.port, http::verb::post, "/v1/chat/completions", chat_body("")).status == 200);
}
