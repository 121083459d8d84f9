// What the executor is asked to do with a step's logits rows: sample a row,
// score a prompt token on it, or verify a sequence's drafts over k + 1 rows.
// The scheduler's step_builder makes them; the executor's samplers read them.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/sampler_settings.hpp"
#include "runtime/sequence.hpp"

namespace troupe::runtime {

struct sample_row {
  seq_id id = 0;
  sampler_settings params;
  std::uint64_t seed = 0;
  std::uint64_t step = 0;               // index of the output token being sampled (the random counter)
  int prompt_len = 0;                   // splits the sequence's history into prompt and output (penalties)
  std::int32_t logits_index = 0;        // which row of the step's logits (batch.logits_rows order)
  token_id score_target = -1;           // >= 0: a prompt row, nothing is sampled: score this next prompt token
};

// A speculating sequence's verification: its k + 1 logits rows (the last
// computed token, then the k draft tokens) start at first_logits_index.
struct spec_row {
  seq_id id = 0;
  std::int32_t first_logits_index = 0;
  std::vector<token_id> draft;          // x_1..x_k
  std::vector<float> draft_probs;       // [k, vocab] q, or empty (deterministic draft)
  sampler_settings params;
  std::uint64_t seed = 0;
  std::uint64_t step = 0;               // output index of x_1
  int prompt_len = 0;
};

} // namespace troupe::runtime
