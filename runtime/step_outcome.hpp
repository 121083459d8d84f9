// What a finished step means for its sequences: how far each is now computed,
// which tokens join it (cut at a stop id or its length limit), and what the KV
// cache must learn at the next prepare (full blocks for the prefix index, the
// slots of rejected drafts to trim). Plain logic over scheduler_policy.
#pragma once

#include <span>
#include <vector>

#include "runtime/finish_check.hpp"
#include "runtime/kv_followup.hpp"
#include "runtime/scheduler_policy.hpp"
#include "runtime/step_builder.hpp"

namespace troupe::runtime {

// What one sequence got from a step.
struct sequence_advance {
  std::vector<token_id> tokens; // joined the sequence, the last one possibly ending it
  finish_reason finish = finish_reason::none;
};

struct outcome_settings {
  int block_size = 16;
  bool enable_prefix_caching = true;
  int max_model_len = 0;
};

class step_outcome {
 public:
  step_outcome(scheduler_policy& policy, outcome_settings settings);

  // A decode token, or a whole prefill (chunk), computed: counts toward decode_tokens
  // or prefill_tokens in the engine's stats.
  bool is_decode(const granted_work& w) const;

  // w's tokens [start, end) are computed (no drafts).
  void computed(const granted_work& w);
  // The token w sampled joins its sequence (after computed()).
  sequence_advance sampled(const granted_work& w, token_id next, std::span<const token_id> stop_ids);

  // w verified w.drafted drafts and emitted `emitted` (the accepted drafts, then the
  // corrected or bonus token): the last token and the accepted drafts are computed.
  void verified_computed(const granted_work& w, std::span<const token_id> emitted);
  // ...and the emitted tokens join the sequence, cut at a finish; the rejected drafts' slots are trimmed.
  sequence_advance verified(const granted_work& w, std::span<const token_id> emitted,
                            std::span<const token_id> stop_ids);

  // Choices forked off parent (scheduler_policy::fork_choices): the KV cache forks its blocks for them.
  void forked(seq_id parent, std::span<const seq_id> children);

  // What the next prepare must carry; empties it.
  kv_followup take_followup();

 private:
  void index_prefix(const sequence& s, int start, int computed);
  finish_reason finish_of(const sequence& s, token_id last, std::span<const token_id> stop_ids) const;

  scheduler_policy& policy_;
  outcome_settings settings_;
  kv_followup followup_;
};

} // namespace troupe::runtime
