// The accept / correct / bonus loop of speculative sampling over one sequence.
// Probabilities come from sampler::probabilities so p is, bit for bit, what a
// plain decode step would draw from.
#include "runtime/spec_verifier.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace troupe::runtime {

namespace {

bool in_vocab(token_id t, int vocab) {
  return t >= 0 && t < vocab;
}

// Draws from the row max(0, p - q) / its sum, where q is a full row or (empty)
// one-hot on `removed`. Returns -1 when nothing is left, which exact arithmetic
// never allows after a rejection (p(x) < q(x) for the rejected x means p > q
// somewhere else) but rounding might.
token_id draw_residual(std::span<const float> p, std::span<const float> q, token_id removed, double u) {
  auto weight = [&](std::size_t v) -> double {
    if (!q.empty())
      return std::max(0.0, static_cast<double>(p[v]) - static_cast<double>(q[v]));
    return static_cast<token_id>(v) == removed ? 0.0 : static_cast<double>(p[v]);
  };
  double total = 0.0;
  for (std::size_t v = 0; v < p.size(); ++v)
    total += weight(v);
  if (!(total > 0.0))
    return -1;
  const double target = u * total;
  double cum = 0.0;
  token_id last = -1;
  for (std::size_t v = 0; v < p.size(); ++v) {
    double w = weight(v);
    if (w <= 0.0)
      continue;
    cum += w;
    last = static_cast<token_id>(v);
    if (target < cum)
      return last;
  }
  return last; // the sum's rounding left target just past the last step
}

token_id draw_row(std::span<const float> p, double u) {
  return draw_residual(p, {}, -1, u);
}

} // namespace

spec_result accept_target_draws(std::span<const token_id> draft, std::span<const token_id> target_draws,
                                std::span<token_id> out) {
  const std::size_t k = draft.size();
  if (target_draws.size() != k + 1 || out.size() < k + 1)
    throw std::logic_error("accept_target_draws: " + std::to_string(target_draws.size()) + " draws and room for " +
                           std::to_string(out.size()) + " tokens for " + std::to_string(k) + " drafts");
  for (std::size_t i = 0; i <= k; ++i) {
    out[i] = target_draws[i];
    if (i == k || draft[i] != target_draws[i])
      return {static_cast<int>(i), static_cast<int>(i) + 1};
  }
  return {static_cast<int>(k), static_cast<int>(k) + 1}; // not reached
}

spec_result spec_verifier::verify(const spec_input& in, std::span<token_id> out) {
  const std::size_t k = in.draft.size();
  const auto vocab = static_cast<std::size_t>(in.vocab);
  const bool deterministic = in.draft_probs.empty();
  if (in.params == nullptr || in.vocab <= 0 || in.target_logits.size() != (k + 1) * vocab ||
      (!deterministic && in.draft_probs.size() != k * vocab) || out.size() < k + 1)
    throw std::logic_error("spec_verifier: spans disagree with k = " + std::to_string(k) +
                           " and vocab = " + std::to_string(in.vocab));
  const sampler_settings& params = *in.params;

  // Penalties at position i read history + x_1..x_{i-1}; build that list once.
  // Without penalties the history is never read, so skip the O(length) copy.
  const bool penalised =
      params.repetition_penalty != 1.0f || params.frequency_penalty != 0.0f || params.presence_penalty != 0.0f;
  if (penalised) {
    context_.assign(in.history.begin(), in.history.end());
    context_.insert(context_.end(), in.draft.begin(), in.draft.end());
  }
  auto context_at = [&](std::size_t i) {
    return penalised ? std::span<const token_id>(context_).first(in.history.size() + i) : in.history;
  };
  auto output_of = [&](std::span<const token_id> context) {
    return context.subspan(std::min(context.size(), in.prompt_len));
  };
  auto row = [&](std::size_t i) { return in.target_logits.subspan(i * vocab, vocab); };
  // Row i samples output index step + i: its logit_bias, and its min_tokens mask while it lasts.
  auto edits_at = [&](std::size_t i) {
    if (!in.row_edits.empty())
      return in.row_edits[i];
    return in.rules ? in.rules->at(in.step + i) : logit_edits{};
  };

  if (deterministic) {
    // q is one-hot on x: keeping x with probability p(x), else drawing from p without x, is the
    // same law as drawing y from p and keeping x when y == x. Drawing y exactly as a plain decode
    // step draws output index step + i (same candidates, same counter) makes every emitted token
    // the one plain decoding emits: a seeded request's tokens do not depend on where, or whether,
    // it speculated (which the scheduler's batching and preemptions decide). Greedy is the case
    // of a one-candidate set.
    for (std::size_t i = 0; i <= k; ++i) {
      auto ctx = context_at(i);
      const token_id y = sampler_.sample(row(i), params, ctx, output_of(ctx), in.seed, in.step + i, edits_at(i));
      out[i] = y;
      if (i == k || in.draft[i] != y)
        return {static_cast<int>(i), static_cast<int>(i) + 1};
    }
  }

  if (params.greedy()) {
    // Exact match: the argmax is the whole distribution, no random numbers.
    for (std::size_t i = 0; i <= k; ++i) {
      auto ctx = context_at(i);
      token_id best = sampler_.candidates(row(i), params, ctx, output_of(ctx), edits_at(i)).ids[0];
      out[i] = best;
      if (i == k || in.draft[i] != best)
        return {static_cast<int>(i), static_cast<int>(i) + 1};
    }
  }

  p_.resize(vocab);
  for (std::size_t i = 0; i < k; ++i) {
    auto ctx = context_at(i);
    sampler_.probabilities(row(i), params, ctx, output_of(ctx), p_, edits_at(i));
    const token_id x = in.draft[i];
    const auto q_row = in.draft_probs.subspan(i * vocab, vocab);
    const double px = in_vocab(x, in.vocab) ? p_[x] : 0.0;
    const double qx = in_vocab(x, in.vocab) ? q_row[x] : 0.0;
    // Accept with probability min(1, p/q), written without the division so q(x) = 0
    // (a draft that claims it could not have drawn x) accepts whenever p(x) > 0.
    const std::uint64_t index = in.step + i;
    if (counter_uniform(in.seed, spec_accept_stream | index) * qx < px) {
      out[i] = x;
      continue;
    }
    const double u = counter_uniform(in.seed, spec_resample_stream | index);
    token_id fixed = draw_residual(p_, q_row, x, u);
    // Only rounding gets here: p and q agree to float precision, so p itself is the residual's shape.
    out[i] = fixed >= 0 ? fixed : draw_row(p_, u);
    return {static_cast<int>(i), static_cast<int>(i) + 1};
  }

  // Every draft token kept: the bonus comes from the last row, drawn like a plain step.
  auto ctx = context_at(k);
  out[k] =
      sampler_.sample(row(k), params, ctx, output_of(ctx), in.seed, spec_resample_stream | (in.step + k), edits_at(k));
  return {static_cast<int>(k), static_cast<int>(k) + 1};
}

} // namespace troupe::runtime
