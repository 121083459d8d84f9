// What the samplers and the logprob code read of a request, and nothing more:
// the per-step messages (sample rows, verify rows, draft entries) carry this
// fixed-size struct, not sampling_params, whose stop strings and stop ids are
// the business of the request's own actors and would be copied every step.
#pragma once

#include "runtime/sampling_params.hpp"

namespace troupe::runtime {

struct sampler_settings {
  float temperature = 1.0f;       // 0 = greedy
  float top_p = 1.0f;
  int top_k = 0;
  float min_p = 0.0f;
  float repetition_penalty = 1.0f;
  float frequency_penalty = 0.0f;
  float presence_penalty = 0.0f;
  int logprobs = -1;              // output rows: the chosen token's logprob and the top n (-1: none)
  int prompt_logprobs = -1;       // prompt rows: the same (-1: none)

  sampler_settings() = default;
  // Implicit on purpose: whoever holds a request's sampling_params can hand them to a sampler.
  sampler_settings(const sampling_params& p)  // NOLINT(google-explicit-constructor)
      : temperature(p.temperature), top_p(p.top_p), top_k(p.top_k), min_p(p.min_p),
        repetition_penalty(p.repetition_penalty), frequency_penalty(p.frequency_penalty),
        presence_penalty(p.presence_penalty), logprobs(p.logprobs), prompt_logprobs(p.prompt_logprobs) {}

  bool greedy() const { return temperature == 0.0f; }
  bool operator==(const sampler_settings&) const = default;
};

} // namespace troupe::runtime
