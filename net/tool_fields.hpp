// The tool-calling fields of a chat request (OpenAI's tools, tool_choice,
// parallel_tool_calls, and an assistant message's tool_calls), read with the rules
// /v1/chat/completions and the WebSocket generate frame share. Their types and shapes are
// checked here (400 naming the field); what they mean (a tool_choice naming a function
// that is not among the tools, a schema that does not compile) is the engine's check.
#pragma once

#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

#include <string>
#include <vector>

#include "troupe/messages.hpp"

namespace troupe::net {

// tools: [{"type": "function", "function": {"name", "description"?, "parameters"?, "strict"?}}];
// tool_choice: "none" | "auto" | "required" | {"type": "function", "function": {"name"}}
// (default auto, as OpenAI's when tools are given); parallel_tool_calls: bool (default true).
void read_tool_fields(const boost::json::object& body, request_spec& spec);

// An assistant message's "tool_calls": [{"id", "type": "function", "function": {"name",
// "arguments": JSON text}}]. param names the message ("messages.[2]").
std::vector<tool_call> read_tool_calls(const boost::json::value& calls, const std::string& param);

// The JSON OpenAI gives a call: {"id", "type": "function", "function": {"name", "arguments"}},
// with "index" first when index >= 0 (a streamed delta's).
boost::json::object tool_call_json(const tool_call& call, int index = -1);

} // namespace troupe::net
