// The tool-call syntax of each chat format (see tool_syntax.hpp).
#include "runtime/tools/tool_syntax.hpp"

#include <string>

#include "runtime/errors.hpp"

namespace troupe::runtime::tools {

std::string_view to_string(tool_syntax s) {
  switch (s) {
    case tool_syntax::hermes:
      return "hermes";
    case tool_syntax::llama3:
      return "llama3";
    case tool_syntax::mistral:
      return "mistral";
  }
  return "unknown";
}

tool_syntax parse_tool_syntax(std::string_view name) {
  for (auto s : {tool_syntax::hermes, tool_syntax::llama3, tool_syntax::mistral})
    if (to_string(s) == name)
      return s;
  throw invalid_argument_error("unknown tool-call syntax \"" + std::string(name) + "\"", "tools");
}

tool_syntax tool_syntax_for(chat_format f) {
  switch (f) {
    case chat_format::llama3:
      return tool_syntax::llama3;
    case chat_format::mistral:
      return tool_syntax::mistral;
    case chat_format::chatml:
    case chat_format::plain:
    case chat_format::llama2:
    case chat_format::phi3:
    case chat_format::gemma:
      return tool_syntax::hermes;
  }
  return tool_syntax::hermes;
}

std::string new_call_id(tool_syntax s, std::mt19937_64& rng) {
  static constexpr std::string_view alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  const bool mistral = s == tool_syntax::mistral;
  std::string id = mistral ? "" : "call_";
  for (int i = 0, n = mistral ? 9 : 24; i < n; ++i)
    id += alphabet[rng() % alphabet.size()];
  return id;
}

} // namespace troupe::runtime::tools
