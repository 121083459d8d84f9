// The sampler's weight of a token at temperature T: exp((logit - max) / T) rounded to float. Top-p and a draw
// without cuts need the sum of every token's weight, and std::exp on each token of a 128k vocabulary is most of a
// sampling step; bound_weight_sum brackets that sum tightly enough to decide almost every cut and draw, for a
// fraction of the cost, and the sampler computes the exact sum only when the bracket leaves the answer open.
#pragma once

#include <cmath>
#include <span>

namespace troupe::runtime {

// The definition: what the sampler has always computed for one token.
inline float temperature_weight(float logit, double max_logit, double inv_t) {
  return static_cast<float>(std::exp((logit - max_logit) * inv_t));
}

struct weight_sum_bounds {
  double low = 0.0;
  double high = 0.0;
};

// Bounds on the sum of temperature_weight(logit, max_logit, inv_t) over the row: low <= sum <= high holds for the
// exact sum and for a double sum of those floats added one by one in any order. They lie 2^-18 to 2^-16 apart
// relative to the sum, wider the further below the top token the mass lies. Needs max_logit >= every logit,
// max_logit finite, no NaN in the row, and 1e-30 <= inv_t <= 1e30.
weight_sum_bounds bound_weight_sum(std::span<const float> logits, float max_logit, double inv_t);

} // namespace troupe::runtime
