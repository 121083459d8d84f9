// Row layout of a step: per sequence, its prompt rows, then its sampled row;
// a speculating sequence's k + 1 rows go to its spec_row instead.
#include "runtime/step_builder.hpp"

#include <algorithm>
#include <utility>

namespace troupe::runtime {

step_builder::step_builder(int block_size, int max_blocks) : batch_(block_size, max_blocks) {}

void step_builder::add(granted_work& w, const sequence& s, int prompt_scored) {
  const bool sample = w.end == static_cast<int>(s.tokens.size());
  w.samples = sample;
  w.drafted = 0;
  // Prompt rows: position p scores prompt token p + 1; they end where the sampled row begins.
  w.prompt_rows = 0;
  if (s.params.prompt_logprobs >= 0) {
    const int first = std::max(w.start, prompt_scored - 1);
    const int last = std::min(w.end, s.prompt_len - 1);
    w.prompt_rows = std::max(0, last - first);
    for (int p = first; p < last; ++p)
      out_.rows.push_back(
          {w.id, s.params, s.seed, 0, s.prompt_len, logits_index_++, s.tokens[static_cast<std::size_t>(p + 1)]});
  }
  batch_.add(std::span(s.tokens).subspan(static_cast<std::size_t>(w.start), static_cast<std::size_t>(w.end - w.start)),
             w.start, w.table, w.prompt_rows + (sample ? 1 : 0));
  out_.seq_ids.push_back(w.id);
  if (sample)
    out_.rows.push_back(
        {w.id, s.params, s.seed, static_cast<std::uint64_t>(s.num_output()), s.prompt_len, logits_index_++, -1});
}

void step_builder::add_speculation(granted_work& w, const sequence& s, std::span<const token_id> draft,
                                   std::vector<float> draft_probs) {
  const auto n = static_cast<int>(draft.size());
  std::vector<token_id> query(s.tokens.begin() + w.start, s.tokens.end());
  query.insert(query.end(), draft.begin(), draft.end());
  batch_.add(query, w.start, w.table, n + 1);
  out_.seq_ids.push_back(w.id);
  out_.verify.push_back({w.id,
                         logits_index_,
                         {draft.begin(), draft.end()},
                         std::move(draft_probs),
                         s.params,
                         s.seed,
                         static_cast<std::uint64_t>(s.num_output()),
                         s.prompt_len});
  logits_index_ += n + 1;
  w.drafted = n;
  w.samples = false;
  w.prompt_rows = 0;
}

void step_builder::reset_history(const granted_work& w, const sequence& s, const logit_rules& rules) {
  out_.reset_ids.push_back(w.id);
  out_.reset_tokens.emplace_back(s.tokens.begin(), s.tokens.begin() + w.start);
  out_.reset_rules.push_back(rules);
}

built_step step_builder::take(std::uint64_t step_id) {
  out_.batch = batch_.take(step_id);
  logits_index_ = 0;
  return std::exchange(out_, built_step{});
}

int max_blocks_of(std::span<const granted_work> work) {
  int max_blocks = 0;
  for (const auto& w : work)
    max_blocks = std::max(max_blocks, static_cast<int>(w.table.size()));
  return max_blocks;
}

} // namespace troupe::runtime
