// Prompt-lookup speculation as a draft_proposer: no model, no state; the draft
// is the continuation of the latest earlier occurrence of the sequence's tail.
#pragma once

#include "runtime/draft_proposer.hpp"
#include "runtime/ngram_proposer.hpp"

namespace troupe::runtime {

class ngram_draft : public draft_proposer {
 public:
  ngram_draft(int ngram_min, int ngram_max) : lookup_(ngram_min, ngram_max) {}
  std::vector<draft_output> propose(std::span<const draft_input> seqs) override;
  void forget(seq_id) override {}
  void reset() override {}

 private:
  ngram_proposer lookup_;
};

} // namespace troupe::runtime
