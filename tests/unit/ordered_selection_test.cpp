// ordered_selection: whatever sequence of takes, ids() is the head of the full order (logit descending, ties by
// ascending id, -0 tied with +0, -inf last), which a stable sort by `>` defines.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "runtime/ordered_selection.hpp"

using namespace troupe::runtime;
using troupe::token_id;

namespace {
std::vector<token_id> full_order(const std::vector<float>& row) {
  std::vector<token_id> ids(row.size());
  std::iota(ids.begin(), ids.end(), 0);
  std::stable_sort(ids.begin(), ids.end(), [&](token_id a, token_id b) { return row[a] > row[b]; });
  return ids;
}

bool is_head(std::span<const token_id> ids, const std::vector<token_id>& order) {
  return ids.size() <= order.size() && std::equal(ids.begin(), ids.end(), order.begin());
}

// Noise, coarse ties (bands wide enough for the radix sort, full of ties), -inf, signed zeros.
std::vector<float> row_of_shape(std::mt19937& rng, std::size_t n, int shape) {
  std::normal_distribution<float> noise(0.0f, 2.0f);
  std::uniform_int_distribution<int> pick(0, 9);
  std::vector<float> row(n);
  for (auto& l : row) {
    l = noise(rng);
    if (shape == 1)
      l = std::round(l);
    if (shape == 2 && pick(rng) < 3)
      l = -std::numeric_limits<float>::infinity();
    if (shape == 3 && pick(rng) < 4)
      l = pick(rng) < 5 ? 0.0f : -0.0f;
  }
  return row;
}
} // namespace

TEST_CASE("take_down_to and take_next extend the head of the order") {
  std::mt19937 rng(1);
  ordered_selection s;
  for (std::size_t n : {std::size_t{1}, std::size_t{2}, std::size_t{7}, std::size_t{1000}, std::size_t{5003}}) {
    for (int shape = 0; shape <= 3; ++shape) {
      const auto row = row_of_shape(rng, n, shape);
      const auto order = full_order(row);
      s.reset(row);
      CHECK(s.ids().empty());
      // Bounds going down in uneven steps, some not lower than the last (nothing to take), then a few single steps.
      std::vector<float> bounds{3.0f, 5.0f, 1.0f, 1.0f, 0.0f, -0.5f};
      std::size_t taken = 0;
      float reached = std::numeric_limits<float>::infinity();
      for (float bound : bounds) {
        const std::size_t added = s.take_down_to(bound);
        taken += added;
        reached = std::min(reached, bound);
        CAPTURE(bound);
        CHECK(s.ids().size() == taken);
        CHECK(is_head(s.ids(), order));
        if (!s.ids().empty())
          CHECK(row[s.ids().back()] >= reached);
        if (s.ids().size() < n)
          CHECK(row[order[s.ids().size()]] < reached);
      }
      for (int step = 0; step < 5 && !s.complete(); ++step) {
        const std::size_t added = s.take_next();
        CHECK(added > 0);
        CHECK(is_head(s.ids(), order));
        if (!s.complete())
          CHECK(row[order[s.ids().size()]] < row[s.ids().back()]); // the whole tie group came
      }
      s.take_down_to(-std::numeric_limits<float>::infinity());
      CHECK(s.complete());
      CHECK(is_head(s.ids(), order));
      CHECK(s.take_next() == 0);
    }
  }
}

TEST_CASE("one take of the whole row is the full order") {
  std::mt19937 rng(2);
  ordered_selection s;
  for (int shape = 0; shape <= 3; ++shape) {
    const auto row = row_of_shape(rng, 40001, shape);
    s.reset(row);
    s.take_down_to(-std::numeric_limits<float>::infinity());
    CHECK(s.complete());
    CHECK(is_head(s.ids(), full_order(row)));
  }
}

TEST_CASE("take_best takes the n best, ties by id") {
  std::mt19937 rng(3);
  ordered_selection s;
  for (std::size_t n : {std::size_t{1}, std::size_t{3}, std::size_t{1000}, std::size_t{32000}}) {
    for (int shape = 0; shape <= 3; ++shape) {
      const auto row = row_of_shape(rng, n, shape);
      const auto order = full_order(row);
      for (std::size_t k : {std::size_t{1}, std::size_t{2}, std::size_t{50}, std::size_t{300}, n / 2, n}) {
        if (k == 0 || k > n)
          continue;
        s.reset(row);
        s.take_best(k);
        CAPTURE(n);
        CAPTURE(shape);
        CAPTURE(k);
        CHECK(s.ids().size() == k);
        CHECK(is_head(s.ids(), order));
      }
    }
  }
}
