// Log-probabilities for requests that ask for them (OpenAI's logprobs, vLLM's
// prompt_logprobs): the chosen token's and the top-N of one logits row. They
// come from the model's raw logits, before penalties, temperature and top-k/p
// (vLLM's default "raw_logprobs" mode), so they describe the model, not the sampler.
#pragma once

#include <span>
#include <vector>

#include "runtime/step_batch.hpp"
#include "troupe/sampling_params.hpp"

namespace troupe::runtime {

using troupe::max_logprobs;  // the most top alternatives a request may ask for

struct token_logprobs {
  token_id token = -1;           // the sampled (or, for a prompt, the given) token
  float logprob = 0.0f;          // its log-probability
  std::vector<token_id> top_ids; // the top_n most likely tokens, most likely first
  std::vector<float> top_logprobs;
};

// logits: one raw row [vocab]. top_n in [0, max_logprobs]; ties keep the lower id first.
token_logprobs compute_logprobs(std::span<const float> logits, token_id chosen, int top_n);

} // namespace troupe::runtime
