// Tests for runtime/chat_template: format detection on templates written in each
// family's style, the exact text rendered for each format, and bad conversations.
#include "runtime/chat_template.hpp"

#include "runtime/errors.hpp"
#include "runtime/tokenizer.hpp"
#include "tests/support/data_root.hpp"

#include <doctest/doctest.h>

#include <boost/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;
using troupe::runtime::chat_format;
using troupe::runtime::chat_message;
using troupe::runtime::chat_options;
using troupe::runtime::default_system_message;
using troupe::runtime::detect_chat_format;
using troupe::runtime::has_thinking_switch;
using troupe::runtime::invalid_argument_error;
using troupe::runtime::render_chat;
using troupe::runtime::rendered_includes_bos;
using troupe::runtime::tokenizer;

using troupe::testing::stories_dir;

// Templates as they read after JSON decoding, so "\n" inside a Jinja string literal is
// still the two characters backslash and n. Written for these tests in each family's
// style; what matters is that each carries its family's markers.
constexpr std::string_view llama3_template =
    R"({{- bos_token }}{%- for m in messages %})"
    R"({{- '<|start_header_id|>' ~ m.role ~ '<|end_header_id|>\n\n' }}{{- m.content | trim }}{{- '<|eot_id|>' }})"
    R"({%- endfor %}{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{%- endif %})";

constexpr std::string_view chatml_template = // no default system message
    R"({%- for m in messages %}{{- '<|im_start|>' ~ m.role ~ '\n' ~ m.content ~ '<|im_end|>' ~ '\n' }}{%- endfor %})"
    R"({%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{%- endif %})";

constexpr std::string_view qwen_style_template = // a default system message when none is given
    R"({%- for m in messages %})"
    R"({%- if loop.first and m.role != 'system' %}{{- '<|im_start|>system\nYou are a careful, friendly helper.<|im_end|>\n' }}{%- endif %})"
    R"({{- '<|im_start|>' ~ m.role ~ '\n' ~ m.content ~ '<|im_end|>\n' }}{%- endfor %})"
    R"({%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{%- endif %})";

constexpr std::string_view llama2_template =
    R"({%- if messages[0].role == 'system' %}{%- set sys = messages[0].content %}{%- set turns = messages[1:] %})"
    R"({%- else %}{%- set sys = none %}{%- set turns = messages %}{%- endif %})"
    R"({%- for m in turns %}{%- if (m.role == 'user') != (loop.index0 is even) %})"
    R"({{- raise_exception('user and assistant have to take turns') }}{%- endif %})"
    R"({%- if m.role == 'user' %}{%- set text = m.content %}{%- if loop.first and sys is not none %})"
    R"({%- set text = '<<SYS>>\n' ~ sys ~ '\n<</SYS>>\n\n' ~ text %}{%- endif %})"
    R"({{- bos_token ~ '[INST] ' ~ text | trim ~ ' [/INST]' }})"
    R"({%- else %}{{- ' ' ~ m.content | trim ~ ' ' ~ eos_token }}{%- endif %}{%- endfor %})";

constexpr std::string_view mistral_template =
    R"({%- if messages[0].role == 'system' %}{%- set sys = messages[0].content %}{%- set turns = messages[1:] %})"
    R"({%- else %}{%- set turns = messages %}{%- endif %}{{- bos_token }})"
    R"({%- for m in turns %}{%- if m.role == 'user' %}{%- if loop.first and sys is defined %})"
    R"({{- '[INST] ' ~ sys ~ '\n\n' ~ m.content ~ ' [/INST]' }}{%- else %}{{- '[INST] ' ~ m.content ~ ' [/INST]' }}{%- endif %})"
    R"({%- elif m.role == 'assistant' %}{{- ' ' ~ m.content ~ eos_token }})"
    R"({%- else %}{{- raise_exception('only user and assistant after the first message') }}{%- endif %}{%- endfor %})";

// microsoft/Phi-3-mini-4k-instruct's chat_template (tokenizer_config.json), as published.
constexpr std::string_view phi3_template =
    R"({% for message in messages %}{% if message['role'] == 'system' %}{{'<|system|>\n' + message['content'] + '<|end|>\n'}})"
    R"({% elif message['role'] == 'user' %}{{'<|user|>\n' + message['content'] + '<|end|>\n'}})"
    R"({% elif message['role'] == 'assistant' %}{{'<|assistant|>\n' + message['content'] + '<|end|>\n'}}{% endif %})"
    R"({% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% else %}{{ eos_token }}{% endif %})";

// Gemma 3's template (google/gemma-3-4b-it) in outline: the system text and "\n\n" before the
// first user turn's, roles that must alternate, "model" for the assistant, content trimmed.
constexpr std::string_view gemma3_template =
    R"({{ bos_token }}{%- if messages[0]['role'] == 'system' -%})"
    R"({%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}{%- set loop_messages = messages[1:] -%})"
    R"({%- else -%}{%- set first_user_prefix = "" -%}{%- set loop_messages = messages -%}{%- endif -%})"
    R"({%- for message in loop_messages -%}{%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%})"
    R"({{ raise_exception("Conversation roles must alternate user/assistant/user/assistant/...") }}{%- endif -%})"
    R"({%- if (message['role'] == 'assistant') -%}{%- set role = "model" -%}{%- else -%}{%- set role = message['role'] -%}{%- endif -%})"
    R"({{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else "") }})"
    R"({{ message['content'] | trim }}{{ '<end_of_turn>\n' }}{%- endfor -%})"
    R"({%- if add_generation_prompt -%}{{'<start_of_turn>model\n'}}{%- endif -%})";

// Gemma 2's: the same turns, and an error for a system message.
constexpr std::string_view gemma2_template =
    R"({{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %})"
    R"({% for message in messages %}{% if (message['role'] == 'assistant') %}{% set role = 'model' %})"
    R"({% else %}{% set role = message['role'] %}{% endif %})"
    R"({{ '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}{% endfor %})"
    R"({% if add_generation_prompt %}{{'<start_of_turn>model\n'}}{% endif %})";

// Qwen3's generation prompt with its thinking switch (the rest is ChatML).
constexpr std::string_view qwen3_template =
    R"({%- for m in messages %}{{- '<|im_start|>' + m.role + '\n' + m.content + '<|im_end|>' + '\n' }}{%- endfor %})"
    R"({%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }})"
    R"({%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\n\n</think>\n\n' }}{%- endif %})"
    R"({%- endif %})";

// Families we do not render: their own markers, none of ours.
constexpr std::string_view turn_marker_template = // one Gemma marker alone
    R"({%- for m in messages %}{{- '<start_of_turn>' ~ m.role ~ '\n' ~ m.content ~ '\n' }}{%- endfor %})";
constexpr std::string_view fullwidth_bar_template = // DeepSeek's style
    R"({{ bos_token }}{%- for m in messages %}{%- if m.role == 'user' %}{{ '<｜User｜>' + m.content }})"
    R"({%- else %}{{ '<｜Assistant｜>' + m.content + '<｜end▁of▁sentence｜>' }}{%- endif %}{%- endfor %})"
    R"({%- if add_generation_prompt %}{{ '<｜Assistant｜>' }}{%- endif %})";
constexpr std::string_view pipe_role_template =
    R"({%- for m in messages %}{{- '<|' ~ m.role ~ '|>\n' ~ m.content ~ '<|end|>\n' }}{%- endfor %}{{- '<|assistant|>\n' }})";

// system, user, assistant, user.
const std::vector<chat_message> conversation = {
    {"system", "You are terse."},
    {"user", "Hi there"},
    {"assistant", "Hello!"},
    {"user", "What is 2+2?"},
};

// The message of the invalid_argument_error that render_chat throws ("" if none).
std::string render_error(chat_format f, const std::vector<chat_message>& messages) {
  try {
    (void)render_chat(f, messages);
  } catch (const invalid_argument_error& e) {
    return e.what();
  }
  return {};
}

bool has(const std::string& text, std::string_view part) {
  return text.find(part) != std::string::npos;
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  REQUIRE(in);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

} // namespace

TEST_CASE("each family's template is recognised by its markers") {
  CHECK(detect_chat_format(llama3_template) == chat_format::llama3);
  CHECK(detect_chat_format(chatml_template) == chat_format::chatml);
  CHECK(detect_chat_format(qwen_style_template) == chat_format::chatml);
  CHECK(detect_chat_format(llama2_template) == chat_format::llama2);
  CHECK(detect_chat_format(mistral_template) == chat_format::mistral);
  CHECK(detect_chat_format(phi3_template) == chat_format::phi3);
  CHECK(detect_chat_format(gemma3_template) == chat_format::gemma);
  CHECK(detect_chat_format(gemma2_template) == chat_format::gemma);
  CHECK(detect_chat_format(qwen3_template) == chat_format::chatml);
}

TEST_CASE("no template, or one we do not know, is plain") {
  CHECK(detect_chat_format("") == chat_format::plain);
  CHECK(detect_chat_format(turn_marker_template) == chat_format::plain);
  CHECK(detect_chat_format(fullwidth_bar_template) == chat_format::plain);
  CHECK(detect_chat_format(pipe_role_template) == chat_format::plain);
  CHECK(detect_chat_format("{{ messages[0].content }}") == chat_format::plain);
  // One Llama-3 marker alone is not enough.
  CHECK(detect_chat_format("{{ '<|eot_id|>' }}") == chat_format::plain);
}

TEST_CASE("format names") {
  CHECK(to_string(chat_format::plain) == "plain");
  CHECK(to_string(chat_format::llama2) == "llama2");
  CHECK(to_string(chat_format::llama3) == "llama3");
  CHECK(to_string(chat_format::chatml) == "chatml");
  CHECK(to_string(chat_format::mistral) == "mistral");
  CHECK(to_string(chat_format::phi3) == "phi3");
  CHECK(to_string(chat_format::gemma) == "gemma");
}

TEST_CASE("plain rendering") {
  CHECK(render_chat(chat_format::plain, conversation) ==
        "System: You are terse.\nUser: Hi there\nAssistant: Hello!\nUser: What is 2+2?\nAssistant:");
  CHECK(render_chat(chat_format::plain, std::vector<chat_message>{{"user", "Hi"}}) == "User: Hi\nAssistant:");
}

TEST_CASE("llama2 rendering: system folded into the first turn, BOS per turn, EOS after replies") {
  CHECK(render_chat(chat_format::llama2, conversation) ==
        "<s>[INST] <<SYS>>\nYou are terse.\n<</SYS>>\n\nHi there [/INST] Hello! </s>"
        "<s>[INST] What is 2+2? [/INST]");
  // Without a system message; each turn trimmed.
  const std::vector<chat_message> untidy = {{"user", "  Hi there\n"}, {"assistant", "\tHello! "}, {"user", "Bye "}};
  CHECK(render_chat(chat_format::llama2, untidy) == "<s>[INST] Hi there [/INST] Hello! </s><s>[INST] Bye [/INST]");
}

TEST_CASE("llama3 rendering: headers, trimmed content, one BOS") {
  CHECK(render_chat(chat_format::llama3, conversation) ==
        "<|begin_of_text|>"
        "<|start_header_id|>system<|end_header_id|>\n\nYou are terse.<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nWhat is 2+2?<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n");
  CHECK(render_chat(chat_format::llama3, std::vector<chat_message>{{"user", "\n  Hi \n"}}) ==
        "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

TEST_CASE("chatml rendering: content as given, no BOS") {
  CHECK(render_chat(chat_format::chatml, conversation) ==
        "<|im_start|>system\nYou are terse.<|im_end|>\n"
        "<|im_start|>user\nHi there<|im_end|>\n"
        "<|im_start|>assistant\nHello!<|im_end|>\n"
        "<|im_start|>user\nWhat is 2+2?<|im_end|>\n"
        "<|im_start|>assistant\n");
  CHECK(render_chat(chat_format::chatml, std::vector<chat_message>{{"user", " Hi\n"}}) ==
        "<|im_start|>user\n Hi\n<|im_end|>\n<|im_start|>assistant\n");
}

TEST_CASE("mistral rendering: system before the first user message, BOS once") {
  CHECK(render_chat(chat_format::mistral, conversation) ==
        "<s>[INST] You are terse.\n\nHi there [/INST] Hello!</s>[INST] What is 2+2? [/INST]");
  CHECK(render_chat(chat_format::mistral, std::vector<chat_message>{{"user", "Hi"}}) == "<s>[INST] Hi [/INST]");
}

TEST_CASE("phi3 rendering: the template's text for every turn, the assistant's left open, no BOS") {
  // What phi3_template renders with add_generation_prompt for this conversation.
  CHECK(render_chat(chat_format::phi3, conversation) ==
        "<|system|>\nYou are terse.<|end|>\n"
        "<|user|>\nHi there<|end|>\n"
        "<|assistant|>\nHello!<|end|>\n"
        "<|user|>\nWhat is 2+2?<|end|>\n"
        "<|assistant|>\n");
  // The model card's single question: content as given, untrimmed.
  CHECK(render_chat(chat_format::phi3, std::vector<chat_message>{{"user", " Hi\n"}}) ==
        "<|user|>\n Hi\n<|end|>\n<|assistant|>\n");
  // A tool result has no role of its own: it is a user turn.
  CHECK(render_chat(chat_format::phi3, std::vector<chat_message>{{"user", "Hi"}, {"tool", "42"}}) ==
        "<|user|>\nHi<|end|>\n<|user|>\n<tool_response>\n42\n</tool_response><|end|>\n<|assistant|>\n");
}

TEST_CASE("gemma rendering: Gemma 3's template text, the system text before the first user turn's, BOS once") {
  // What gemma3_template renders with add_generation_prompt.
  CHECK(render_chat(chat_format::gemma, conversation) ==
        "<bos><start_of_turn>user\nYou are terse.\n\nHi there<end_of_turn>\n"
        "<start_of_turn>model\nHello!<end_of_turn>\n"
        "<start_of_turn>user\nWhat is 2+2?<end_of_turn>\n"
        "<start_of_turn>model\n");
  // System and user: each message trimmed, the system text written as given.
  CHECK(render_chat(chat_format::gemma, std::vector<chat_message>{{"system", " Be brief.\n"}, {"user", "  Hi\n"}}) ==
        "<bos><start_of_turn>user\n Be brief.\n\n\nHi<end_of_turn>\n<start_of_turn>model\n");
  // User, assistant, user without a system message: what Gemma 2's template renders too.
  CHECK(render_chat(chat_format::gemma,
                    std::vector<chat_message>{{"user", "Hi there "}, {"assistant", "\tHello! "}, {"user", "\nBye"}}) ==
        "<bos><start_of_turn>user\nHi there<end_of_turn>\n<start_of_turn>model\nHello!<end_of_turn>\n"
        "<start_of_turn>user\nBye<end_of_turn>\n<start_of_turn>model\n");
  // A tool result is a user turn (the hermes syntax), after the model's call.
  const std::vector<chat_message> with_result = {
      {"user", "Weather in Paris?", {}, {}},
      {"assistant", "", {{"call_1", "get_weather", R"({"city":"Paris"})"}}, {}},
      {"tool", "{\"temp\": 21}", {}, "call_1"}};
  CHECK(render_chat(chat_format::gemma, with_result) ==
        "<bos><start_of_turn>user\nWeather in Paris?<end_of_turn>\n"
        "<start_of_turn>model\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\":\"Paris\"}}\n"
        "</tool_call><end_of_turn>\n"
        "<start_of_turn>user\n<tool_response>\n{\"temp\": 21}\n</tool_response><end_of_turn>\n"
        "<start_of_turn>model\n");
  // The template checks only the alternation: after a model turn it opens another.
  CHECK(render_chat(chat_format::gemma, std::vector<chat_message>{{"user", "a"}, {"assistant", "b"}}) ==
        "<bos><start_of_turn>user\na<end_of_turn>\n<start_of_turn>model\nb<end_of_turn>\n<start_of_turn>model\n");
}

TEST_CASE("gemma requires user and assistant to alternate, starting with user, as its template does") {
  std::string e = render_error(chat_format::gemma, {{"assistant", "Hello"}, {"user", "Hi"}});
  CHECK(has(e, "chat (gemma): message 1 is \"assistant\" where \"user\" was expected"));
  e = render_error(chat_format::gemma, {{"system", "S"}, {"user", "a"}, {"user", "b"}});
  CHECK(has(e, "message 3 is \"user\" where \"assistant\" was expected"));
  e = render_error(chat_format::gemma, {{"user", "a"}, {"assistant", "b"}, {"system", "c"}, {"user", "d"}});
  CHECK(has(e, "message 3 is \"system\""));
  CHECK(has(render_error(chat_format::gemma, {{"system", "S"}}), "needs a user message"));
  // A result that answers no call follows the user's turn: two user turns in a row.
  e = render_error(chat_format::gemma, {{"user", "a"}, {"tool", "42", {}, "c"}});
  CHECK(has(e, "message 2 is \"user\" where \"assistant\" was expected"));
}

TEST_CASE("qwen3's enable_thinking false closes an empty think block after the generation prompt") {
  CHECK(has_thinking_switch(qwen3_template));
  CHECK_FALSE(has_thinking_switch(chatml_template));
  CHECK_FALSE(has_thinking_switch(qwen_style_template));
  CHECK_FALSE(has_thinking_switch(gemma3_template));
  CHECK_FALSE(has_thinking_switch(""));
  // Only a ChatML template takes the switch.
  CHECK_FALSE(has_thinking_switch("{{ '<start_of_turn>' }}{{ '<end_of_turn>' }}{% if enable_thinking %}{% endif %}"));

  const std::vector<chat_message> question = {{"user", "What is 2+2?"}};
  // What qwen3_template renders with enable_thinking=False.
  CHECK(render_chat(chat_format::chatml, question, {}, {}, chat_options{.enable_thinking = false}) ==
        "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
  // True, and the default, leave the thinking to the model.
  CHECK(render_chat(chat_format::chatml, question, {}, {}, chat_options{.enable_thinking = true}) ==
        "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n");
  CHECK(render_chat(chat_format::chatml, question) ==
        "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n");
  // The think block comes after everything else, the tools and a default system message included.
  const auto with_default =
      render_chat(chat_format::chatml, question, "Be kind.", {}, chat_options{.enable_thinking = false});
  CHECK(with_default.starts_with("<|im_start|>system\nBe kind.<|im_end|>\n"));
  CHECK(with_default.ends_with("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
  // The other formats have no such switch.
  for (const auto f : {chat_format::plain, chat_format::llama2, chat_format::llama3, chat_format::mistral,
                       chat_format::phi3, chat_format::gemma}) {
    CAPTURE(to_string(f));
    CHECK(render_chat(f, conversation, {}, {}, chat_options{.enable_thinking = false}) == render_chat(f, conversation));
  }
}

TEST_CASE("a ChatML template's simple default system message is taken out and used") {
  const std::string def = default_system_message(qwen_style_template);
  CHECK(def == "You are a careful, friendly helper.");
  const std::vector<chat_message> just_user = {{"user", "Hi"}};
  CHECK(render_chat(chat_format::chatml, just_user, def) ==
        "<|im_start|>system\nYou are a careful, friendly helper.<|im_end|>\n"
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  // The caller's own system message wins.
  CHECK(render_chat(chat_format::chatml, conversation, def) == render_chat(chat_format::chatml, conversation));
  // The same literal with a real newline (as read from a chat_template.jinja file).
  CHECK(default_system_message("{{ \"<|im_start|>system\nBe brief.<|im_end|>\n\" }}") == "Be brief.");
}

TEST_CASE("no default system message unless the template writes one as a plain literal") {
  CHECK(default_system_message("").empty());
  CHECK(default_system_message(chatml_template).empty());
  CHECK(default_system_message(llama3_template).empty());
  CHECK(default_system_message(llama2_template).empty());
  // The system turn built from an expression.
  CHECK(default_system_message(R"({{ '<|im_start|>system\n' + messages[0].content + '<|im_end|>\n' }})").empty());
  CHECK(default_system_message(R"({{ '<|im_start|>system\nHello {{ name }}<|im_end|>\n' }})").empty());
  // Not inside a string literal.
  CHECK(default_system_message("<|im_start|>system\nBe brief.<|im_end|>").empty());
  // An empty system turn is no default.
  CHECK(default_system_message(R"({{ '<|im_start|>system\n<|im_end|>\n' }})").empty());
  // A default in front of a llama2 conversation is folded in like a given one.
  CHECK(render_chat(chat_format::llama2, std::vector<chat_message>{{"user", "Hi"}}, "Be kind.") ==
        "<s>[INST] <<SYS>>\nBe kind.\n<</SYS>>\n\nHi [/INST]");
}

TEST_CASE("empty conversations and unknown roles are rejected in every format") {
  for (const auto f : {chat_format::plain, chat_format::llama2, chat_format::llama3, chat_format::chatml,
                       chat_format::mistral, chat_format::phi3, chat_format::gemma}) {
    CAPTURE(to_string(f));
    CHECK(has(render_error(f, {}), "at least one message"));
    const std::string e = render_error(f, {{"user", "Hi"}, {"robot", "42"}});
    CHECK(has(e, "message 2"));
    CHECK(has(e, "\"robot\""));
    CHECK(has(render_error(f, {{"User", "Hi"}}), "unknown role"));
  }
}

TEST_CASE("llama2 and mistral require user and assistant to alternate, ending with user") {
  for (const auto f : {chat_format::llama2, chat_format::mistral}) {
    CAPTURE(to_string(f));
    // Assistant first.
    std::string e = render_error(f, {{"assistant", "Hello"}, {"user", "Hi"}});
    CHECK(has(e, "message 1 is \"assistant\" where \"user\" was expected"));
    CHECK(has(e, to_string(f)));
    // Two user messages in a row, after a system message.
    e = render_error(f, {{"system", "S"}, {"user", "a"}, {"user", "b"}});
    CHECK(has(e, "message 3 is \"user\" where \"assistant\" was expected"));
    // A system message later on.
    e = render_error(f, {{"user", "a"}, {"assistant", "b"}, {"system", "c"}, {"user", "d"}});
    CHECK(has(e, "message 3 is \"system\""));
    // Ending with the assistant leaves nothing to prompt a reply with.
    CHECK(has(render_error(f, {{"user", "a"}, {"assistant", "b"}}), "last message must be from the user"));
    CHECK(has(render_error(f, {{"system", "S"}}), "needs a user message"));
    // Positions are the caller's even when a default system message was put in front.
    try {
      (void)render_chat(f, std::vector<chat_message>{{"user", "a"}, {"user", "b"}}, "default");
      FAIL("no error");
    } catch (const invalid_argument_error& err) {
      CHECK(has(err.what(), "message 2 is \"user\""));
    }
  }
}

TEST_CASE("llama3, chatml, phi3 and plain take messages in any order") {
  const std::vector<chat_message> odd = {{"assistant", "Hello"}, {"user", "a"}, {"user", "b"}, {"system", "s"}};
  for (const auto f : {chat_format::plain, chat_format::llama3, chat_format::chatml, chat_format::phi3}) {
    CAPTURE(to_string(f));
    CHECK_NOTHROW((void)render_chat(f, odd));
  }
  CHECK(render_chat(chat_format::chatml, std::vector<chat_message>{{"system", "S"}}) ==
        "<|im_start|>system\nS<|im_end|>\n<|im_start|>assistant\n");
}

TEST_CASE("which formats write BOS themselves") {
  CHECK(rendered_includes_bos(chat_format::llama2));
  CHECK(rendered_includes_bos(chat_format::llama3));
  CHECK(rendered_includes_bos(chat_format::mistral));
  CHECK(rendered_includes_bos(chat_format::gemma));
  CHECK_FALSE(rendered_includes_bos(chat_format::chatml));
  CHECK_FALSE(rendered_includes_bos(chat_format::plain));
  CHECK_FALSE(rendered_includes_bos(chat_format::phi3));
}

TEST_CASE("the bundled stories260k has no chat_template, so it is plain") {
  const auto config = boost::json::parse(read_file(stories_dir() / "tokenizer_config.json")).as_object();
  CHECK_FALSE(config.contains("chat_template"));
  const tokenizer tok = tokenizer::load(stories_dir());
  CHECK(tok.chat_template().empty());
  CHECK(detect_chat_format(tok.chat_template()) == chat_format::plain);
  CHECK(default_system_message(tok.chat_template()).empty());

  // The caller's recipe gives exactly one BOS at the front, both when the format writes
  // it and when the tokenizer adds it.
  const auto bos = tok.bos_id();
  REQUIRE(bos.has_value());
  for (const auto f : {chat_format::plain, chat_format::llama2, chat_format::mistral}) {
    CAPTURE(to_string(f));
    const auto ids = tok.encode(render_chat(f, conversation), !rendered_includes_bos(f));
    REQUIRE(!ids.empty());
    CHECK(ids.front() == *bos);
    CHECK(ids.size() > 1);
    CHECK(ids[1] != *bos);
  }
  // "<s>" and "</s>" in the rendered text are the special tokens, not their letters.
  const auto ids = tok.encode(render_chat(chat_format::llama2, conversation), false);
  CHECK(std::count(ids.begin(), ids.end(), *bos) == 2);
  const auto eos = tok.eos_id();
  REQUIRE(eos.has_value());
  CHECK(std::count(ids.begin(), ids.end(), *eos) == 1);
}
