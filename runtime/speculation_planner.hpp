// Which decoding sequences speculate in a step, and how many tokens each drafts:
// each sequence's cap (the engine's num_speculative_tokens or its request's
// override), its adaptive k from its own acceptance, and what speculating
// costs on this engine, learned from the steps that ran.
#pragma once

#include <cstdint>
#include <optional>
#include <unordered_map>

#include "runtime/adaptive_k.hpp"
#include "runtime/sequence.hpp"
#include "runtime/speculation_cost.hpp"

namespace troupe::runtime {

struct speculation_settings {
  int num_speculative_tokens = 0;  // the engine's k at most
  bool adaptive = true;            // each sequence adapts its k to its recent acceptance
};

class speculation_planner {
 public:
  static constexpr int max_k = 16;  // a request's override is clamped to [0, max_k]

  explicit speculation_planner(speculation_settings settings);

  // requested_k: the request's num_speculative_tokens (-1: the engine's; 0: never).
  void add(seq_id id, int requested_k);
  void remove(seq_id id);

  // Draft tokens for s in a step that computes num_tokens of it: 0 unless it decodes one
  // token after output it already has and asks for no logprobs; never past its room
  // (k drafts write positions up to len - 1 + k and may emit k + 1 tokens).
  int k_for(const sequence& s, int num_tokens, int max_model_len);

  // A verification of s: `drafted` tokens proposed, `accepted` kept.
  void observe(seq_id id, int drafted, int accepted);
  // A finished step: its wall time and the draft's share; decode_only steps teach what
  // speculation costs (with drafts against without); drafted/verifications are its totals.
  void learn(double wall_us, double draft_us, bool decode_only, std::uint64_t drafted, std::size_t verifications);

 private:
  struct per_sequence {
    int cap = 0;
    std::optional<adaptive_k> k;
  };
  speculation_settings settings_;
  std::unordered_map<seq_id, per_sequence> seqs_;
  speculation_cost cost_;
  // One draft token's cost relative to a target step from the draft's own time (EWMA):
  // the estimate until speculation_cost has seen both kinds of step.
  double draft_cost_ = 0.1;
};

} // namespace troupe::runtime
