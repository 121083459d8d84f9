// How a chat format writes tool calls. Three syntaxes cover the formats troupe renders:
//
// hermes  - ChatML models (Qwen2/2.5/3, Hermes) and our own for plain, llama2, phi3 and
//           gemma, which have none: each call is a JSON object inside tags, one block per call,
//             <tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>
//           and results come back as a user turn of <tool_response> blocks.
// llama3  - Llama-3.1+ JSON calls: the reply is the call's JSON object alone (the model may
//           put the special token <|python_tag|> first, which decoding drops),
//             {"name": "f", "parameters": {...}}
//           and results come back as an "ipython" turn.
// mistral - one [TOOL_CALLS] then a JSON list of calls (the marker is a special token in
//           Mistral's v3 tokenizers, so decoding drops it),
//             [TOOL_CALLS] [{"name": "f", "arguments": {...}}]
//           and results as [TOOL_RESULTS] {"content": ..., "call_id": ...}[/TOOL_RESULTS].
#pragma once

#include <random>
#include <string>
#include <string_view>

#include "runtime/chat_template.hpp"

namespace troupe::runtime::tools {

enum class tool_syntax { hermes, llama3, mistral };

std::string_view to_string(tool_syntax s);
// "hermes", "llama3" or "mistral"; throws invalid_argument_error for anything else.
tool_syntax parse_tool_syntax(std::string_view name);

tool_syntax tool_syntax_for(chat_format f);

// A new id for a call the model made, in the shape its format's models were trained on:
// mistral, 9 letters and digits (Mistral's v3 templates refuse any other); the others, OpenAI's
// "call_" and 24 letters and digits.
std::string new_call_id(tool_syntax s, std::mt19937_64& rng);

} // namespace troupe::runtime::tools
