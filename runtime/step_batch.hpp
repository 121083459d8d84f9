// One engine step as the executor sees it, flattened the way vLLM flattens it:
// every token of every sequence in one row list. The CPU and CUDA runners
// consume the same struct.
#pragma once

#include <cstdint>
#include <vector>

namespace troupe::runtime {

using token_id = std::int32_t;

struct step_batch {
  std::uint64_t step_id = 0;
  std::vector<token_id> token_ids;          // [T] this step's tokens, sequence after sequence
  std::vector<std::int32_t> positions;      // [T] position of each token in its sequence
  std::vector<std::int32_t> query_start;    // [B+1] token_ids[query_start[b] .. query_start[b+1]) belong to sequence b
  std::vector<std::int32_t> seq_lens;       // [B] context length once this step's tokens are in the cache
  std::vector<std::int32_t> block_tables;   // [B, max_blocks_per_seq] physical block ids, row-major, -1 padded
  std::int32_t max_blocks_per_seq = 0;
  std::vector<std::int64_t> slot_mapping;   // [T] block * block_size + offset where each token's K/V goes
  std::vector<std::int32_t> logits_rows;    // rows of [T] that need logits (usually each sequence's last token)

  std::size_t num_tokens() const { return token_ids.size(); }
  std::size_t num_seqs() const { return seq_lens.size(); }
  void clear() { *this = step_batch{}; }
};

} // namespace troupe::runtime
