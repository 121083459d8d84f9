// Turns the work the KV cache granted for one step into what the executor
// runs: the flattened batch, one sample_row per logits row that samples or
// scores a prompt token, one spec_row per sequence that verifies drafts, and
// the sampler histories to (re)load. Plain logic: the scheduler actor and the
// tests drive it without actors.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "runtime/logit_rules.hpp"
#include "runtime/sequence.hpp"
#include "runtime/step_batch_builder.hpp"
#include "runtime/step_rows.hpp"

namespace troupe::runtime {

// One sequence's share of a step, as granted: tokens [start, end) are computed
// into the blocks of `table`. The builder fills in the rest, which the step's
// outcome reads back.
struct granted_work {
  seq_id id = 0;
  int start = 0, end = 0;
  std::vector<std::int32_t> table;
  int prompt_rows = 0;  // logits rows that score prompt tokens (before the sampled row)
  bool samples = false; // the step samples this sequence's next token (its last row)
  int drafted = 0;      // > 0: the step verifies this many draft tokens (a spec_row, no sample_row)
};

// The executor's part of a step, before the step id and the sampler's forget list are added.
struct built_step {
  step_batch batch;
  std::vector<seq_id> seq_ids;  // [B] which sequence each batch entry is
  std::vector<sample_row> rows; // in logits-row order, verification rows excepted
  std::vector<spec_row> verify;
  std::vector<seq_id> reset_ids;                   // sequences whose sampler history restarts from...
  std::vector<std::vector<token_id>> reset_tokens; // ...these tokens (already in the cache)
  std::vector<logit_rules> reset_rules;            // ...and these logit rules
};

class step_builder {
 public:
  // max_blocks: the longest block table among the step's work.
  step_builder(int block_size, int max_blocks);

  // A sequence computing [w.start, w.end): it scores the prompt tokens it was asked
  // for (params.prompt_logprobs), from prompt_scored on, and samples when the chunk
  // reaches its last token. Sets w.prompt_rows and w.samples.
  void add(granted_work& w, const sequence& s, int prompt_scored);
  // A decoding sequence verifying `draft` (its last sampled token, then the drafts,
  // one logits row each). Sets w.drafted.
  void add_speculation(granted_work& w, const sequence& s, std::span<const token_id> draft,
                       std::vector<float> draft_probs);
  // The executor's sampler must learn the tokens already cached before w.start
  // (a prefix hit, a recompute, a restarted executor) and the sequence's logit rules.
  void reset_history(const granted_work& w, const sequence& s, const logit_rules& rules);

  built_step take(std::uint64_t step_id);

 private:
  step_batch_builder batch_;
  built_step out_;
  std::int32_t logits_index_ = 0;
};

// The longest block table among a step's work.
int max_blocks_of(std::span<const granted_work> work);

} // namespace troupe::runtime
