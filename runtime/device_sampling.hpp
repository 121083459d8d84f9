// Sampling on the device: which rows a runner may sample where the logits are (no
// penalties: they need the sequence's history; no logprobs: they need the logits on
// the host), and what such a row sends down. The law is runtime::sampler's.
#pragma once

#include <cstdint>

#include "runtime/sampler_settings.hpp"

namespace troupe::runtime {

struct device_sample {
  float temperature = 0.0f; // 0: greedy
  int top_k = 0;
  float top_p = 1.0f;
  float min_p = 0.0f;
  double u = 0.0; // counter_uniform(seed, step): the same draw the host sampler makes
};

// True when nothing but the logits row decides the token (see the file comment).
bool device_can_sample(const sampler_settings& params);

device_sample make_device_sample(const sampler_settings& params, std::uint64_t seed, std::uint64_t step);

} // namespace troupe::runtime
