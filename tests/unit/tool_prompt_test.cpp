// Tests for runtime/tools/tool_prompt and the chat renderers with tools: the exact text
// each format gets for the tools offered, an assistant's calls and the results that come
// back, and the conversations each format refuses.
#include "runtime/tools/tool_prompt.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cctype>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "runtime/errors.hpp"

using namespace troupe;
using troupe::runtime::chat_format;
using troupe::runtime::chat_message;
using troupe::runtime::render_chat;
using troupe::runtime::tools::call_json;
using troupe::runtime::tools::tool_json;
using troupe::runtime::tools::tool_syntax;

namespace {

const tool_function weather{"get_weather", "Weather now",
                            R"({"type":"object","properties":{"city":{"type":"string"}},"required":["city"]})"};
const std::string weather_json =
    R"({"type":"function","function":{"name":"get_weather","description":"Weather now","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}})";

const tool_call paris_call{"call_1", "get_weather", R"( {"city":"Paris"} )"};

// user asks, the assistant calls, the tool answers.
std::vector<chat_message> round_trip() {
  return {{"user", "Weather in Paris?", {}, {}},
          {"assistant", "", {paris_call}, {}},
          {"tool", "{\"temp\": 21}", {}, "call_1"}};
}

} // namespace

TEST_CASE("a tool is shown as OpenAI's function object and a call in each syntax's shape") {
  CHECK(tool_json(weather) == weather_json);
  CHECK(tool_json({"f", "", R"({"type":"object"})"}) == R"({"type":"function","function":{"name":"f","parameters":{"type":"object"}}})");
  CHECK_THROWS_AS(tool_json({"f", "", "[1]"}), invalid_argument_error);
  CHECK_THROWS_AS(tool_json({"f", "", "{oops"}), invalid_argument_error);
  CHECK(call_json(tool_syntax::hermes, paris_call) == R"({"name": "get_weather", "arguments": {"city":"Paris"}})");
  CHECK(call_json(tool_syntax::llama3, paris_call) == R"({"name": "get_weather", "parameters": {"city":"Paris"}})");
  CHECK(call_json(tool_syntax::mistral, {"c", "f", ""}) == R"({"name": "f", "arguments": {}})");
}

TEST_CASE("call ids: mistral's are 9 letters and digits, the others OpenAI's call_ and 24") {
  std::mt19937_64 rng(5);
  auto alnum = [](const std::string& s) {
    return std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isalnum(c) != 0; });
  };
  std::set<std::string> seen;
  for (int i = 0; i < 100; ++i) {
    const auto m = new_call_id(tool_syntax::mistral, rng);
    CHECK(m.size() == 9);
    CHECK(alnum(m));
    for (auto syntax : {tool_syntax::hermes, tool_syntax::llama3}) {
      const auto id = new_call_id(syntax, rng);
      REQUIRE(id.size() == 29);
      CHECK(id.rfind("call_", 0) == 0);
      CHECK(alnum(id.substr(5)));
      seen.insert(id);
    }
    seen.insert(m);
  }
  CHECK(seen.size() == 300); // no two alike
}

TEST_CASE("chatml: tools join the system message, calls are <tool_call> blocks, results a user turn") {
  const std::vector<tool_function> tools{weather};
  const auto text = render_chat(chat_format::chatml, round_trip(), {}, tools);
  const std::string tools_paragraph = "# Tools\n\nFunctions you may call, inside <tools></tools>:\n<tools>\n" +
                                      weather_json +
                                      "\n</tools>\n\nTo call one, write:\n<tool_call>\n{\"name\": <function name>, "
                                      "\"arguments\": <JSON object>}\n</tool_call>";
  CHECK(text == "<|im_start|>system\n" + tools_paragraph +
                    "<|im_end|>\n<|im_start|>user\nWeather in Paris?<|im_end|>\n<|im_start|>assistant\n<tool_call>\n"
                    "{\"name\": \"get_weather\", \"arguments\": {\"city\":\"Paris\"}}\n</tool_call><|im_end|>\n"
                    "<|im_start|>user\n<tool_response>\n{\"temp\": 21}\n</tool_response><|im_end|>\n"
                    "<|im_start|>assistant\n");
  // The system text comes first; the default system message (Qwen2's) is kept with tools.
  auto with_system = round_trip();
  with_system.insert(with_system.begin(), chat_message{"system", "Be brief.\n", {}, {}});
  CHECK(render_chat(chat_format::chatml, with_system, {}, tools).starts_with("<|im_start|>system\nBe brief.\n\n# Tools"));
  CHECK(render_chat(chat_format::chatml, round_trip(), "You help.", tools)
            .starts_with("<|im_start|>system\nYou help.\n\n# Tools"));
  // Consecutive results share one user turn; an assistant's text leads its calls.
  std::vector<chat_message> two{{"user", "Paris and Rome?", {}, {}},
                                {"assistant", "Checking.", {paris_call, {"call_2", "get_weather", "{\"city\":\"Rome\"}"}}, {}},
                                {"tool", "21", {}, "call_1"},
                                {"tool", "25", {}, "call_2"}};
  const auto both = render_chat(chat_format::chatml, two);
  CHECK(both.find("<|im_start|>assistant\nChecking.\n<tool_call>\n") != std::string::npos);
  CHECK(both.find("</tool_call>\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\":\"Rome\"}}") !=
        std::string::npos);
  CHECK(both.find("<|im_start|>user\n<tool_response>\n21\n</tool_response>\n<tool_response>\n25\n</tool_response>"
                  "<|im_end|>") != std::string::npos);
  // Without tools offered, the history's calls and results are still written.
  CHECK(both.find("# Tools") == std::string::npos);
}

TEST_CASE("plain and llama2 use the hermes syntax, and llama2's results count as the user's turn") {
  const std::vector<tool_function> tools{weather};
  const auto plain = render_chat(chat_format::plain, round_trip(), {}, tools);
  CHECK(plain.starts_with("System: # Tools\n"));
  CHECK(plain.ends_with("User: Weather in Paris?\nAssistant: <tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
                        "{\"city\":\"Paris\"}}\n</tool_call>\nUser: <tool_response>\n{\"temp\": 21}\n"
                        "</tool_response>\nAssistant:"));
  const auto llama2 = render_chat(chat_format::llama2, round_trip(), {}, tools);
  CHECK(llama2.starts_with("<s>[INST] <<SYS>>\n# Tools"));
  CHECK(llama2.ends_with("[/INST] <tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\":\"Paris\"}}\n"
                         "</tool_call> </s><s>[INST] <tool_response>\n{\"temp\": 21}\n</tool_response> [/INST]"));
}

TEST_CASE("phi3 uses the hermes syntax: tools in a system turn, a call in the assistant's, results a user turn") {
  const std::vector<tool_function> tools{weather};
  const auto text = render_chat(chat_format::phi3, round_trip(), {}, tools);
  CHECK(text.starts_with("<|system|>\n# Tools\n\nFunctions you may call, inside <tools></tools>:\n<tools>\n" +
                         weather_json));
  CHECK(text.ends_with("<|user|>\nWeather in Paris?<|end|>\n<|assistant|>\n<tool_call>\n{\"name\": \"get_weather\", "
                       "\"arguments\": {\"city\":\"Paris\"}}\n</tool_call><|end|>\n<|user|>\n<tool_response>\n"
                       "{\"temp\": 21}\n</tool_response><|end|>\n<|assistant|>\n"));
}

TEST_CASE("gemma uses the hermes syntax: tools open the first user turn, results are a user turn") {
  const std::vector<tool_function> tools{weather};
  const auto text = render_chat(chat_format::gemma, round_trip(), {}, tools);
  CHECK(text.starts_with(
      "<bos><start_of_turn>user\n# Tools\n\nFunctions you may call, inside <tools></tools>:\n<tools>\n" +
      weather_json));
  CHECK(
      text.ends_with("</tool_call>\n\nWeather in Paris?<end_of_turn>\n<start_of_turn>model\n<tool_call>\n{\"name\": "
                     "\"get_weather\", \"arguments\": {\"city\":\"Paris\"}}\n</tool_call><end_of_turn>\n"
                     "<start_of_turn>user\n<tool_response>\n{\"temp\": 21}\n</tool_response><end_of_turn>\n"
                     "<start_of_turn>model\n"));
  // The caller's system message and the tools share the first user turn.
  auto with_system = round_trip();
  with_system.insert(with_system.begin(), {"system", "Be brief.", {}, {}});
  CHECK(render_chat(chat_format::gemma, with_system, {}, tools)
            .starts_with("<bos><start_of_turn>user\nBe brief.\n\n# Tools"));
}

TEST_CASE("llama3: tools in the system turn, a call is its JSON, results an ipython turn") {
  const std::vector<tool_function> tools{weather};
  const auto text = render_chat(chat_format::llama3, round_trip(), {}, tools);
  CHECK(text.starts_with("<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nFunctions you may call are "
                         "below."));
  CHECK(text.find(weather_json + "<|eot_id|>") != std::string::npos);
  CHECK(text.ends_with("<|start_header_id|>assistant<|end_header_id|>\n\n{\"name\": \"get_weather\", \"parameters\": "
                       "{\"city\":\"Paris\"}}<|eot_id|><|start_header_id|>ipython<|end_header_id|>\n\n{\"temp\": "
                       "21}<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"));
  // Llama's JSON format has one call per turn.
  std::vector<chat_message> two{{"user", "?", {}, {}}, {"assistant", "", {paris_call, paris_call}, {}}};
  CHECK_THROWS_WITH_AS(render_chat(chat_format::llama3, two), doctest::Contains("one tool call per assistant message"),
                       invalid_argument_error);
}

TEST_CASE("mistral: available tools before the last user turn, [TOOL_CALLS] and [TOOL_RESULTS]") {
  const std::vector<tool_function> tools{weather};
  auto messages = round_trip();
  messages.insert(messages.begin(), {{"user", "Hi", {}, {}}, {"assistant", "Hello!", {}, {}}});
  const auto text = render_chat(chat_format::mistral, messages, {}, tools);
  CHECK(text == "<s>[INST] Hi [/INST] Hello!</s>[AVAILABLE_TOOLS] [" + weather_json +
                    "][/AVAILABLE_TOOLS][INST] Weather in Paris? [/INST] [TOOL_CALLS] [{\"name\": \"get_weather\", "
                    "\"arguments\": {\"city\":\"Paris\"}}]</s>[TOOL_RESULTS] {\"content\":{\"temp\":21},\"call_id\":"
                    "\"call_1\"}[/TOOL_RESULTS]");
  // A tool result must follow an assistant's calls; an assistant may answer the results.
  std::vector<chat_message> stray{{"user", "Hi", {}, {}}, {"tool", "x", {}, "c"}};
  CHECK_THROWS_WITH_AS(render_chat(chat_format::mistral, stray), doctest::Contains("is \"tool\" where \"assistant\" was expected"),
                       invalid_argument_error);
  auto answered = round_trip();
  answered.push_back({"assistant", "It is 21.", {}, {}});
  answered.push_back({"user", "Thanks", {}, {}});
  CHECK(render_chat(chat_format::mistral, answered).ends_with("[/TOOL_RESULTS] It is 21.</s>[INST] Thanks [/INST]"));
  // llama2 has no such turn.
  CHECK_THROWS_AS(render_chat(chat_format::llama2, stray), invalid_argument_error);
}

TEST_CASE("unknown roles are refused at the caller's positions, before tools are folded in") {
  std::vector<chat_message> bad{{"user", "a", {}, {}}, {"robot", "b", {}, {}}};
  CHECK_THROWS_WITH_AS(render_chat(chat_format::chatml, bad, {}, std::vector<tool_function>{weather}),
                       doctest::Contains("chat message 2 has unknown role \"robot\""), invalid_argument_error);
}
