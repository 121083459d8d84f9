// Turns one row of logits into a token: penalties, temperature, top-k, top-p,
// min-p, then a draw. The draw uses a counter-based random number (seed, step)
// so a seeded request gets the same tokens whatever shares its batch, and the
// GPU sampler can reproduce the same stream.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "runtime/logit_rules.hpp"
#include "runtime/ordered_selection.hpp"
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

  // The definition of the candidates: every id sorted. Rows that the ordered path below leaves alone (a NaN, an
  // infinite largest logit, an extreme temperature) still take it.
  candidate_set candidates_by_full_sort(std::span<const float> logits, const sampler_settings& params);

  // The ordered path: the same candidates, ordering only as much of the row as the cuts keep (see sampler.cpp).
  // start_row sets the row up, or says it does not apply.
  bool start_row(std::span<const float> logits, const sampler_settings& params);
  // top-k, top-p and min-p: how many candidates stay, at the head of order_ (their weights in probs_).
  std::size_t cut(const sampler_settings& params);
  struct head {
    std::size_t size;
    double cum; // its share of the total
  };
  head top_p_cut(float top_p, double total, std::size_t limit);
  std::size_t min_p_cut(float min_p, std::size_t limit);
  // sample() when nothing cuts: the draw, ordering only the head of the row that it walks through.
  token_id draw_uncut(double u);
  std::optional<token_id> draw_if_decided(double u, double low_total, double high_total);
  // The weight of the i-th candidate in order; each band taken reaches twice as deep below the top token (in nats
  // of weight) as the last.
  float weight(std::size_t i);
  void take_band();
  void weigh_to(std::size_t n);
  double exact_weight_sum() const;
  double sum_of_first(std::size_t n) const;

  // The row on the ordered path.
  std::span<const float> row_;
  float max_logit_ = 0.0f;
  double inv_t_ = 1.0;
  double band_depth_ = 1.0;
  ordered_selection order_;

  // Scratch reused across calls. probs_ holds the weights of the candidates in order.
  std::vector<token_id> ids_;
  std::vector<float> probs_;
  std::vector<std::int32_t> counts_;
  std::vector<std::int32_t> touched_;
};

} // namespace troupe::runtime
