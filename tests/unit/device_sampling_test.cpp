// Which sampling parameters a device may serve from the logits alone, and that the row it
// gets carries the host sampler's draw for the same (seed, step).
#include <doctest/doctest.h>

#include "runtime/device_sampling.hpp"
#include "runtime/sampler.hpp"

using namespace troupe::runtime;

namespace {
// Temperature and every cut set.
sampling_params with_cuts() {
  sampling_params p;
  p.temperature = 0.7f;
  p.top_k = 20;
  p.top_p = 0.9f;
  p.min_p = 0.05f;
  return p;
}
} // namespace

TEST_CASE("device_can_sample: penalties and logprobs need the host, the cuts and seeds do not") {
  auto p = with_cuts();
  p.seed = 3;
  CHECK(device_can_sample(p));
  auto with = [&](auto change) {
    auto q = p;
    change(q);
    return device_can_sample(q);
  };
  CHECK_FALSE(with([](sampling_params& q) { q.repetition_penalty = 1.1f; }));
  CHECK_FALSE(with([](sampling_params& q) { q.frequency_penalty = 0.5f; }));
  CHECK_FALSE(with([](sampling_params& q) { q.presence_penalty = -0.5f; }));
  CHECK_FALSE(with([](sampling_params& q) { q.logprobs = 0; }));
  CHECK_FALSE(with([](sampling_params& q) { q.prompt_logprobs = 1; }));
  CHECK(with([](sampling_params& q) { q.temperature = 0.0f; }));
}

TEST_CASE("make_device_sample: the parameters, and u = counter_uniform(seed, step) unless greedy") {
  auto p = with_cuts();
  const auto s = make_device_sample(p, 1234, 17);
  CHECK(s.temperature == 0.7f);
  CHECK(s.top_k == 20);
  CHECK(s.top_p == 0.9f);
  CHECK(s.min_p == 0.05f);
  CHECK(s.u == counter_uniform(1234, 17));
  CHECK(s.u != counter_uniform(1234, 18));
  p.temperature = 0.0f;
  CHECK(make_device_sample(p, 1234, 17).u == 0.0);
}
