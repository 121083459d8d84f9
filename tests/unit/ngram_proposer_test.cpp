// Prompt-lookup drafting: the longest recent match of the history's tail wins, what followed it is proposed (up to k
// tokens), a repeating pattern continues periodically, and no match proposes nothing.
#include <doctest/doctest.h>

#include <stdexcept>
#include <vector>

#include "runtime/ngram_proposer.hpp"

using troupe::runtime::ngram_proposer;
using troupe::runtime::token_id;

namespace {
std::vector<token_id> propose(const ngram_proposer& p, const std::vector<token_id>& history, int k) {
  std::vector<token_id> out(static_cast<std::size_t>(k > 0 ? k : 0) + 2, -1);
  out.resize(p.propose(history, k, out));
  return out;
}
} // namespace

TEST_CASE("the tokens that followed the earlier occurrence of the tail are proposed, at most k of them") {
  ngram_proposer p(1, 3);
  //                              0  1  2  3  4  5  6  7  8  9
  std::vector<token_id> history{10, 11, 12, 13, 14, 15, 16, 11, 12, 13};
  CHECK(propose(p, history, 3) == std::vector<token_id>{14, 15, 16});
  CHECK(propose(p, history, 2) == std::vector<token_id>{14, 15});
  CHECK(propose(p, history, 0).empty());
}

TEST_CASE("a longer match wins over a more recent shorter one") {
  ngram_proposer p(1, 3);
  // Tail "1 2 3": "2 3" last occurred at 6 (followed by 9), "1 2 3" only at 0 (followed by 4).
  std::vector<token_id> history{1, 2, 3, 4, 5, 2, 3, 9, 1, 2, 3};
  CHECK(propose(p, history, 2) == std::vector<token_id>{4, 5});
  // Limited to bigrams, the most recent "2 3" wins.
  ngram_proposer bigram(1, 2);
  CHECK(propose(bigram, history, 2) == std::vector<token_id>{9, 1});
}

TEST_CASE("among equal-length matches the most recent one is used") {
  ngram_proposer p(2, 2);
  std::vector<token_id> history{7, 8, 1, 7, 8, 2, 7, 8};
  CHECK(propose(p, history, 1) == std::vector<token_id>{2});
}

TEST_CASE("when only a short match exists the proposer falls back to it, down to ngram_min") {
  std::vector<token_id> history{4, 5, 6, 9, 6};
  CHECK(propose(ngram_proposer(1, 4), history, 2) == std::vector<token_id>{9, 6});
  CHECK(propose(ngram_proposer(2, 4), history, 2).empty());
}

TEST_CASE("a repeating pattern is continued periodically past the end of the history") {
  ngram_proposer p(1, 3);
  std::vector<token_id> history{5, 1, 2, 1, 2, 1, 2};
  CHECK(propose(p, history, 5) == std::vector<token_id>{1, 2, 1, 2, 1});
  std::vector<token_id> run{3, 3, 3};
  CHECK(propose(p, run, 4) == std::vector<token_id>{3, 3, 3, 3});
}

TEST_CASE("no earlier occurrence or too short a history proposes nothing") {
  ngram_proposer p(1, 3);
  CHECK(propose(p, {1, 2, 3, 4, 5}, 3).empty());
  CHECK(propose(p, {7}, 3).empty());
  CHECK(propose(p, {}, 3).empty());
}

TEST_CASE("the output span bounds the proposal as k does") {
  ngram_proposer p(1, 2);
  std::vector<token_id> history{1, 2, 3, 4, 1};
  std::vector<token_id> out(2);
  CHECK(p.propose(history, 10, out) == 2);
  CHECK(out == std::vector<token_id>{2, 3});
}

TEST_CASE("match lengths out of order are refused") {
  CHECK_THROWS_AS(ngram_proposer(0, 2), std::invalid_argument);
  CHECK_THROWS_AS(ngram_proposer(3, 2), std::invalid_argument);
  CHECK_NOTHROW(ngram_proposer(2, 2));
}
