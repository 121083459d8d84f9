// The sampling and stop fields that /v1/completions, /v1/chat/completions and
// the WebSocket generate frame share, read into a request_spec with one set of rules.
#pragma once

#include <boost/json/object.hpp>

#include <optional>
#include <string_view>

#include "net/request_limits.hpp"
#include "troupe/messages.hpp"

namespace troupe::net {

// Reads max_tokens (default_max_tokens when absent), min_tokens (vLLM's), logit_bias, temperature, top_p, top_k,
// min_p, seed, repetition_penalty, frequency_penalty, presence_penalty, stop,
// stop_token_ids, ignore_eos, prompt_logprobs (vLLM's extra), num_speculative_tokens
// (troupe's per-request cap on speculation; 0 turns it off), priority, n, best_of and the
// structured-output constraint (net/structured_output_fields.hpp)
// into `spec`. Throws request_rejected (400 naming the field) on a wrong type or a value
// beyond the server's limits; the sampling ranges are validate_sampling's, once every field is read.
void read_sampling_fields(const boost::json::object& body, const request_limits& limits, int default_max_tokens,
                          request_spec& spec);

// A logprobs count (`name`): absent or null -> -1, else an integer in [0, limits.max_logprobs].
int read_logprobs_count(const boost::json::object& body, std::string_view name, const request_limits& limits);

// A max_tokens-like field (`name`): an integer in [1, limits.max_tokens_limit].
std::optional<int> read_max_tokens(const boost::json::object& body, std::string_view name,
                                   const request_limits& limits);

// The sampling ranges, by the engine's own rules (sampling_params::validate, the one
// place they are written), checked when the request is parsed: a value out of range
// is a 400 naming the field (request_rejected), never an engine failure.
void validate_sampling(const sampling_params& params);

} // namespace troupe::net
