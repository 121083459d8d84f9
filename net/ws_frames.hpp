// The WebSocket /v1/stream protocol's JSON text frames (DESIGN.md §5): client
// frames parsed into engine requests, server frames built from engine messages.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "net/api_error.hpp"
#include "net/request_limits.hpp"
#include "troupe/messages.hpp"

namespace troupe::net {

// {"type":"generate","id", "prompt" | "prompt_ids" | "messages", sampling fields...}; with
// messages also tools, tool_choice, parallel_tool_calls and chat_template_kwargs, as on
// /v1/chat/completions.
struct ws_generate {
  std::string id_json; // the client's id as JSON ("7" or "\"a\""), echoed in every reply frame
  request_spec spec;   // messages (and tools) for a chat: the engine's chat template fills the prompt
  bool stream = true; // false: the client asked for the whole text at once
};

// {"type":"cancel","id"}.
struct ws_cancel {
  std::string id_json;
};

// {"type":"auth","key"}: a browser's API key (it cannot set the upgrade's headers); no id.
struct ws_auth {
  std::string key;
};

// A frame refused: id_json is the client's id when it could be read, else "null",
// so the error frame still reaches the right request.
struct ws_rejected {
  std::string id_json;
  api_error error;
};

// Malformed JSON, too deep, not an object, an unknown type, a missing or
// non-string/non-integer id, or any field as openai_requests would refuse it
// -> ws_rejected. A generate needs exactly one of prompt, prompt_ids, messages;
// max_tokens defaults to troupe::default_max_tokens for a prompt and to limits.max_tokens_limit for
// messages, as on /v1/completions and /v1/chat/completions.
std::variant<ws_generate, ws_cancel, ws_auth, ws_rejected> parse_ws_frame(std::string_view text,
                                                                          const request_limits& limits);

// The code of an error frame for a refused client frame (the engine's failed.code for the same case).
inline constexpr std::string_view ws_invalid_request = "invalid_request";

// {"type":"delta","id","index","text","token_ids":[...]}: index is the choice (0 .. n-1)
// the tokens belong to. Plus, when the request asked:
// "logprobs": [{"token_id","token","logprob","top_logprobs":[{"token_id","token","logprob"}]}]
// (one per token id), "prompt_logprobs" (the same shape; the first token's logprob
// is null) and "prompt_text" (echo), on each choice's first delta; "tool_calls" (OpenAI's
// shape with "index": the calls the model completed in these tokens, numbered from first_call
// within the choice); and "finish_reason" ("stop", "length", "tool_calls") on the choice's
// last delta.
std::string delta_frame(std::string_view id_json, std::string_view text, std::span<const token_id> ids,
                        std::span<const token_logprob> logprobs = {},
                        std::span<const token_logprob> prompt_logprobs = {}, std::string_view prompt_text = {},
                        int index = 0, std::string_view finish_reason = {},
                        std::span<const tool_call> tool_calls = {}, int first_call = 0);

// {"type":"done","id","finish_reason","usage":{"prompt_tokens","completion_tokens",
// "total_tokens","cached_tokens"},"timings":{"queue_ms","ttft_ms","tpot_ms","e2e_ms"}}.
// finish_reason is the engine's own ("stop", "length", "cancelled"; with n > 1, choice 0's
// unless cancelled): this is our protocol.
std::string done_frame(std::string_view id_json, const finished& result);

// {"type":"error","id","code","message"}; id_json "null" (or "") when the id is unknown.
std::string error_frame(std::string_view id_json, std::string_view code, std::string_view message);

} // namespace troupe::net
