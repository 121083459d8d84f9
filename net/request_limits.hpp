// What the server accepts from one request, beyond the sampling ranges: bounds
// that keep a single client from costing the others memory or time. The defaults
// here are troupe-serve's ([server] keys of the same names).
#pragma once

#include <cstddef>

#include "troupe/sampling_params.hpp"

namespace troupe::net {

struct request_limits {
  int max_prompt_tokens = 4096;        // prompts given as token ids (text prompts are counted by the engine)
  int max_tokens_limit = 4096;         // the largest max_tokens; also chat's default ("until the context is full")
  std::size_t max_stop_strings = 8;
  std::size_t max_stop_length = 256;   // bytes per stop string
  int max_json_depth = 32;             // nested arrays/objects; {} is depth 1
  int max_logprobs = troupe::max_logprobs;  // completions' logprobs, chat's top_logprobs; at most troupe::max_logprobs
};

} // namespace troupe::net
