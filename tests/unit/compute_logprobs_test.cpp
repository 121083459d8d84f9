// compute_logprobs is log_softmax of the raw row: probabilities sum to one, the
// top n come most likely first (ties by lower id), and the chosen token's value
// is its own whether or not it is among them.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <stdexcept>
#include <vector>

#include "runtime/logprobs.hpp"

using troupe::runtime::compute_logprobs;

TEST_CASE("logprobs are log_softmax of the row and the top n are sorted") {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> row(1000);
  for (auto& x : row)
    x = normal(rng);
  double total = 0;
  for (int t = 0; t < 1000; ++t)
    total += std::exp(static_cast<double>(compute_logprobs(row, t, 0).logprob));
  CHECK(total == doctest::Approx(1.0).epsilon(1e-5));

  auto lp = compute_logprobs(row, 3, 5);
  REQUIRE(lp.top_ids.size() == 5);
  CHECK(lp.token == 3);
  for (int i = 1; i < 5; ++i)
    CHECK(lp.top_logprobs[i - 1] >= lp.top_logprobs[i]);
  // The best logit is the top one, and each top value is its token's own logprob.
  auto best = std::max_element(row.begin(), row.end()) - row.begin();
  CHECK(lp.top_ids[0] == best);
  for (int i = 0; i < 5; ++i)
    CHECK(lp.top_logprobs[i] == doctest::Approx(compute_logprobs(row, lp.top_ids[i], 0).logprob));
}

TEST_CASE("ties keep the lower id first and top n is capped at 20 and the vocabulary") {
  std::vector<float> flat(8, 1.0f);
  auto lp = compute_logprobs(flat, 5, 3);
  CHECK(lp.top_ids == std::vector<int>{0, 1, 2});
  CHECK(lp.logprob == doctest::Approx(std::log(1.0 / 8)));
  CHECK(compute_logprobs(flat, 0, 50).top_ids.size() == 8);
  std::vector<float> wide(100, 0.0f);
  CHECK(compute_logprobs(wide, 0, 50).top_ids.size() == 20);
}

TEST_CASE("a chosen token outside the vocabulary is a logic error") {
  std::vector<float> row(4, 0.0f);
  CHECK_THROWS_AS(compute_logprobs(row, 4, 1), std::logic_error);
  CHECK_THROWS_AS(compute_logprobs(row, -1, 1), std::logic_error);
}
