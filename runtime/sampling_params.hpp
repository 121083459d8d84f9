// What a request asks of the sampler and of the stop logic, with the OpenAI /
// vLLM meanings and defaults. validate() rejects values out of range with a
// message that names the parameter.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "runtime/step_batch.hpp"

namespace troupe::runtime {

struct sampling_params {
  float temperature = 1.0f;           // 0 = greedy
  float top_p = 1.0f;                 // (0, 1]
  int top_k = 0;                      // 0 or -1 = off
  float min_p = 0.0f;                 // [0, 1]
  std::optional<std::uint64_t> seed;  // same seed -> same tokens, whatever else is in the batch
  float repetition_penalty = 1.0f;    // > 0; over prompt and output (HF / vLLM)
  float frequency_penalty = 0.0f;     // [-2, 2]; over output (OpenAI)
  float presence_penalty = 0.0f;      // [-2, 2]; over output (OpenAI)
  int max_tokens = 16;                // >= 1
  std::vector<std::string> stop;      // stop strings: matched across token boundaries, not emitted
  std::vector<token_id> stop_token_ids;  // extra stop ids besides the model's defaults
  bool ignore_eos = false;            // don't stop on the model's default stop ids
  int logprobs = -1;                  // -1: none; n >= 0: each output token's logprob plus the top n
  int prompt_logprobs = -1;           // -1: none; n >= 0: the same for every prompt token after the first

  // Throws invalid_argument_error naming the field and the allowed range.
  void validate() const;
  bool greedy() const { return temperature == 0.0f; }
};

} // namespace troupe::runtime
