// Sampling in the order vLLM applies it: logit_bias and min_tokens -> penalties -> temperature -> top-k ->
// top-p -> min-p -> draw. Ties in greedy go to the lowest id, like argmax. The
// transforms live in candidates() so that sample() and the speculative
// verifier (which needs the whole probability row) see one distribution.
//
// candidates_by_full_sort defines that distribution: every id sorted by logit.
// The ordered path gives the same ids, weights and totals while ordering only
// the head of the row that a cut keeps (ordered_selection), a band at a time
// as the cut's walk down the order reaches the end of what is ordered. Two
// sums over the whole vocabulary remain, and each is settled without the exact
// sum where a bracket on it (bound_weight_sum) already decides the outcome:
//  - top-p divides by the total weight, and a larger total can only move the
//    cut later. The cut is walked for the bracket's low end; when the sum
//    there, taken over the high end instead, still reaches top_p, every total
//    in the bracket cuts at the same place, the exact one too. Otherwise the
//    exact total is added, in id order where the full sort added it in sorted
//    order: the one place where the result may differ, in the last bit of
//    that sum (and so, very rarely, in where the cut falls).
//  - a draw without cuts aims at u * total (total added in sorted order). When
//    both ends of the bracket, times u, fall within one candidate's stretch of
//    the cumulative weight, that candidate is the draw; else the same with the
//    exact sum in id order (within n 2^-52 of the sorted one), else the whole
//    row is ordered. Only sample() draws so: candidates() lists every token.
#include "runtime/sampler.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>

#include "runtime/temperature_weights.hpp"

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

using f32x4 = float __attribute__((vector_size(16))); // GCC/Clang vector extensions: SSE2, NEON
using i32x4 = std::int32_t __attribute__((vector_size(16)));

constexpr float infinity = std::numeric_limits<float>::infinity();
// Below e^-104 a weight is a float 0: a band this deep takes the rest of the row.
constexpr double deepest_band = 104.0;

// The row's largest logit, or NaN when the row holds a NaN.
float max_or_nan(std::span<const float> logits) {
  f32x4 highest = {-infinity, -infinity, -infinity, -infinity};
  i32x4 nan = {};
  std::size_t i = 0;
  for (; i + 4 <= logits.size(); i += 4) {
    f32x4 l;
    std::memcpy(&l, logits.data() + i, sizeof l);
    nan |= l != l;
    highest = l > highest ? l : highest;
  }
  float m = std::max(std::max(highest[0], highest[1]), std::max(highest[2], highest[3]));
  bool any_nan = (nan[0] | nan[1] | nan[2] | nan[3]) != 0;
  for (; i < logits.size(); ++i) {
    any_nan |= std::isnan(logits[i]);
    m = std::max(m, logits[i]);
  }
  return any_nan ? std::numeric_limits<float>::quiet_NaN() : m;
}

bool any_cut(const sampler_settings& p, std::size_t vocab) {
  return (p.top_k > 0 && static_cast<std::size_t>(p.top_k) < vocab) || p.top_p < 1.0f || p.min_p > 0.0f;
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
    ids_.assign(1, argmax(logits));
    probs_.assign(1, 1.0f);
    return {ids_, probs_, 1.0};
  }
  if (!start_row(logits, p))
    return candidates_by_full_sort(logits, p);
  const std::size_t keep = cut(p);
  return {order_.ids().first(keep), std::span<const float>(probs_).first(keep), sum_of_first(keep)};
}

candidate_set sampler::candidates_by_full_sort(std::span<const float> logits, const sampler_settings& p) {
  // Candidates sorted by logit, highest first (stable, so ties keep id order).
  const std::size_t vocab = logits.size();
  ids_.resize(vocab);
  std::iota(ids_.begin(), ids_.end(), 0);
  std::size_t keep = vocab;
  if (p.top_k > 0 && static_cast<std::size_t>(p.top_k) < vocab) {
    keep = static_cast<std::size_t>(p.top_k);
    std::partial_sort(ids_.begin(), ids_.begin() + keep, ids_.end(),
                      [&](int a, int b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
  } else {
    std::stable_sort(ids_.begin(), ids_.end(), [&](int a, int b) { return logits[a] > logits[b]; });
  }

  // Softmax at the temperature over the kept candidates, in double for a stable cumulative sum.
  probs_.resize(keep);
  const double inv_t = 1.0 / p.temperature;
  const double max_logit = logits[ids_[0]];
  double total = 0.0;
  for (std::size_t i = 0; i < keep; ++i) {
    probs_[i] = temperature_weight(logits[ids_[i]], max_logit, inv_t);
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
  return {std::span<const token_id>(ids_).first(keep), std::span<const float>(probs_).first(keep), sum_of_first(keep)};
}

bool sampler::start_row(std::span<const float> logits, const sampler_settings& p) {
  const float max_logit = max_or_nan(logits);
  const double inv_t = 1.0 / p.temperature;
  // No realistic row is turned away; the bounds keep bound_weight_sum's float arithmetic in range.
  if (!std::isfinite(max_logit) || !(inv_t >= 1e-30 && inv_t <= 1e30))
    return false;
  row_ = logits;
  max_logit_ = max_logit;
  inv_t_ = inv_t;
  band_depth_ = 2.0; // a peaked row's top-p head is a few nats deep
  order_.reset(logits);
  probs_.clear();
  return true;
}

std::size_t sampler::cut(const sampler_settings& p) {
  const std::size_t vocab = row_.size();
  std::size_t keep = vocab;
  if (p.top_k > 0 && static_cast<std::size_t>(p.top_k) < vocab) {
    keep = static_cast<std::size_t>(p.top_k);
    order_.take_best(keep);
    weigh_to(keep);
    if (p.top_p < 1.0f)
      keep = top_p_cut(p.top_p, sum_of_first(keep), keep).size;
  } else if (p.top_p < 1.0f) {
    // The cut for the exact total lies between the cuts for the bracket's ends (see the top of the file). The
    // low end's cuts first; the high end's sum at that place is at least the low end's scaled by low / high, less
    // what rounding can take from two sums of that many terms: if that still reaches top_p, both cut there.
    const auto total = bound_weight_sum(row_, max_logit_, inv_t_);
    const auto first = top_p_cut(p.top_p, total.low, vocab);
    const double rounding = 1.0 - static_cast<double>(first.size + 8) * 0x1p-50;
    if (first.size == vocab || first.cum * (total.low / total.high) * rounding >= p.top_p)
      keep = first.size;
    else
      keep = top_p_cut(p.top_p, exact_weight_sum(), vocab).size;
  }
  if (p.min_p > 0.0f)
    keep = min_p_cut(p.min_p, keep);
  if (order_.ids().size() < keep) // nothing cut below the whole row
    order_.take_down_to(-infinity);
  weigh_to(keep);
  return keep;
}

// The smallest head whose share of `total` reaches top_p (at most limit), summed as the full sort sums it.
sampler::head sampler::top_p_cut(float top_p, double total, std::size_t limit) {
  double cum = 0.0;
  for (std::size_t i = 0; i < limit; ++i) {
    cum += weight(i) / total;
    if (cum >= top_p)
      return {i + 1, cum};
  }
  return {limit, cum};
}

// Candidates down to min_p times the top one's weight (at most limit).
std::size_t sampler::min_p_cut(float min_p, std::size_t limit) {
  if (order_.ids().empty()) {
    // The top weight is exp(0) = 1, so the threshold lies ln(1 / min_p) nats down: a first band just past it.
    band_depth_ = std::max(0.0, -std::log(static_cast<double>(min_p))) + 1.0 / 16;
  }
  const float threshold = min_p * weight(0);
  std::size_t cut = 1;
  for (; cut < limit; ++cut) {
    if (cut == order_.ids().size())
      order_.take_next(); // the band reached past the threshold: the next candidate is (almost surely) below it
    if (!(weight(cut) >= threshold))
      break;
  }
  return cut;
}

token_id sampler::draw_uncut(double u) {
  const auto total = bound_weight_sum(row_, max_logit_, inv_t_);
  if (auto token = draw_if_decided(u, total.low, total.high))
    return *token;
  // Both this sum and the sorted one are within n 2^-53 of the exact sum.
  const double exact = exact_weight_sum();
  const double slack = exact * static_cast<double>(row_.size()) * 0x1p-51;
  if (auto token = draw_if_decided(u, exact - slack, exact + slack))
    return *token;
  order_.take_down_to(-infinity);
  weigh_to(row_.size());
  return draw({order_.ids(), probs_, sum_of_first(probs_.size())}, u);
}

// draw() for a total known to lie in [low_total, high_total]: the token, when that is enough to tell.
std::optional<token_id> sampler::draw_if_decided(double u, double low_total, double high_total) {
  const double low_target = u * low_total, high_target = u * high_total;
  double cum = 0.0;
  for (std::size_t i = 0; i < row_.size(); ++i) {
    cum += weight(i);
    if (low_target < cum) // no earlier candidate is drawn, whatever the total; this one if the target is below cum
      return high_target < cum ? std::optional<token_id>(order_.ids()[i]) : std::nullopt;
  }
  return std::nullopt;
}

// The weight of the i-th candidate in order, for i up to the number weighed so far: walks weigh as they go, so a
// band that reaches further than the walk needs costs a sort but no std::exp.
float sampler::weight(std::size_t i) {
  if (i == probs_.size()) {
    if (i == order_.ids().size())
      take_band();
    probs_.push_back(temperature_weight(row_[order_.ids()[i]], max_logit_, inv_t_));
  }
  return probs_[i];
}

void sampler::take_band() {
  do {
    const double depth = band_depth_;
    band_depth_ *= 2.0;
    const float bound = depth >= deepest_band ? -infinity : static_cast<float>(max_logit_ - depth / inv_t_);
    if (order_.take_down_to(bound) > 0)
      return;
  } while (!order_.exhausted());
}

void sampler::weigh_to(std::size_t n) {
  const auto ids = order_.ids();
  for (std::size_t i = probs_.size(); i < n; ++i)
    probs_.push_back(temperature_weight(row_[ids[i]], max_logit_, inv_t_));
}

double sampler::exact_weight_sum() const {
  double total = 0.0;
  for (const float logit : row_)
    total += temperature_weight(logit, max_logit_, inv_t_);
  return total;
}

double sampler::sum_of_first(std::size_t n) const {
  double total = 0.0;
  for (std::size_t i = 0; i < n; ++i)
    total += probs_[i];
  return total;
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
  apply_logit_edits(logits, edits);
  apply_penalties(logits, p, context, output);
  // Greedy needs no random number; skipping it keeps argmax as cheap as before.
  if (p.greedy())
    return argmax(logits);
  candidate_set c;
  if (!start_row(logits, p)) {
    c = candidates_by_full_sort(logits, p);
  } else if (!any_cut(p, logits.size())) {
    return logits.size() == 1 ? 0 : draw_uncut(counter_uniform(seed, step));
  } else {
    const std::size_t keep = cut(p);
    c = {order_.ids().first(keep), std::span<const float>(probs_).first(keep), sum_of_first(keep)};
  }
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
