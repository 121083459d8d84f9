// Samples every logits row of a step. It keeps each sequence's token history
// (what the model has seen of it) because repetition, frequency and presence
// penalties need it, and sending whole histories with every step would cost
// O(length) per token; and its logit rules (logit_bias, min_tokens), which are
// fixed for its life, so that they too travel once; and, for a constrained
// sequence, its parse state along its output (structured output).
#pragma once

#include <deque>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "runtime/logit_rules.hpp"
#include "runtime/sampler.hpp"
#include "runtime/sequence.hpp"
#include "runtime/sequence_failure.hpp"
#include "runtime/structured/constraint_cache.hpp"
#include "runtime/structured/sequence_constraint.hpp"

namespace troupe::runtime {

struct sample_request {
  seq_id id = 0;
  const sampler_settings* params = nullptr;
  std::uint64_t seed = 0;
  std::uint64_t step = 0; // output index being sampled (the random counter)
  int prompt_len = 0;     // history[0, prompt_len) is prompt, the rest output
};

class step_sampler {
 public:
  // Where constrained sequences find their compiled constraints (the engine's, shared with
  // admission). Without one, a sequence with a constraint is refused at reset().
  void set_constraints(std::shared_ptr<structured::constraint_cache> cache) { constraints_ = std::move(cache); }
  // A sequence (re)starts: its history is tokens it already has in the cache; its rules
  // replace any it had.
  void reset(seq_id id, std::span<const token_id> cached_tokens, logit_rules rules = {});
  // The step's tokens join their sequences' histories (batch entry b is seq_ids[b]).
  void observe(const step_batch& batch, std::span<const seq_id> seq_ids);
  void forget(seq_id id);
  // logits [rows, vocab]; one request per row; returns one token per row.
  std::vector<token_id> sample(std::span<float> logits, int vocab, std::span<const sample_request> rows);

  std::size_t tracked() const { return sequences_.size(); }
  // Everything the model has seen of a sequence (the step's own tokens too, after observe()).
  std::span<const token_id> history(seq_id id) const;
  // The sequence's logit rules (empty ones when it has none).
  // Whether the sequence's output is constrained (its edits then carry a mask).
  bool constrained(seq_id id) const { return at(id).constraint != nullptr; }
  const logit_rules& rules(seq_id id) const;
  // The edits of the row that samples output token `output_index` after `output` (the
  // output tokens before it): the rules' at(output_index), plus, with a constraint, every
  // token it does not take banned. The spans live until the next begin_step().
  // A constraint the matcher cannot follow any further (grammar_matcher::max_state_entries)
  // fails its sequence alone: the row gets the rules' edits, the failure is kept for
  // failures(), and the caller must not emit the row's token.
  logit_edits edits(seq_id id, std::uint64_t output_index, std::span<const token_id> output);
  // This step's failed sequences, one entry each, in the order they failed.
  const std::vector<sequence_failure>& failures() const { return failures_; }
  // A new step: the previous step's edits are no longer read.
  void begin_step() {
    banned_used_ = 0;
    constraint_us_ = 0;
    failures_.clear();
  }
  // Time this step spent on constraints' masks so far, microseconds.
  double constraint_us() const { return constraint_us_; }

 private:
  struct tracked_sequence {
    std::vector<token_id> history;
    logit_rules rules;
    std::unique_ptr<structured::sequence_constraint> constraint; // null: unconstrained
  };
  const tracked_sequence& at(seq_id id) const; // throws std::logic_error for an unknown sequence
  tracked_sequence& at(seq_id id);
  std::vector<token_id>& next_banned();
  std::unordered_map<seq_id, tracked_sequence> sequences_;
  sampler sampler_;
  std::shared_ptr<structured::constraint_cache> constraints_;
  std::deque<std::vector<token_id>> banned_; // per row of the step; a deque keeps the spans valid as it grows
  std::size_t banned_used_ = 0;
  double constraint_us_ = 0;
  std::vector<sequence_failure> failures_;
};

} // namespace troupe::runtime
