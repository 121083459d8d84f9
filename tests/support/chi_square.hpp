// Pearson's chi-square goodness of fit for the tests that check a sampler's
// output distribution (the speculative verifier's, on synthetic and real rows).
#pragma once

#include <doctest/doctest.h>

#include <cmath>
#include <vector>

namespace troupe::testing {

// Upper tail of the chi-square distribution, Q(df / 2, x / 2): a power series below the mean, a continued
// fraction (modified Lentz) above it, each where it converges fast.
inline double chi_square_tail(double x, int df) {
  const double a = df / 2.0, h = x / 2.0;
  if (h <= 0.0)
    return 1.0;
  const double log_front = -h + a * std::log(h) - std::lgamma(a);
  if (h < a + 1.0) {
    double term = 1.0 / a, sum = term;
    for (int n = 1; n < 1000 && std::abs(term) > std::abs(sum) * 1e-16; ++n) {
      term *= h / (a + n);
      sum += term;
    }
    return 1.0 - sum * std::exp(log_front);
  }
  constexpr double tiny = 1e-300;
  double b = h + 1.0 - a, c = 1.0 / tiny, d = 1.0 / b, frac = d;
  for (int i = 1; i < 1000; ++i) {
    const double an = -i * (i - a);
    b += 2.0;
    d = an * d + b;
    d = std::abs(d) < tiny ? tiny : d;
    c = b + an / c;
    c = std::abs(c) < tiny ? tiny : c;
    d = 1.0 / d;
    frac *= d * c;
    if (std::abs(d * c - 1.0) < 1e-16)
      break;
  }
  return std::exp(log_front) * frac;
}

// Pearson's goodness of fit of counts against probabilities. Cells expected fewer than 5 times are pooled into one
// (the test's approximation needs that); a cell of probability 0 must stay empty, which is checked exactly.
struct fit {
  double statistic = 0;
  int df = 0;
  double p_value = 1;
};

inline fit goodness_of_fit(const std::vector<long>& counts, const std::vector<double>& probs) {
  REQUIRE(counts.size() == probs.size());
  long n = 0;
  for (long c : counts)
    n += c;
  fit f;
  int cells = 0;
  double pooled_expected = 0, pooled_observed = 0;
  for (std::size_t i = 0; i < counts.size(); ++i) {
    if (probs[i] == 0.0) {
      CHECK_MESSAGE(counts[i] == 0, "a token of target probability 0 was emitted: " << i);
      continue;
    }
    const double expected = probs[i] * n;
    if (expected < 5.0) {
      pooled_expected += expected;
      pooled_observed += counts[i];
      continue;
    }
    f.statistic += (counts[i] - expected) * (counts[i] - expected) / expected;
    ++cells;
  }
  if (pooled_expected > 0) {
    f.statistic += (pooled_observed - pooled_expected) * (pooled_observed - pooled_expected) / pooled_expected;
    ++cells;
  }
  f.df = cells - 1;
  f.p_value = f.df > 0 ? chi_square_tail(f.statistic, f.df) : 1.0;
  return f;
}

// Fixed seeds make every statistic below deterministic; a correct verifier passes at this level with certainty
// once it passes at all, and the level still rejects a distribution off by a fraction of a percent at 200k draws.
inline constexpr double min_p_value = 1e-4;

#define CHECK_FITS(counts, probs)                                                            \
  do {                                                                                       \
    auto f_ = ::troupe::testing::goodness_of_fit(counts, probs);                             \
    INFO("chi-square " << f_.statistic << " on " << f_.df << " df, p-value " << f_.p_value); \
    CHECK(f_.p_value > ::troupe::testing::min_p_value);                                      \
  } while (0)

} // namespace troupe::testing
