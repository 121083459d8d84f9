// What the draft actor holds: something that proposes the next k tokens of a
// batch of sequences — a draft model, the target's first layers (layer-skip
// self-speculation), or n-gram lookup in the sequence itself. The proposals
// are checked by runtime::spec_verifier, so a proposer may be wrong, never unsafe.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "runtime/sampler_settings.hpp"
#include "runtime/sequence.hpp"

namespace troupe::runtime {

struct draft_input {
  seq_id id = 0;
  std::span<const token_id> history;   // prompt + output; the last token is the one the target computes next
  int k = 0;                           // tokens wanted (a proposer may give fewer, or none)
  const sampler_settings* params = nullptr;
  std::uint64_t seed = 0;
  std::uint64_t step = 0;              // output index of the first draft token (the random counter)
  int prompt_len = 0;
  // The request set its own seed: its tokens must be exactly plain decoding's, whatever
  // speculates when. A sampling draft then draws x_t as the plain sampler would over its own
  // logits (same candidates, same counter_uniform(seed, t)) and gives no rows, so the verifier
  // keeps x_t only where it equals the target's own draw (spec_verifier.hpp).
  bool reproducible = false;
};

struct draft_output {
  std::vector<token_id> tokens;        // x_1..x_n, n <= k
  std::vector<float> probs;            // [n, vocab] the q each x_i was drawn from; empty: deterministic (one-hot)
};

class draft_proposer {
 public:
  virtual ~draft_proposer() = default;
  // One output per input, in order.
  virtual std::vector<draft_output> propose(std::span<const draft_input> seqs) = 0;
  // The sequence ended: drop whatever the proposer keeps for it.
  virtual void forget(seq_id id) = 0;
  // Drop what it keeps for every sequence: after a crash in the middle of a proposal
  // (the draft actor is restarted), or when forget lists may have been lost with it.
  virtual void reset() = 0;
};

} // namespace troupe::runtime
