// A backwards scan for the latest earlier match of history's suffix. O(length
// * n) per call with no allocation; prompts are short next to the model step
// this replaces, so no index is kept between calls.
#include "runtime/ngram_proposer.hpp"

#include <algorithm>
#include <stdexcept>

namespace troupe::runtime {

ngram_proposer::ngram_proposer(int ngram_min, int ngram_max) : min_(ngram_min), max_(ngram_max) {
  if (ngram_min < 1 || ngram_max < ngram_min)
    throw std::invalid_argument("ngram_proposer: need 1 <= ngram_min <= ngram_max");
}

std::size_t ngram_proposer::propose(std::span<const token_id> history, int k, std::span<token_id> out) const {
  const std::size_t want = std::min(out.size(), static_cast<std::size_t>(std::max(k, 0)));
  const std::size_t len = history.size();
  if (want == 0 || len < 2)
    return 0;
  // n <= len - 1: the suffix needs an earlier start to occur at. n stops at ngram_min >= 1, so --n never wraps.
  const std::size_t longest = std::min(static_cast<std::size_t>(max_), len - 1);
  for (std::size_t n = longest; n >= static_cast<std::size_t>(min_); --n) {
    const auto suffix = history.subspan(len - n);
    // Latest start first; start < len - n, so at least one token follows it.
    for (std::size_t start = len - n; start-- > 0;) {
      if (!std::equal(suffix.begin(), suffix.end(), history.begin() + start))
        continue;
      // Copy what followed; reading past history's end reads the proposal
      // (an overlapping copy, as in LZ77), which repeats the period len - n - start.
      const std::size_t from = start + n;
      for (std::size_t j = 0; j < want; ++j) {
        const std::size_t at = from + j;
        out[j] = at < len ? history[at] : out[at - len];
      }
      return want;
    }
  }
  return 0;
}

} // namespace troupe::runtime
