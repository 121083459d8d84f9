// A draft model as a draft_proposer: its own model runner and its own KV
// blocks. Each propose() catches the draft's cache up with the sequence (from
// the first token where its cached tokens and the history part ways: that is
// the rollback after a rejection) in steps of at most max_step_tokens tokens
// (a runner holds activations for a bounded step), then runs k - 1
// single-token steps, all sequences batched together. Greedy requests draft by argmax (a deterministic
// draft); sampled ones draw from the draft's distribution under the request's
// own sampling transforms and send that distribution along as q.
#pragma once

#include <memory>
#include <unordered_map>

#include "runtime/draft_proposer.hpp"
#include "runtime/model_runner.hpp"
#include "runtime/model_weights.hpp"
#include "runtime/sampler.hpp"

namespace troupe::runtime {

class model_draft : public draft_proposer {
 public:
  // max_step_tokens: the most tokens one step may carry (0: no bound); at least the number
  // of sequences proposed for at once, which every single-token step carries.
  explicit model_draft(std::unique_ptr<model_runner> runner, int max_step_tokens = 0);
  std::vector<draft_output> propose(std::span<const draft_input> seqs) override;
  void forget(seq_id id) override;
  void reset() override;

  int free_blocks() const { return static_cast<int>(free_.size()); }

 private:
  struct seq_state {
    std::vector<token_id> cached;        // tokens whose K/V the draft cache holds, from position 0
    std::vector<std::int32_t> blocks;
  };
  bool reserve(seq_state& s, int tokens);
  token_id choose(const draft_input& in, std::span<float> logits, std::span<const token_id> context,
                  std::uint64_t step, std::vector<float>* probs);

  std::unique_ptr<model_runner> runner_;
  int max_step_tokens_;
  std::unordered_map<seq_id, seq_state> seqs_;
  std::vector<std::int32_t> free_;
  sampler sampler_;
  std::vector<float> logits_, row_;
};

// The target's first n layers, its final norm and LM head: the draft of
// layer-skip self-speculation. (A copy on the CPU backend; the layers are the
// target's, so the tokenizer and vocabulary agree by construction.)
model_config first_layers_config(const model_config& cfg, int n);
model_weights first_layers_weights(const model_weights& w, int n);

} // namespace troupe::runtime
