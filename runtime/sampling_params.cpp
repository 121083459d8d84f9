// Range checks for sampling parameters.
#include "runtime/sampling_params.hpp"

#include <cmath>

#include "runtime/errors.hpp"
#include "runtime/logprobs.hpp"

namespace troupe::runtime {

namespace {
void require(bool ok, const std::string& message) {
  if (!ok)
    throw invalid_argument_error(message);
}
bool finite(float x) { return std::isfinite(x); }
} // namespace

void sampling_params::validate() const {
  require(finite(temperature) && temperature >= 0.0f, "temperature must be >= 0, got " + std::to_string(temperature));
  require(finite(top_p) && top_p > 0.0f && top_p <= 1.0f, "top_p must be in (0, 1], got " + std::to_string(top_p));
  require(top_k >= -1, "top_k must be -1, 0 (off) or positive, got " + std::to_string(top_k));
  require(finite(min_p) && min_p >= 0.0f && min_p <= 1.0f, "min_p must be in [0, 1], got " + std::to_string(min_p));
  require(finite(repetition_penalty) && repetition_penalty > 0.0f,
          "repetition_penalty must be > 0, got " + std::to_string(repetition_penalty));
  require(finite(frequency_penalty) && frequency_penalty >= -2.0f && frequency_penalty <= 2.0f,
          "frequency_penalty must be in [-2, 2], got " + std::to_string(frequency_penalty));
  require(finite(presence_penalty) && presence_penalty >= -2.0f && presence_penalty <= 2.0f,
          "presence_penalty must be in [-2, 2], got " + std::to_string(presence_penalty));
  require(max_tokens >= 1, "max_tokens must be >= 1, got " + std::to_string(max_tokens));
  require(logprobs >= -1 && logprobs <= max_logprobs,
          "logprobs must be in [0, " + std::to_string(max_logprobs) + "], got " + std::to_string(logprobs));
  require(prompt_logprobs >= -1 && prompt_logprobs <= max_logprobs,
          "prompt_logprobs must be in [0, " + std::to_string(max_logprobs) + "], got " +
              std::to_string(prompt_logprobs));
  for (const auto& s : stop)
    require(!s.empty(), "stop strings must not be empty");
  for (auto id : stop_token_ids)
    require(id >= 0, "stop_token_ids must be >= 0, got " + std::to_string(id));
}

} // namespace troupe::runtime
