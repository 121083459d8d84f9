// The sampling and stop fields that /v1/completions, /v1/chat/completions and
// the WebSocket generate frame share, read into a request_spec with one set of rules.
#pragma once

#include <boost/json/object.hpp>

#include <optional>
#include <string_view>

#include "actors/protocol.hpp"
#include "net/request_limits.hpp"

namespace troupe::net {

// Reads max_tokens (default_max_tokens when absent), temperature, top_p, top_k,
// min_p, seed, repetition_penalty, frequency_penalty, presence_penalty, stop,
// stop_token_ids, ignore_eos, prompt_logprobs (vLLM's extra), num_speculative_tokens
// (troupe's per-request cap on speculation; 0 turns it off) and priority into `spec`. Throws request_rejected
// (400 naming the field) on a wrong type or a value out of range.
void read_sampling_fields(const boost::json::object& body, const request_limits& limits, int default_max_tokens,
                          request_spec& spec);

// A logprobs count (`name`): absent or null -> -1, else an integer in [0, limits.max_logprobs].
int read_logprobs_count(const boost::json::object& body, std::string_view name, const request_limits& limits);

// A max_tokens-like field (`name`): an integer in [1, limits.max_tokens_limit].
std::optional<int> read_max_tokens(const boost::json::object& body, std::string_view name,
                                   const request_limits& limits);

// The last check, by the engine's own rules (sampling_params::validate): a
// range the readers above missed still ends as a 400, not an engine failure.
void validate_sampling(const runtime::sampling_params& params);

} // namespace troupe::net
