#include "runtime/device_sampling.hpp"

#include "runtime/sampler.hpp"

namespace troupe::runtime {

bool device_can_sample(const sampler_settings& p) {
  return p.repetition_penalty == 1.0f && p.frequency_penalty == 0.0f && p.presence_penalty == 0.0f && p.logprobs < 0 &&
         p.prompt_logprobs < 0;
}

device_sample make_device_sample(const sampler_settings& p, std::uint64_t seed, std::uint64_t step) {
  device_sample s;
  s.temperature = p.temperature;
  s.top_k = p.top_k;
  s.top_p = p.top_p;
  s.min_p = p.min_p;
  s.u = p.greedy() ? 0.0 : counter_uniform(seed, step);
  return s;
}

} // namespace troupe::runtime
