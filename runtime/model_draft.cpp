// Draft-model proposals: catch up, then k - 1 batched single-token steps.
#include "runtime/model_draft.hpp"

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <stdexcept>

#include "runtime/kv_geometry.hpp"
#include "runtime/step_batch_builder.hpp"

namespace troupe::runtime {

model_draft::model_draft(std::unique_ptr<model_runner> runner, int max_step_tokens)
    : runner_(std::move(runner)), max_step_tokens_(max_step_tokens) {
  free_.resize(static_cast<std::size_t>(runner_->cache_config().num_blocks));
  std::iota(free_.rbegin(), free_.rend(), 0);  // hand out low ids first
}

void model_draft::forget(seq_id id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end())
    return;
  free_.insert(free_.end(), it->second.blocks.begin(), it->second.blocks.end());
  seqs_.erase(it);
}

void model_draft::reset() {
  seqs_.clear();
  free_.resize(static_cast<std::size_t>(runner_->cache_config().num_blocks));
  std::iota(free_.rbegin(), free_.rend(), 0);
}

bool model_draft::reserve(seq_state& s, int tokens) {
  const int bs = runner_->cache_config().block_size;
  const auto need = static_cast<std::size_t>(blocks_for_tokens(tokens, bs));
  if (need > s.blocks.size() + free_.size())
    return false;
  while (s.blocks.size() < need) {
    s.blocks.push_back(free_.back());
    free_.pop_back();
  }
  return true;
}

token_id model_draft::choose(const draft_input& in, std::span<float> logits, std::span<const token_id> context,
                             std::uint64_t step, std::vector<float>* probs) {
  auto output = context.subspan(std::min<std::size_t>(context.size(), static_cast<std::size_t>(in.prompt_len)));
  if (in.params->greedy()) {
    auto c = sampler_.candidates(logits, *in.params, context, output);
    return c.ids[0];
  }
  if (in.reproducible) // coupled with the target's draw by the shared u; no rows (see draft_input)
    return sampler_.sample(logits, *in.params, context, output, in.seed, step);
  // q: the draft's distribution under the request's own transforms (the verifier's contract).
  const auto vocab = logits.size();
  row_.resize(vocab);
  sampler_.probabilities(logits, *in.params, context, output, row_);
  probs->insert(probs->end(), row_.begin(), row_.end());
  double u = counter_uniform(in.seed, step), acc = 0.0;
  for (std::size_t t = 0; t < vocab; ++t) {
    acc += row_[t];
    if (u < acc && row_[t] > 0.0f)
      return static_cast<token_id>(t);
  }
  // Rounding left u above the total: the last token with any mass.
  for (std::size_t t = vocab; t-- > 0;)
    if (row_[t] > 0.0f)
      return static_cast<token_id>(t);
  return 0;
}

std::vector<draft_output> model_draft::propose(std::span<const draft_input> seqs) {
  std::vector<draft_output> out(seqs.size());
  const int vocab = runner_->config().vocab_size;
  const int bs = runner_->cache_config().block_size;
  // The sequences that get a draft, with their growing contexts (history + drafts so far).
  struct active {
    std::size_t index;
    seq_state* state;
    std::vector<token_id> context;
  };
  std::vector<active> live;
  for (std::size_t i = 0; i < seqs.size(); ++i) {
    const auto& in = seqs[i];
    const int len = static_cast<int>(in.history.size());
    if (in.k <= 0 || len == 0)
      continue;
    auto& s = seqs_[in.id];
    // x_k is never fed back, so the cache holds at most len + k - 1 positions.
    if (!reserve(s, len + in.k - 1))
      continue;  // out of draft blocks: this sequence does not speculate this step
    live.push_back({i, &s, std::vector<token_id>(in.history.begin(), in.history.end())});
  }
  // Catch-up: every sequence's stale or new tokens but its last, in steps of at most
  // max_step_tokens (a long prompt is split over steps; its rows' logits are not used).
  // Round 0 below then runs one token per sequence, whose logits draft x_1.
  for (auto& a : live) {
    auto& cached = a.state->cached;
    auto diverge = std::mismatch(cached.begin(), cached.end(), a.context.begin(), a.context.end());
    cached.resize(std::min(static_cast<std::size_t>(diverge.first - cached.begin()), a.context.size() - 1));
  }
  // A step's block tables are as wide as the widest of its sequences'.
  const auto widest_table = [&] {
    int widest = 0;
    for (const auto& a : live)
      widest = std::max(widest, static_cast<int>(a.state->blocks.size()));
    return widest;
  };
  const std::size_t budget = max_step_tokens_ > 0 ? static_cast<std::size_t>(max_step_tokens_) : SIZE_MAX;
  for (std::uint64_t step = 0;; ++step) {
    step_batch_builder builder(bs, widest_table());
    std::size_t tokens = 0;
    int rows = 0;
    for (auto& a : live) {
      auto& cached = a.state->cached;
      const std::size_t behind = a.context.size() - 1 - cached.size();
      const std::size_t take = std::min(behind, budget - tokens);
      if (take == 0)
        continue;
      const auto start = cached.size();
      builder.add(std::span<const token_id>(a.context.data() + start, take), static_cast<int>(start), a.state->blocks,
                  1);
      cached.insert(cached.end(), a.context.begin() + static_cast<std::ptrdiff_t>(start),
                    a.context.begin() + static_cast<std::ptrdiff_t>(start + take));
      tokens += take;
      ++rows;
      if (tokens == budget)
        break;
    }
    if (rows == 0)
      break;
    logits_.resize(static_cast<std::size_t>(rows) * static_cast<std::size_t>(vocab));
    runner_->execute(builder.take(step), logits_);
  }
  for (int round = 0; !live.empty(); ++round) {
    step_batch_builder builder(bs, widest_table());
    for (auto& a : live) {
      auto& cached = a.state->cached;
      const auto start = cached.size();
      std::span<const token_id> fresh(a.context.data() + start, a.context.size() - start);
      builder.add(fresh, static_cast<int>(start), a.state->blocks, 1);
      cached.insert(cached.end(), fresh.begin(), fresh.end());
    }
    auto batch = builder.take(static_cast<std::uint64_t>(round));
    logits_.resize(live.size() * static_cast<std::size_t>(vocab));
    runner_->execute(batch, logits_);
    std::vector<active> next;
    for (std::size_t r = 0; r < live.size(); ++r) {
      auto& a = live[r];
      const auto& in = seqs[a.index];
      auto& o = out[a.index];
      std::span<float> row(logits_.data() + r * static_cast<std::size_t>(vocab), static_cast<std::size_t>(vocab));
      const auto t = choose(in, row, a.context, in.step + o.tokens.size(), &o.probs);
      o.tokens.push_back(t);
      a.context.push_back(t);
      if (static_cast<int>(o.tokens.size()) < in.k)
        next.push_back(std::move(a));
    }
    live = std::move(next);
  }
  return out;
}

model_config first_layers_config(const model_config& cfg, int n) {
  if (n < 1 || n > cfg.num_hidden_layers)
    throw std::invalid_argument("draft layers must be in 1.." + std::to_string(cfg.num_hidden_layers) + ", got " +
                                std::to_string(n));
  auto out = cfg;
  out.num_hidden_layers = n;
  return out;
}

model_weights first_layers_weights(const model_weights& w, int n) {
  model_weights out;
  out.embed_tokens = w.embed_tokens;
  out.final_norm = w.final_norm;
  out.lm_head = w.lm_head;
  out.layers.assign(w.layers.begin(), w.layers.begin() + std::min<std::size_t>(w.layers.size(), n));
  return out;
}

} // namespace troupe::runtime
