// Turns one row of logits into a token: penalties, temperature, top-k, top-p,
// min-p, then a draw. The draw uses a counter-based random number (seed, step)
// so a seeded request gets the same tokens whatever shares its batch, and the
// GPU sampler can reproduce the same stream.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "runtime/logit_rules.hpp"
#include "runtime/sampler_settings.hpp"

namespace troupe::runtime {

// Uniform in [0, 1) from (seed, counter); stateless, so any thread or device agrees.
double counter_uniform(std::uint64_t seed, std::uint64_t counter);

// The distribution a draw is made from once every transform has been applied:
// the surviving candidates, most likely first (ties in id order), and their
// unnormalised weights, which add up to total. Views into the sampler's
// scratch: valid until its next call.
struct candidate_set {
  std::span<const token_id> ids;
  std::span<const float> weights;
  double total = 0.0;
};

class sampler {
 public:
  // logits [vocab] is modified in place (penalties, temperature, masks).
  // context = prompt + output so far (repetition penalty); output = output so far
  // (frequency/presence penalties); step = index of the token being sampled (the
  // random counter); seed = the request's seed (or one the engine drew for it); edits =
  // the request's logit_bias and min_tokens mask for this row, applied first.
  token_id sample(std::span<float> logits, const sampler_settings& params, std::span<const token_id> context,
                  std::span<const token_id> output, std::uint64_t seed, std::uint64_t step,
                  const logit_edits& edits = {});

  // What sample() draws from, for the same arguments: edits, penalties, then (unless
  // greedy) temperature, top-k, top-p and min-p. Greedy gives one candidate, the
  // argmax of the penalised logits, with weight 1. sample() is exactly
  // draw(candidates(...), counter_uniform(seed, step)).
  candidate_set candidates(std::span<float> logits, const sampler_settings& params, std::span<const token_id> context,
                           std::span<const token_id> output, const logit_edits& edits = {});

  // The same distribution as a full probability row: probs [vocab] receives
  // weight / total for each candidate and 0 for every token cut away.
  void probabilities(std::span<float> logits, const sampler_settings& params, std::span<const token_id> context,
                     std::span<const token_id> output, std::span<float> probs, const logit_edits& edits = {});

  // Inverse-CDF draw over the candidates in their order, u in [0, 1).
  static token_id draw(const candidate_set& c, double u);

 private:
  void apply_penalties(std::span<float> logits, const sampler_settings& params, std::span<const token_id> context,
                       std::span<const token_id> output);
  // Scratch reused across calls.
  std::vector<token_id> order_;
  std::vector<float> probs_;
  std::vector<std::int32_t> counts_;
  std::vector<std::int32_t> touched_;
};

} // namespace troupe::runtime
