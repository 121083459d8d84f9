// OpenAI-compatible request bodies (POST /v1/completions, /v1/chat/completions)
// parsed into the engine's request_spec, or refused with the error to answer.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "net/api_error.hpp"
#include "net/request_limits.hpp"
#include "troupe/messages.hpp"

namespace troupe::net {

struct completion_request {
  std::string model;            // "" when the client named none
  request_spec spec;            // prompt or prompt_ids, params (max_tokens default: troupe::default_max_tokens), priority
  bool stream = false;
  bool echo = false;
  int logprobs = -1;            // -1 = not asked
  bool include_usage = false;   // stream_options.include_usage
};

struct chat_request {
  std::string model;
  request_spec spec; // messages, tools, enable_thinking; params (max_tokens default:
                     // limits.max_tokens_limit); add_special_tokens false
  bool stream = false;
  int top_logprobs = -1;        // -1 = logprobs not asked; 0.. when logprobs is true
  bool include_usage = false;
};

// Unknown fields are ignored, as OpenAI does; a known field of the wrong type
// or out of range is a 400 naming it (error.param).
std::variant<completion_request, api_error> parse_completion_request(std::string_view body,
                                                                     const request_limits& limits);
std::variant<chat_request, api_error> parse_chat_request(std::string_view body, const request_limits& limits);

} // namespace troupe::net
