// Sampling in the order vLLM applies it: logit_bias and min_tokens -> penalties -> temperature -> top-k ->
// top-p -> min-p -> draw. Ties in greedy go to the lowest id, like argmax. The
// transforms live in candidates() so that sample() and the speculative
// verifier (which needs the whole probability row) see one distribution.
#include "runtime/sampler.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace troupe::runtime {

namespace {
std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

token_id argmax(std::span<const float> logits) {
  return static_cast<token_id>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}
} // namespace

double counter_uniform(std::uint64_t seed, std::uint64_t counter) {
  std::uint64_t bits = splitmix64(splitmix64(seed) ^ (counter * 0xd1342543de82ef95ULL + 1));
  return static_cast<double>(bits >> 11) * 0x1.0p-53;
}

void sampler::apply_penalties(std::span<float> logits, const sampler_settings& p, std::span<const token_id> context,
                              std::span<const token_id> output) {
  const auto vocab = static_cast<token_id>(logits.size());
  if (p.repetition_penalty != 1.0f) {
    // Each distinct token once: penalising twice would compound.
    touched_.clear();
    for (auto id : context)
      if (id >= 0 && id < vocab)
        touched_.push_back(id);
    std::sort(touched_.begin(), touched_.end());
    touched_.erase(std::unique(touched_.begin(), touched_.end()), touched_.end());
    for (auto id : touched_)
      logits[id] = logits[id] > 0 ? logits[id] / p.repetition_penalty : logits[id] * p.repetition_penalty;
  }
  if (p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f) {
    counts_.assign(logits.size(), 0);
    for (auto id : output)
      if (id >= 0 && id < vocab)
        ++counts_[id];
    for (std::size_t i = 0; i < logits.size(); ++i)
      if (counts_[i] > 0)
        logits[i] -= p.frequency_penalty * static_cast<float>(counts_[i]) + p.presence_penalty;
  }
}

candidate_set sampler::candidates(std::span<float> logits, const sampler_settings& p, std::span<const token_id> context,
                                  std::span<const token_id> output, const logit_edits& edits) {
  apply_logit_edits(logits, edits);
  apply_penalties(logits, p, context, output);
  if (p.greedy()) {
    order_.assign(1, argmax(logits));
    probs_.assign(1, 1.0f);
    return {order_, probs_, 1.0};
  }

  // Candidates sorted by logit, highest first (stable, so ties keep id order).
  const std::size_t vocab = logits.size();
  order_.resize(vocab);
  std::iota(order_.begin(), order_.end(), 0);
  std::size_t keep = vocab;
  if (p.top_k > 0 && static_cast<std::size_t>(p.top_k) < vocab) {
    keep = static_cast<std::size_t>(p.top_k);
    std::partial_sort(order_.begin(), order_.begin() + keep, order_.end(),
                      [&](int a, int b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
  } else {
    std::stable_sort(order_.begin(), order_.end(), [&](int a, int b) { return logits[a] > logits[b]; });
  }

  // Softmax at the temperature over the kept candidates, in double for a stable cumulative sum.
  probs_.resize(keep);
  const double inv_t = 1.0 / p.temperature;
  const double max_logit = logits[order_[0]];
  double total = 0.0;
  for (std::size_t i = 0; i < keep; ++i) {
    probs_[i] = static_cast<float>(std::exp((logits[order_[i]] - max_logit) * inv_t));
    total += probs_[i];
  }
  // top-p: the smallest prefix whose mass reaches top_p (the top token always stays).
  if (p.top_p < 1.0f) {
    double cum = 0.0;
    std::size_t cut = keep;
    for (std::size_t i = 0; i < keep; ++i) {
      cum += probs_[i] / total;
      if (cum >= p.top_p) {
        cut = i + 1;
        break;
      }
    }
    keep = cut;
  }
  // min-p: drop candidates below min_p times the top probability.
  if (p.min_p > 0.0f) {
    float threshold = p.min_p * probs_[0];
    std::size_t cut = 1;
    while (cut < keep && probs_[cut] >= threshold)
      ++cut;
    keep = cut;
  }
  total = 0.0;
  for (std::size_t i = 0; i < keep; ++i)
    total += probs_[i];
  return {std::span<const token_id>(order_).first(keep), std::span<const float>(probs_).first(keep), total};
}

token_id sampler::draw(const candidate_set& c, double u) {
  double target = u * c.total;
  double cum = 0.0;
  for (std::size_t i = 0; i < c.ids.size(); ++i) {
    cum += c.weights[i];
    if (target < cum)
      return c.ids[i];
  }
  return c.ids.back();
}

token_id sampler::sample(std::span<float> logits, const sampler_settings& p, std::span<const token_id> context,
                         std::span<const token_id> output, std::uint64_t seed, std::uint64_t step,
                         const logit_edits& edits) {
  auto c = candidates(logits, p, context, output, edits);
  // Greedy needs no random number; skipping it keeps argmax as cheap as before.
  return c.ids.size() == 1 ? c.ids[0] : draw(c, counter_uniform(seed, step));
}

void sampler::probabilities(std::span<float> logits, const sampler_settings& p, std::span<const token_id> context,
                            std::span<const token_id> output, std::span<float> probs, const logit_edits& edits) {
  auto c = candidates(logits, p, context, output, edits);
  std::fill(probs.begin(), probs.end(), 0.0f);
  const double inv_total = 1.0 / c.total;
  for (std::size_t i = 0; i < c.ids.size(); ++i)
    probs[c.ids[i]] = static_cast<float>(c.weights[i] * inv_total);
}

} // namespace troupe::runtime
