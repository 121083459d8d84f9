// Tool calling (OpenAI's chat `tools`): the functions a request offers the model, which of
// them it must call, and the calls it made. Plain C++ (runtime/ uses these types too);
// their CAF inspect overloads are in troupe/messages.hpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace troupe {

// At most this many tools per request (OpenAI's limit), names of at most 64 characters
// from [A-Za-z0-9_-].
inline constexpr int max_tools = 128;
inline constexpr std::size_t max_tool_name_length = 64;

// One function the model may call.
struct tool_function {
  std::string name;
  std::string description;
  std::string parameters = R"({"type":"object","properties":{}})"; // a JSON Schema of the arguments, as JSON text
  bool operator==(const tool_function&) const = default;
};

// OpenAI's tool_choice. none: the tools are not offered (not rendered into the prompt);
// auto: the model chooses between text and calls; required: at least one call; function:
// exactly one call of `function`. With required and function the output is constrained to
// the chat format's tool-call syntax and the arguments to their function's schema.
struct tool_choice {
  enum class mode : std::uint8_t { none, automatic, required, function };
  mode type = mode::automatic;
  std::string function; // mode::function: its name
  bool operator==(const tool_choice&) const = default;
};

// A call the model made (or, in a chat history, made earlier). arguments is JSON text.
struct tool_call {
  std::string id; // "call_..." (made by the engine for new calls)
  std::string name;
  std::string arguments;
  bool operator==(const tool_call&) const = default;
};

// True for a name OpenAI accepts: 1 to 64 characters of [A-Za-z0-9_-].
inline bool valid_tool_name(const std::string& name) {
  if (name.empty() || name.size() > max_tool_name_length)
    return false;
  for (char c : name)
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-'))
      return false;
  return true;
}

} // namespace troupe
