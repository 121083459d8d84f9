// What finished steps leave for the KV cache's next prepare: full blocks for the
// prefix index, the slots of rejected drafts to trim, and choices forked off a sequence. step_outcome fills it;
// the scheduler carries it to the kv_cache actor inside kv_prepare.
#pragma once

#include <vector>

#include "runtime/sequence.hpp"

namespace troupe::runtime {

// Bookkeeping that finished steps leave for the KV cache's next prepare.
struct kv_followup {
  // Sequences whose tokens [0, n) are now computed: their full blocks enter the prefix index.
  std::vector<seq_id> computed_ids;
  std::vector<std::vector<token_id>> computed_tokens;
  std::vector<int> computed_counts;
  // Speculation's rollback: keep only the blocks of the first n tokens.
  std::vector<seq_id> trim_ids;
  std::vector<int> trim_tokens;
  // n / best_of: fork_children[i] shares every block of fork_parents[i] (copy on write), before any release.
  std::vector<seq_id> fork_parents, fork_children;
};

} // namespace troupe::runtime
