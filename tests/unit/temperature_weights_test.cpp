// bound_weight_sum: its bracket holds the sum of the sampler's float weights, added in any order, on rows of every
// shape and at every temperature; and it is narrow enough to decide almost every cut.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <vector>

#include "runtime/temperature_weights.hpp"

using namespace troupe::runtime;

namespace {
std::vector<float> row_of_shape(std::mt19937& rng, std::size_t n, int shape) {
  std::normal_distribution<float> noise(0.0f, shape == 1 ? 8.0f : 1.0f);
  std::uniform_int_distribution<std::size_t> any(0, n - 1);
  std::vector<float> row(n);
  for (auto& l : row)
    l = noise(rng);
  if (shape == 2) // peaked
    for (std::size_t j = 0; j < n / 50 + 1; ++j)
      row[any(rng)] += 8.0f;
  if (shape == 3) // masked tokens
    for (std::size_t j = 0; j < n / 2; ++j)
      row[any(rng)] = -std::numeric_limits<float>::infinity();
  if (shape == 4) // one dominant token
    row[any(rng)] = 40.0f;
  if (shape == 5) // logits far from zero: l - max is not exact in float
    for (auto& l : row)
      l = 3000.0f + 100.0f * l;
  return row;
}
} // namespace

TEST_CASE("bound_weight_sum brackets the sum of the weights, added in id order, sorted or reversed") {
  std::mt19937 rng(99);
  std::uniform_real_distribution<double> temperature(0.05, 3.0);
  int rows = 0;
  for (std::size_t n :
       {std::size_t{1}, std::size_t{2}, std::size_t{3}, std::size_t{5}, std::size_t{1000}, std::size_t{32001}}) {
    for (int shape = 0; shape <= 5; ++shape) {
      for (int rep = 0; rep < (n > 10000 ? 4 : 30); ++rep) {
        const auto row = row_of_shape(rng, n, shape);
        const float max_logit = *std::max_element(row.begin(), row.end());
        const double t = rep == 0 ? 1e-3 : rep == 1 ? 100.0 : temperature(rng);
        const double inv_t = 1.0 / t;
        std::vector<float> w(n);
        double in_id_order = 0.0;
        for (std::size_t i = 0; i < n; ++i) {
          w[i] = temperature_weight(row[i], max_logit, inv_t);
          in_id_order += w[i];
        }
        std::sort(w.begin(), w.end(), std::greater<>());
        double sorted = 0.0, reversed = 0.0;
        for (float x : w)
          sorted += x;
        for (auto it = w.rbegin(); it != w.rend(); ++it)
          reversed += *it;
        const auto b = bound_weight_sum(row, max_logit, inv_t);
        CAPTURE(n);
        CAPTURE(shape);
        CAPTURE(t);
        CHECK(b.low <= in_id_order);
        CHECK(in_id_order <= b.high);
        CHECK(b.low <= sorted);
        CHECK(sorted <= b.high);
        CHECK(b.low <= reversed);
        CHECK(reversed <= b.high);
        ++rows;
      }
    }
  }
  CHECK(rows > 500);
}

TEST_CASE("bound_weight_sum is narrow: a few parts in a million of the sum") {
  std::mt19937 rng(4);
  for (int shape : {0, 2, 4}) {
    const auto row = row_of_shape(rng, 32000, shape);
    const float max_logit = *std::max_element(row.begin(), row.end());
    for (double t : {0.5, 0.8, 1.0, 1.5}) {
      const auto b = bound_weight_sum(row, max_logit, 1.0 / t);
      CHECK((b.high - b.low) / b.low < 0x1p-16);
    }
  }
}
