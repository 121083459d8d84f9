// Sampling where the logits are: what one row of a step sampled on the device carries (the
// cuts, the draw's u, the logit edits, the penalties with the sequence's history, how many
// log-probabilities come back), and the same computation on the host, which is its reference. The law is
// runtime::sampler's and runtime::compute_logprobs'.
#pragma once

#include <cstdint>
#include <span>

#include "runtime/logit_rules.hpp"
#include "runtime/logprobs.hpp"
#include "runtime/sampler_settings.hpp"

namespace troupe::runtime {

struct device_sample {
  float temperature = 0.0f; // 0: greedy
  int top_k = 0;
  float top_p = 1.0f;
  float min_p = 0.0f;
  double u = 0.0; // counter_uniform(seed, step): the same draw the host sampler makes
  // Penalties over the sequence's history: every token the model has seen of it, this step's
  // included; the first prompt_len are the prompt, the rest the output.
  float repetition_penalty = 1.0f;
  float frequency_penalty = 0.0f;
  float presence_penalty = 0.0f;
  std::span<const token_id> history; // read only when a penalty is set
  int prompt_len = 0;
  logit_edits edits; // logit_bias and the min_tokens mask, applied before the penalties
  int logprobs = -1; // >= 0: the chosen token's log-probability and the top n, from the raw logits
  // >= 0: a prompt row (prompt_logprobs): nothing is drawn, the row's token is this next prompt token, scored with
  // the top `logprobs` alternatives; no edits or penalties (the raw row is scored, as on the host).
  token_id score_target = -1;
  // A structured-output row: its constraint's banned ids join `edits` only in execute_sampled's
  // before_draw, while the device runs the forward pass; until then edits hold its logit_bias
  // and min_tokens alone. Counted as edited either way, so the scratch is planned right.
  bool constrained = false;

  bool penalised() const { return repetition_penalty != 1.0f || frequency_penalty != 0.0f || presence_penalty != 0.0f; }
  // The row's logits change before the cuts (edits or penalties).
  bool edited() const { return penalised() || !edits.empty() || constrained; }
};

device_sample make_device_sample(const sampler_settings& params, std::uint64_t seed, std::uint64_t step,
                                 std::span<const token_id> history = {}, int prompt_len = 0,
                                 const logit_edits& edits = {});

// A prompt row: score `target` on the raw logits with the top `top_n` alternatives.
device_sample make_device_score(token_id target, int top_n);

// The device sampler's reference: logits [rows, vocab] (modified in place, as the device's
// are); tokens[i] = row i's token; logprobs (empty, or one per row) gets the rows that ask.
void sample_on_host(std::span<float> logits, int vocab, std::span<const device_sample> rows, std::span<token_id> tokens,
                    std::span<token_logprobs> logprobs);

} // namespace troupe::runtime
