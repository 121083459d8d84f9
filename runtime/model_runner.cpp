// Shape and range checks of a step_batch, shared by every backend.
#include "runtime/model_runner.hpp"

#include <stdexcept>
#include <string>

#include "runtime/kv_geometry.hpp"

namespace troupe::runtime {

namespace {
[[noreturn]] void fail(const std::string& what) { throw std::logic_error("step_batch: " + what); }
} // namespace

void model_runner::execute_sampled(const step_batch&, std::span<const device_sample>, std::span<token_id>,
                                   std::span<token_logprobs>, const std::function<void()>&) {
  throw std::logic_error("this model runner does not sample on its device");
}

void model_runner::follow_step(const step_batch&) {
  throw std::logic_error("this model runner is not a tensor-parallel rank");
}

void check_step_batch(const step_batch& b, const kv_cache_config& cache, int vocab_size) {
  std::size_t tokens = b.token_ids.size(), seqs = b.seq_lens.size();
  if (b.positions.size() != tokens || b.slot_mapping.size() != tokens)
    fail("positions/slot_mapping must have one entry per token");
  if (b.query_start.size() != seqs + 1 || b.query_start.front() != 0 ||
      static_cast<std::size_t>(b.query_start.back()) != tokens)
    fail("query_start must have B+1 entries from 0 to T");
  if (b.block_tables.size() != seqs * static_cast<std::size_t>(b.max_blocks_per_seq))
    fail("block_tables must be [B, max_blocks_per_seq]");
  std::int64_t slots = static_cast<std::int64_t>(cache.num_blocks) * cache.block_size;
  for (std::size_t s = 0; s < seqs; ++s) {
    if (b.query_start[s + 1] < b.query_start[s])
      fail("query_start must not decrease");
    if (b.seq_lens[s] > b.max_blocks_per_seq * cache.block_size)
      fail("seq_lens[" + std::to_string(s) + "] exceeds its block table");
    int needed = blocks_for_tokens(b.seq_lens[s], cache.block_size);
    for (int i = 0; i < needed; ++i) {
      int block = b.block_tables[s * b.max_blocks_per_seq + i];
      if (block < 0 || block >= cache.num_blocks)
        fail("block_tables[" + std::to_string(s) + "][" + std::to_string(i) + "] = " + std::to_string(block) +
             " is not a block of the cache");
    }
    for (int t = b.query_start[s]; t < b.query_start[s + 1]; ++t) {
      if (b.positions[t] < 0 || b.positions[t] >= b.seq_lens[s])
        fail("positions[" + std::to_string(t) + "] is outside its sequence");
      if (b.slot_mapping[t] >= slots)
        fail("slot_mapping[" + std::to_string(t) + "] is outside the cache");
      if (b.token_ids[t] < 0 || b.token_ids[t] >= vocab_size)
        fail("token_ids[" + std::to_string(t) + "] = " + std::to_string(b.token_ids[t]) + " is outside the vocabulary");
    }
  }
  for (auto row : b.logits_rows)
    if (row < 0 || static_cast<std::size_t>(row) >= tokens)
      fail("logits_rows names a row that is not in the batch");
}

} // namespace troupe::runtime
