// Tools in the prompt: the functions offered, the calls an assistant made and the results
// that came back, written in the chat format's tool syntax (tool_syntax.hpp) as ordinary
// chat messages that the format's renderer then writes like any other.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "runtime/chat_template.hpp"
#include "runtime/tools/tool_syntax.hpp"
#include "troupe/tools.hpp"

namespace troupe::runtime::tools {

// A function as the prompt shows it: {"type":"function","function":{"name",
// "description" (when set),"parameters"}}, compact JSON. Throws invalid_argument_error
// (param "tools") when its parameters are not a JSON object.
std::string tool_json(const tool_function& f);

// One call as the model writes it: hermes {"name": "f", "arguments": ARGS}, llama3
// {"name": "f", "parameters": ARGS}, mistral {"name": "f", "arguments": ARGS} (ARGS is
// the call's arguments text, trimmed). The grammar that constrains calls writes exactly
// this shape.
std::string call_json(tool_syntax s, const tool_call& c);

// The conversation with its tool parts written out:
//  - the tools (when any) join the system message (hermes, llama3: a paragraph after the
//    system text, or a system message of their own when there is none) or, for mistral,
//    come back in mistral_tools, which the renderer writes before the last user turn;
//  - an assistant message's calls follow its content in the call syntax (hermes: one
//    <tool_call> block each; llama3: the call's JSON, one call per turn; mistral:
//    "[TOOL_CALLS] [...]");
//  - tool messages: hermes, consecutive ones become one user message of
//    <tool_response> blocks; llama3, role "tool" (the renderer writes "ipython");
//    mistral, role "tool" with "[TOOL_RESULTS] {...}[/TOOL_RESULTS]".
// Throws invalid_argument_error for a tool message without content or a llama3 assistant
// message with more than one call.
struct folded_chat {
  std::vector<chat_message> messages;
  std::string mistral_tools; // "[AVAILABLE_TOOLS] [...][/AVAILABLE_TOOLS]", or ""
};
folded_chat fold_tools(chat_format f, std::vector<chat_message> messages, std::span<const tool_function> tools);

} // namespace troupe::runtime::tools
