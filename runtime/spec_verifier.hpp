// Speculative sampling (Leviathan et al. 2023, Chen et al. 2023): keeps the
// longest prefix of a draft that the target model agrees with, so that the
// emitted tokens follow the target's distribution exactly.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "runtime/sampler.hpp"
#include "runtime/sampler_settings.hpp"

namespace troupe::runtime {

// Random counters. The plain sampler draws output token t with
// counter_uniform(seed, t), and a draft model that samples through
// runtime::sampler uses the same counter for its x_t. The verifier needs two
// more numbers per output index, each independent of the draft's draw and of
// the other, so it takes them from streams tagged in the counter's top two
// bits (output indices stay far below 2^62, so no stream meets another):
//   accept   - the test u < p(x_t) / q(x_t) for the draft token at index t;
//   resample - the draw of a corrected token (after a rejection) or of the
//              bonus token (after full acceptance) at index t.
// Output token t depends only on the tokens before it and on these numbers at
// index t, so a seeded request gets the same tokens whatever shares its batch,
// and re-drafting an index after a rollback reuses no number that decided a
// kept token.
inline constexpr std::uint64_t spec_accept_stream = std::uint64_t{1} << 62;
inline constexpr std::uint64_t spec_resample_stream = std::uint64_t{2} << 62;

// One sequence's speculation to check. Let k = draft.size().
//
// How p and q must be made (the contract with the draft side):
//  - p_i (i = 1..k+1) is target_logits row i-1 through sampler::probabilities:
//    the request's logit edits, penalties, temperature, top-k, top-p, min-p, exactly as a plain decode
//    step would apply them. Its penalties see history + x_1..x_{i-1}: those are
//    the tokens the output holds before position i if x_1..x_{i-1} are
//    accepted, and if one of them is not, p_i is never looked at. So every
//    emitted token follows the distribution that plain decoding would use.
//  - q_i must be the distribution the draft really drew x_i from; any q keeps
//    the output exact, but acceptance is highest when q_i is the draft's
//    logits through the same sampler::probabilities, with the same params and
//    the same history + x_1..x_{i-1}. Top-k/top-p then cut the draft's own
//    ranking: a draft token outside the target's kept set has p = 0 and is
//    always rejected, and target tokens the draft cut (q = 0) get their mass
//    back through the residual max(0, p - q).
//  - Greedy (temperature 0) ignores q: a draft token is kept while it equals
//    the argmax of the penalised target row, and the first mismatch emits that
//    argmax, so the tokens are those of plain greedy decoding.
//  - Greedy and n-gram proposers give no rows, nor does a sampling draft for a
//    request with its own seed (draft_input::reproducible): draft_probs empty means q_i is
//    one-hot on x_i. Accepting x_i with probability p_i(x_i) and otherwise
//    drawing from p_i without x_i is the same law as drawing y_i from p_i and
//    keeping x_i while y_i = x_i; the verifier does the latter, with the plain
//    sampler's own draw for output index `step + i`, so the emitted tokens are
//    exactly those of plain decoding: a seeded request gets the same tokens
//    whether, and wherever, it speculated. (The accept and resample streams
//    below serve drafts with rows.)
struct spec_input {
  const sampler_settings* params = nullptr;
  std::uint64_t seed = 0;
  std::uint64_t step = 0;             // output index of draft[0] (the random counter)
  std::span<const token_id> history;  // prompt + output so far (not the draft)
  std::size_t prompt_len = 0;         // history[0, prompt_len) is prompt; the rest is output (for the penalties)
  std::span<const token_id> draft;    // [k] x_1..x_k
  std::span<const float> draft_probs; // [k, vocab] q_1..q_k, fp32, each summing to 1; or empty (deterministic draft)
  std::span<float> target_logits;     // [k + 1, vocab] target rows for x_1..x_k and the bonus; modified in place
  int vocab = 0;
  const logit_rules* rules = nullptr; // the request's logit_bias and min_tokens (p_i's edits at output index step + i)
  // When given, row i's edits (k + 1 of them), in place of rules: a constrained sequence's rows
  // each ban what the constraint does not take after the drafts before them.
  std::span<const logit_edits> row_edits;
};

struct spec_result {
  int accepted = 0; // a in [0, k]: draft tokens kept
  int emitted = 0;  // a + 1: the kept tokens, then a corrected token (a < k) or a bonus token (a = k)
};

// Whether verify() decides by the target's own draws alone: greedy, or a draft without
// probabilities (n-gram, greedy and seeded drafts). Such a verification needs no
// probability row: each target row is sampled exactly as plain decoding samples output
// index step + i (the sampler on the device can do it), and accept_target_draws decides.
inline bool verified_by_target_draws(const sampler_settings& params, std::span<const float> draft_probs) {
  return params.greedy() || draft_probs.empty();
}

// The verification by target draws: y_i drawn from row i (output index step + i, its
// penalties over history + x_1..x_i-1, as verify() builds them). Keeps x_i while y_i == x_i;
// emits the kept drafts, then y at the first mismatch (or the bonus y_k). Writes out[0, emitted).
// target_draws: k + 1 tokens; out: room for k + 1. What verify() returns for the same rows.
spec_result accept_target_draws(std::span<const token_id> draft, std::span<const token_id> target_draws,
                                std::span<token_id> out);

class spec_verifier {
 public:
  // Writes the emitted tokens to out[0, emitted); out needs room for k + 1. The
  // caller applies stop conditions and max_tokens (it may drop a tail). Throws
  // std::logic_error when the spans' sizes disagree (a caller's bug).
  spec_result verify(const spec_input& in, std::span<token_id> out);

 private:
  // Scratch reused across calls: the hot path allocates only while it grows.
  sampler sampler_;
  std::vector<float> p_;          // [vocab] the current target distribution
  std::vector<token_id> context_; // history + draft, only when penalties need it
};

} // namespace troupe::runtime
