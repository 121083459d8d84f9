// What a request's tools mean for the engine: which are written into the prompt, whether
// the output is constrained to calls, and whether it is parsed for calls. Checked here, so
// that the HTTP server, the WebSocket and a host application get the same errors.
#pragma once

#include <span>
#include <vector>

#include "runtime/tools/tool_syntax.hpp"
#include "troupe/sampling_params.hpp"
#include "troupe/tools.hpp"

namespace troupe::runtime::tools {

struct tool_plan {
  std::vector<tool_function> prompt_tools; // rendered into the prompt (none with tool_choice none)
  output_constraint constraint;            // kind tool_calls for required / a function; else none
  bool parse_calls = false;                // the output is split into text and calls
};

// Throws invalid_argument_error (param "tools" or "tool_choice") for: more than max_tools
// tools; a name OpenAI would refuse or used twice; tools without a chat (is_chat false);
// tool_choice required or a function without tools, or naming a function not among them;
// tool_choice required or a function together with another constraint (response_format,
// guided_*): the output cannot follow both.
tool_plan plan_tools(chat_format f, bool is_chat, std::span<const tool_function> tools, const tool_choice& choice,
                     bool parallel, const output_constraint& other);

} // namespace troupe::runtime::tools
