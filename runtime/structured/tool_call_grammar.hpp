// The grammar of a reply that calls tools (tool_choice required or a named function): the
// chat format's call syntax around calls whose name is one of the tools and whose
// arguments follow that tool's JSON Schema, so every call parses and validates.
#pragma once

#include <span>
#include <string>

#include "runtime/structured/grammar.hpp"
#include "runtime/tools/tool_syntax.hpp"
#include "troupe/tools.hpp"

namespace troupe::runtime::structured {

// The reply is, exactly (CALL = the call's JSON as tools::call_json writes it):
//   hermes:  "<tool_call>\n" CALL "\n</tool_call>", and with `parallel` more such blocks
//            after a "\n" each;
//   llama3:  CALL (one call: Llama's JSON format has no parallel calls);
//   mistral: "[" CALL ("," " " CALL)* "]" with `parallel`, else "[" CALL "]".
// Throws invalid_argument_error (param "tools") for no tools, or a tool whose parameters
// are not a schema the JSON Schema compiler takes (its message named with the tool).
grammar tool_call_grammar(tools::tool_syntax syntax, std::span<const tool_function> tools, bool parallel);

// The constraint text for output_constraint::kind::tool_calls, and back: the syntax, the
// parallel flag and the tools (name and parameters) as one JSON object, so that the
// constraint cache keys and compiles it like any other.
std::string tool_call_constraint_text(tools::tool_syntax syntax, std::span<const tool_function> tools, bool parallel);
grammar tool_call_grammar_from_text(const std::string& text);

} // namespace troupe::runtime::structured
