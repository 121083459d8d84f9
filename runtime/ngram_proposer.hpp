// Prompt-lookup decoding: a draft model that costs nothing. If the last few
// tokens appeared earlier in the prompt or output, guess that what followed
// them then follows them again (code edits, quoting, repetitive text).
#pragma once

#include <cstddef>
#include <span>

#include "runtime/step_batch.hpp"

namespace troupe::runtime {

class ngram_proposer {
 public:
  // Match lengths tried, longest first; a longer match is more likely to continue the same way.
  // Throws std::invalid_argument unless 1 <= ngram_min <= ngram_max.
  ngram_proposer(int ngram_min, int ngram_max);

  // history = prompt + output. For n from ngram_max down to ngram_min, finds
  // the most recent earlier occurrence of history's last n tokens and writes
  // up to min(k, out.size()) of the tokens that followed it to out; returns
  // how many (0 when no n matches). The draft is deterministic: q is one-hot
  // on each proposed token (spec_input::draft_probs stays empty).
  //
  // When the occurrence overlaps the suffix (a repeating pattern such as
  // "a b a b a b"), the continuation runs into the proposal itself, which
  // extends the pattern periodically instead of stopping at history's end.
  std::size_t propose(std::span<const token_id> history, int k, std::span<token_id> out) const;

  int ngram_min() const { return min_; }
  int ngram_max() const { return max_; }

 private:
  int min_;
  int max_;
};

} // namespace troupe::runtime
