// Choice ids, seeds and best_of's ranking.
#include "runtime/choices.hpp"

#include <algorithm>
#include <numeric>
#include <stdexcept>
#include <string>

namespace troupe::runtime {

namespace {
constexpr seq_id first_mask = (seq_id{1} << choice_id_shift) - 1;
static_assert(max_choices <= 128, "a choice index must fit the 7 bits above choice_id_shift");
} // namespace

seq_id choice_seq_id(seq_id first, int index) {
  if (index < 0 || index >= max_choices || (first & ~first_mask) != 0)
    throw std::logic_error("choice_seq_id: choice " + std::to_string(index) + " of sequence " + std::to_string(first) +
                           " has no id");
  return first | (static_cast<seq_id>(index) << choice_id_shift);
}

int choice_index(seq_id id) {
  return static_cast<int>(id >> choice_id_shift);
}

seq_id first_choice(seq_id id) {
  return id & first_mask;
}

std::uint64_t choice_seed(std::uint64_t seed, int index) {
  if (index == 0)
    return seed;
  // splitmix64's finaliser over (seed, index): neighbouring indexes land far apart.
  std::uint64_t z = seed + 0x9e3779b97f4a7c15ULL * static_cast<std::uint64_t>(index);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

std::vector<int> best_choices(std::span<const double> cumulative_logprobs, int n) {
  std::vector<int> order(cumulative_logprobs.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return cumulative_logprobs[a] > cumulative_logprobs[b]; });
  order.resize(std::min(order.size(), static_cast<std::size_t>(std::max(n, 0))));
  return order;
}

} // namespace troupe::runtime
