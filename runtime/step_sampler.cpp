// Per-step sampling over the sequences' histories.
#include "runtime/step_sampler.hpp"

#include <stdexcept>
#include <string>

namespace troupe::runtime {

void step_sampler::reset(seq_id id, std::span<const token_id> cached_tokens) {
  history_[id].assign(cached_tokens.begin(), cached_tokens.end());
}

void step_sampler::observe(const step_batch& batch, std::span<const seq_id> seq_ids) {
  for (std::size_t b = 0; b < seq_ids.size(); ++b) {
    auto& h = history_[seq_ids[b]];
    int first = batch.query_start[b], last = batch.query_start[b + 1];
    if (first == last)
      continue;
    // Positions say where the tokens go; anything at or past them is stale (a rollback).
    h.resize(std::min<std::size_t>(h.size(), static_cast<std::size_t>(batch.positions[first])));
    h.insert(h.end(), batch.token_ids.begin() + first, batch.token_ids.begin() + last);
  }
}

void step_sampler::forget(seq_id id) { history_.erase(id); }

std::span<const token_id> step_sampler::history(seq_id id) const {
  auto it = history_.find(id);
  if (it == history_.end())
    throw std::logic_error("step_sampler: no history for sequence " + std::to_string(id));
  return it->second;
}

std::vector<token_id> step_sampler::sample(std::span<float> logits, int vocab, std::span<const sample_request> rows) {
  std::vector<token_id> out;
  out.reserve(rows.size());
  for (std::size_t r = 0; r < rows.size(); ++r) {
    const auto& row = rows[r];
    auto it = history_.find(row.id);
    if (it == history_.end())
      throw std::logic_error("step_sampler: no history for sequence " + std::to_string(row.id));
    std::span<const token_id> context = it->second;
    auto output = context.subspan(std::min<std::size_t>(context.size(), static_cast<std::size_t>(row.prompt_len)));
    out.push_back(sampler_.sample(logits.subspan(r * vocab, vocab), *row.params, context, output, row.seed, row.step));
  }
  return out;
}

} // namespace troupe::runtime
