// The check shared by the GPU sampling tests: a token the GPU drew must be the host
// sampler's for the same row, parameters and u, or sit right at a boundary of u's interval
// in the host's candidate order (the GPU sums weights in fixed point, the host in double).
#pragma once

#include <doctest/doctest.h>

#include <cmath>
#include <span>
#include <vector>

#include "runtime/sampler.hpp"

namespace troupe::testing::gpu {

// Returns true if `token` is the host's draw, false if it differs only at a boundary
// (within 1e-6 of u); fails the test otherwise. context and output: the penalties' history;
// edits: the row's logit_bias and banned ids.
inline bool host_would_draw(std::span<const float> row, const runtime::sampler_settings& p, double u,
                            runtime::token_id token, std::span<const runtime::token_id> context = {},
                            std::span<const runtime::token_id> output = {}, const runtime::logit_edits& edits = {}) {
  runtime::sampler s;
  std::vector<float> copy(row.begin(), row.end());
  auto c = s.candidates(copy, p, context, output, edits);
  const auto expected = c.ids.size() == 1 ? c.ids[0] : runtime::sampler::draw(c, u);
  if (token == expected)
    return true;
  INFO("gpu drew " << token << ", the host " << expected << " (u = " << u << ")");
  bool near_boundary = false;
  double cum = 0;
  for (std::size_t i = 0; i < c.ids.size(); ++i) {
    const double before = cum / c.total;
    cum += c.weights[i];
    if (c.ids[i] == token)
      near_boundary = std::abs(u - before) < 1e-6 || std::abs(u - cum / c.total) < 1e-6;
  }
  CHECK(near_boundary);
  return false;
}

} // namespace troupe::testing::gpu
