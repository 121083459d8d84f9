// Assembles a step_batch one sequence at a time: the sequence's new tokens, where
// they start, and its block table; positions, slots and padding follow from those.
#pragma once

#include <span>

#include "runtime/step_batch.hpp"

namespace troupe::runtime {

class step_batch_builder {
 public:
  step_batch_builder(int block_size, int max_blocks_per_seq);

  // tokens are the sequence's next tokens, the first at position start (the
  // cache already holds positions 0..start-1). The last `logits_rows` tokens get
  // logits (1: the next token is sampled; more: prompt logprobs or speculative
  // verification). Returns the sequence's index in the batch.
  int add(std::span<const token_id> tokens, int start, std::span<const std::int32_t> block_table, int logits_rows);

  // Moves the finished batch out and starts a new one.
  step_batch take(std::uint64_t step_id);

 private:
  int block_size_;
  int max_blocks_;
  step_batch batch_;
};

} // namespace troupe::runtime
