// n-gram drafts: deterministic, so no probability rows travel with them.
#include "runtime/ngram_draft.hpp"

namespace troupe::runtime {

std::vector<draft_output> ngram_draft::propose(std::span<const draft_input> seqs) {
  std::vector<draft_output> out(seqs.size());
  for (std::size_t i = 0; i < seqs.size(); ++i) {
    auto& o = out[i];
    o.tokens.resize(static_cast<std::size_t>(std::max(seqs[i].k, 0)));
    o.tokens.resize(lookup_.propose(seqs[i].history, seqs[i].k, o.tokens));
  }
  return out;
}

} // namespace troupe::runtime
