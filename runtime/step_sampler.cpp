// Per-step sampling over the sequences' histories.
#include "runtime/step_sampler.hpp"

#include "runtime/errors.hpp"
#include "runtime/structured/constrained_edits.hpp"

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <string>
#include <utility>

namespace troupe::runtime {

void step_sampler::reset(seq_id id, std::span<const token_id> cached_tokens, logit_rules rules) {
  auto& s = sequences_[id];
  s.history.assign(cached_tokens.begin(), cached_tokens.end());
  s.constraint.reset();
  if (!rules.constraint.empty()) {
    if (!constraints_)
      throw std::logic_error("step_sampler: sequence " + std::to_string(id) +
                             " has a structured-output constraint but the sampler has no constraint cache");
    // Compiled at admission: this finds it (or compiles it again after an eviction).
    s.constraint =
        std::make_unique<structured::sequence_constraint>(constraints_->get(rules.constraint, /*admission=*/false));
  }
  s.rules = std::move(rules);
}

std::vector<token_id>& step_sampler::next_banned() {
  if (banned_used_ == banned_.size())
    banned_.emplace_back();
  return banned_[banned_used_++];
}

logit_edits step_sampler::edits(seq_id id, std::uint64_t output_index, std::span<const token_id> output) {
  auto& seq = at(id);
  if (!seq.constraint)
    return seq.rules.at(output_index);
  const auto t0 = std::chrono::steady_clock::now();
  logit_edits edits;
  try {
    edits = structured::constrained_edits(*seq.constraint, seq.rules, output_index, output, next_banned());
  } catch (const invalid_argument_error& e) {
    if (std::none_of(failures_.begin(), failures_.end(), [&](const sequence_failure& f) { return f.id == id; }))
      failures_.push_back({id, std::string("structured output: ") + e.what()});
    edits = seq.rules.at(output_index);
  }
  constraint_us_ += std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  return edits;
}

void step_sampler::observe(const step_batch& batch, std::span<const seq_id> seq_ids) {
  for (std::size_t b = 0; b < seq_ids.size(); ++b) {
    auto& h = sequences_[seq_ids[b]].history;
    int first = batch.query_start[b], last = batch.query_start[b + 1];
    if (first == last)
      continue;
    // Positions say where the tokens go; anything at or past them is stale (a rollback).
    h.resize(std::min<std::size_t>(h.size(), static_cast<std::size_t>(batch.positions[first])));
    h.insert(h.end(), batch.token_ids.begin() + first, batch.token_ids.begin() + last);
  }
}

void step_sampler::forget(seq_id id) {
  sequences_.erase(id);
}

const step_sampler::tracked_sequence& step_sampler::at(seq_id id) const {
  auto it = sequences_.find(id);
  if (it == sequences_.end())
    throw std::logic_error("step_sampler: no history for sequence " + std::to_string(id));
  return it->second;
}

step_sampler::tracked_sequence& step_sampler::at(seq_id id) {
  return const_cast<tracked_sequence&>(std::as_const(*this).at(id));
}

std::span<const token_id> step_sampler::history(seq_id id) const {
  return at(id).history;
}

const logit_rules& step_sampler::rules(seq_id id) const {
  return at(id).rules;
}

std::vector<token_id> step_sampler::sample(std::span<float> logits, int vocab, std::span<const sample_request> rows) {
  std::vector<token_id> out;
  out.reserve(rows.size());
  for (std::size_t r = 0; r < rows.size(); ++r) {
    const auto& row = rows[r];
    const auto& seq = at(row.id);
    std::span<const token_id> context = seq.history;
    auto output = context.subspan(std::min<std::size_t>(context.size(), static_cast<std::size_t>(row.prompt_len)));
    out.push_back(sampler_.sample(logits.subspan(r * vocab, vocab), *row.params, context, output, row.seed, row.step,
                                  edits(row.id, row.step, output)));
  }
  return out;
}

} // namespace troupe::runtime
