// The maxima the logits comparisons of the tests use.
#pragma once

#include <algorithm>
#include <cmath>
#include <span>

namespace troupe::testing {

inline float max_abs(std::span<const float> v) {
  float m = 0;
  for (float x : v)
    m = std::max(m, std::fabs(x));
  return m;
}

inline float max_abs_diff(std::span<const float> a, std::span<const float> b) {
  float m = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

} // namespace troupe::testing
