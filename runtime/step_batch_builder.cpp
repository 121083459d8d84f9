// step_batch assembly.
#include "runtime/step_batch_builder.hpp"

#include <stdexcept>

namespace troupe::runtime {

step_batch_builder::step_batch_builder(int block_size, int max_blocks_per_seq)
    : block_size_(block_size), max_blocks_(max_blocks_per_seq) {
  batch_.query_start.push_back(0);
}

int step_batch_builder::add(std::span<const token_id> tokens, int start, std::span<const std::int32_t> block_table,
                            int logits_rows) {
  int end = start + static_cast<int>(tokens.size());
  if (static_cast<int>(block_table.size()) > max_blocks_ || end > static_cast<int>(block_table.size()) * block_size_)
    throw std::logic_error("step_batch_builder: block table too short for the sequence");
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    int pos = start + static_cast<int>(i);
    batch_.token_ids.push_back(tokens[i]);
    batch_.positions.push_back(pos);
    batch_.slot_mapping.push_back(static_cast<std::int64_t>(block_table[pos / block_size_]) * block_size_ +
                                  pos % block_size_);
  }
  batch_.query_start.push_back(static_cast<std::int32_t>(batch_.token_ids.size()));
  batch_.seq_lens.push_back(end);
  batch_.block_tables.insert(batch_.block_tables.end(), block_table.begin(), block_table.end());
  batch_.block_tables.insert(batch_.block_tables.end(), max_blocks_ - block_table.size(), -1);
  if (logits_rows < 0 || logits_rows > static_cast<int>(tokens.size()))
    throw std::logic_error("step_batch_builder: more logits rows than tokens");
  const auto last = static_cast<std::int32_t>(batch_.token_ids.size());
  for (std::int32_t row = last - logits_rows; row < last; ++row)
    batch_.logits_rows.push_back(row);
  return static_cast<int>(batch_.seq_lens.size()) - 1;
}

step_batch step_batch_builder::take(std::uint64_t step_id) {
  step_batch out = std::move(batch_);
  out.step_id = step_id;
  out.max_blocks_per_seq = max_blocks_;
  batch_ = step_batch{};
  batch_.query_start.push_back(0);
  return out;
}

} // namespace troupe::runtime
