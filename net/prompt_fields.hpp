// What the model is asked to continue: a prompt (text or token ids) or chat
// messages, read from a request with the rules /v1/* and the WebSocket share.
#pragma once

#include <boost/json/value.hpp>

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "net/request_limits.hpp"
#include "troupe/messages.hpp"

namespace troupe::net {

using chat_messages = std::vector<chat_turn>;

// "prompt": a string, an array of token ids, or a one-element array of either
// (OpenAI's batch form with one prompt). Fills spec.prompt or spec.prompt_ids;
// a batch of several prompts is refused. Throws request_rejected.
void read_prompt(const boost::json::value& prompt, const request_limits& limits, request_spec& spec);

// A non-empty array of token ids, each in [0, 2^31), at most limits.max_prompt_tokens.
std::vector<token_id> read_token_ids(const boost::json::value& ids, std::string_view param,
                                     const request_limits& limits);

// "messages": a non-empty array of {role: system|user|assistant|tool, content:
// string | [{type: "text", text}]}; several text parts are joined with "\n"
// as vLLM does. An assistant message may carry tool_calls (then content may be null or
// absent); a tool message needs tool_call_id. Throws request_rejected naming e.g.
// "messages.[1].role".
chat_messages read_messages(const boost::json::value& messages);

// "chat_template_kwargs" (vLLM's): an object whose only key may be "enable_thinking", a
// boolean or null (null: the default, true), read into spec.enable_thinking. vLLM hands any
// key to Jinja; we have no Jinja, so another key is a 400 naming it
// ("chat_template_kwargs.<key>") rather than an option silently dropped.
void read_chat_template_kwargs(const boost::json::object& body, request_spec& spec);

} // namespace troupe::net
