// The KV cache's geometry, in one place: which block sizes are allowed, how many blocks a
// number of tokens takes, and the bytes of one block. The engine plan, both runners, the
// block manager and the drafts all size from these.
#pragma once

#include <cstddef>

#include "runtime/cuda/cuda_runner_options.hpp"
#include "runtime/model_config.hpp"

namespace troupe::runtime {

inline constexpr int max_block_size = 256;

// Tokens per block: a power of two in 1..max_block_size (the attention kernels split blocks
// into power-of-two tiles).
constexpr bool valid_block_size(int block_size) noexcept {
  return block_size >= 1 && block_size <= max_block_size && (block_size & (block_size - 1)) == 0;
}

// Blocks that hold `tokens` tokens.
constexpr int blocks_for_tokens(int tokens, int block_size) noexcept {
  return (tokens + block_size - 1) / block_size;
}

// Bytes of one cached K or V element.
constexpr std::size_t element_bytes(kv_cache_dtype dtype) noexcept {
  return dtype == kv_cache_dtype::float32 ? 4 : dtype == kv_cache_dtype::fp8_e4m3 ? 1 : 2;
}

// Bytes of one KV block over all layers, K and V, of `kv_heads` heads (all of the model's by
// default; a tensor-parallel rank holds its share).
std::size_t kv_block_bytes(const model_config& cfg, int block_size, kv_cache_dtype dtype, int kv_heads = -1);

} // namespace troupe::runtime
