// GET /playground/config: what the playground page needs to know of this server to
// bound its controls (the model, its context, the request limits).
#pragma once

#include <string>

#include "net/request_limits.hpp"
#include "troupe/messages.hpp"

namespace troupe::net {

// {"model","chat_format","max_model_len","max_tokens_limit","max_stop_strings",
//  "max_stop_length","temperature_max"} as a JSON object.
std::string playground_config(const model_info& info, const request_limits& limits);

} // namespace troupe::net
