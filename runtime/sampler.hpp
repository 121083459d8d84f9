// Turns one row of logits into a token: penalties, temperature, top-k, top-p,
// min-p, then a draw. The draw uses a counter-based random number (seed, step)
// so a seeded request gets the same tokens whatever shares its batch, and the
// GPU sampler can reproduce the same stream.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "runtime/sampling_params.hpp"

namespace troupe::runtime {

// Uniform in [0, 1) from (seed, counter); stateless, so any thread or device agrees.
double counter_uniform(std::uint64_t seed, std::uint64_t counter);

class sampler {
 public:
  // logits [vocab] is modified in place (penalties, temperature, masks).
  // context = prompt + output so far (repetition penalty); output = output so far
  // (frequency/presence penalties); step = index of the token being sampled (the
  // random counter); seed = the request's seed (or one the engine drew for it).
  token_id sample(std::span<float> logits, const sampling_params& params, std::span<const token_id> context,
                  std::span<const token_id> output, std::uint64_t seed, std::uint64_t step);

 private:
  void apply_penalties(std::span<float> logits, const sampling_params& params, std::span<const token_id> context,
                       std::span<const token_id> output);
  // Scratch reused across calls.
  std::vector<std::int32_t> order_;
  std::vector<float> probs_;
  std::vector<std::int32_t> counts_;
  std::vector<std::int32_t> touched_;
};

} // namespace troupe::runtime
