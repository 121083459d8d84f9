// OpenAI-compatible response bodies and Server-Sent Events framing, built from
// the engine's results. Every builder returns the JSON text to send.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <boost/json/value.hpp>

#include <span>

#include "troupe/messages.hpp"

namespace troupe::net {

// /v1/completions' "logprobs" object for `list` (prompt tokens first when echoed):
// {"tokens", "token_logprobs", "top_logprobs": [{token: logprob}], "text_offset"}.
// A NaN logprob (the prompt's first token) is null there, and its top_logprobs
// entry too. text_offset counts characters (code points) from `offset`, which
// is advanced past the tokens, so a stream's chunks continue each other.
boost::json::object completion_logprobs(std::span<const token_logprob> list, std::size_t& offset);

// /v1/chat/completions' "logprobs" object: {"content": [{"token", "logprob",
// "bytes", "top_logprobs": [{"token", "logprob", "bytes"}]}]}.
boost::json::object chat_logprobs(std::span<const token_logprob> list);

// The engine's finish reason in OpenAI's words: "stop" and "length" stay,
// "cancelled" becomes "abort" (vLLM's word for a request ended by the server
// or its client; OpenAI has none). Anything else passes through, so mapping twice is harmless.
std::string_view openai_finish_reason(std::string_view engine_reason);

// Which endpoint a stream belongs to: their chunks' "object" differ.
enum class endpoint { completions, chat };

// One choice of an answer that is not streamed; its index is its place in the list.
struct response_choice {
  std::string_view text;                 // completions' text, chat's message content
  std::string_view finish_reason;        // the engine's, mapped by openai_finish_reason
  boost::json::value logprobs = nullptr; // null, or completion_logprobs / chat_logprobs
  std::span<const tool_call> tool_calls; // chat: the calls the message made (content is then null when empty)
};

// POST /v1/completions, stream false: {"id", "object": "text_completion", "created",
// "model", "choices": [{"index", "text", "logprobs", "finish_reason"}, ...], "usage"}.
std::string completion_response(std::string_view id, std::int64_t created, std::string_view model,
                                std::vector<response_choice> choices, const usage_info& usage);

// One streamed completion chunk for choice `index`; finish_reason null until the choice's last.
// include_usage (stream_options.include_usage): "usage": null on each chunk, as OpenAI does.
std::string completion_chunk(std::string_view id, std::int64_t created, std::string_view model, int index,
                             std::string_view text, std::optional<std::string_view> finish_reason,
                             bool include_usage = false, boost::json::value logprobs = nullptr);

// POST /v1/chat/completions, stream false: "object": "chat.completion",
// each choice's "message" = {"role": "assistant", "content"}.
std::string chat_response(std::string_view id, std::int64_t created, std::string_view model,
                          std::vector<response_choice> choices, const usage_info& usage);

// One "chat.completion.chunk" for choice `index`: the delta holds role and/or content when given
// (OpenAI's first chunk: role "assistant", content ""; the last: {} with the finish_reason).
std::string chat_chunk(std::string_view id, std::int64_t created, std::string_view model, int index,
                       std::optional<std::string_view> role, std::optional<std::string_view> content,
                       std::optional<std::string_view> finish_reason, bool include_usage = false,
                       boost::json::value logprobs = nullptr);

// A chat chunk whose delta carries whole tool calls: {"tool_calls": [{"index", "id", "type":
// "function", "function": {"name", "arguments"}}]}, numbered from first_index within the choice.
std::string chat_tool_calls_chunk(std::string_view id, std::int64_t created, std::string_view model, int index,
                                  std::span<const tool_call> calls, int first_index, bool include_usage = false);

// The extra last chunk of stream_options.include_usage: "choices": [] and the usage.
std::string usage_chunk(endpoint kind, std::string_view id, std::int64_t created, std::string_view model,
                        const usage_info& usage);

// GET /v1/models: {"object": "list", "data": [{"id", "object": "model", "created",
// "owned_by": "troupe", "max_model_len"}]} (max_model_len as vLLM reports it).
std::string models_list(std::string_view model_id, std::int64_t created, int max_model_len);

// Server-Sent Events framing of a stream.
std::string sse_event(std::string_view json); // "data: <json>\n\n"
std::string sse_done();                       // "data: [DONE]\n\n"

} // namespace troupe::net
