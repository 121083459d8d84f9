// A request's choices as sequences: ids that keep the request's id for choice 0 and
// never meet another request's, seeds that leave choice 0's stream as n = 1 draws it
// and give every other choice its own, and best_of's ranking.
#include <doctest/doctest.h>

#include <set>
#include <stdexcept>
#include <vector>

#include "runtime/choices.hpp"

using namespace troupe::runtime;

TEST_CASE("choice ids: choice 0 is the request's id, the others map back to it and to their index") {
  CHECK(choice_seq_id(42, 0) == 42);
  std::set<seq_id> ids;
  for (int i = 0; i < troupe::max_choices; ++i) {
    const seq_id id = choice_seq_id(42, i);
    CHECK(choice_index(id) == i);
    CHECK(first_choice(id) == 42);
    ids.insert(id);
  }
  CHECK(ids.size() == static_cast<std::size_t>(troupe::max_choices));
  // Another request's choices are other ids.
  for (int i = 0; i < troupe::max_choices; ++i)
    CHECK_FALSE(ids.contains(choice_seq_id(43, i)));
  CHECK_THROWS_AS(choice_seq_id(42, troupe::max_choices), std::logic_error);
  CHECK_THROWS_AS(choice_seq_id(42, -1), std::logic_error);
  CHECK_THROWS_AS(choice_seq_id(choice_seq_id(42, 1), 1), std::logic_error);
}

TEST_CASE("choice seeds: choice 0 keeps the request's seed, every other choice gets its own, the same each time") {
  for (std::uint64_t seed : {0ULL, 1ULL, 12345ULL, ~0ULL}) {
    CHECK(choice_seed(seed, 0) == seed);
    std::set<std::uint64_t> seeds{seed};
    for (int i = 1; i < troupe::max_choices; ++i) {
      CHECK(choice_seed(seed, i) == choice_seed(seed, i));
      seeds.insert(choice_seed(seed, i));
    }
    CHECK(seeds.size() == static_cast<std::size_t>(troupe::max_choices));
  }
  // Neighbouring request seeds do not hand each other's streams around.
  CHECK(choice_seed(7, 1) != choice_seed(8, 0));
  CHECK(choice_seed(7, 1) != choice_seed(8, 1));
}

TEST_CASE("best_choices: the n highest sums of logprobs, best first, ties to the lower index") {
  const std::vector<double> sums{-5.0, -1.5, -9.0, -1.5, -0.25};
  CHECK(best_choices(sums, 1) == std::vector<int>{4});
  CHECK(best_choices(sums, 3) == std::vector<int>{4, 1, 3});
  CHECK(best_choices(sums, 5) == std::vector<int>{4, 1, 3, 0, 2});
  CHECK(best_choices(sums, 9) == std::vector<int>{4, 1, 3, 0, 2});
  CHECK(best_choices(sums, 0).empty());
}
