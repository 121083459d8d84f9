// One sequence's progress through its constraint: the parse state after each of its output
// tokens, so that a row of any output index (a decode, a verified draft's row, a step after a
// rollback) gets its mask from the longest prefix already walked.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "runtime/structured/compiled_constraint.hpp"

namespace troupe::runtime::structured {

class sequence_constraint {
 public:
  explicit sequence_constraint(std::shared_ptr<const compiled_constraint> c);

  // The parse state after the output tokens `output` (dead when they left the grammar).
  const match_state& state_after(std::span<const token_id> output);

  // The ids to ban in the row that samples the token after `output`: every token the grammar
  // does not take, and the stop ids unless the grammar accepts the output as it is. Sorted,
  // distinct, into `banned`. Returns false, banning nothing, when the output already left the
  // grammar: only a row past a rejected draft can be there, and its draw is never emitted.
  bool banned_after(std::span<const token_id> output, std::span<const token_id> stop_ids,
                    std::vector<token_id>& banned);

  const compiled_constraint& constraint() const { return *constraint_; }

 private:
  std::shared_ptr<const compiled_constraint> constraint_;
  std::vector<token_id> tokens_;    // the output walked so far
  std::vector<match_state> states_; // states_[i]: after tokens_[0, i)
};

} // namespace troupe::runtime::structured
