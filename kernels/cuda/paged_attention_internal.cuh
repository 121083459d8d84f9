// What the paged-attention launcher (paged_attention.cu) and its fast kernels
// (paged_attention_split_kv*.cu, paged_attention_prefill.cu) share: the plan of a call, the
// cache's addressing, and the launchers. How a split-K call cuts each token's context, and
// where a split block's work lies, is split_k_partition.cuh. Only those .cu files include this.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <climits>
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/paged_attention.hpp"

namespace troupe::kernels::cuda::detail {

// Sequences with more query tokens than this go to the tiled (tensor-core) kernel when it
// applies; the others (decode, short speculative runs) go to the split-K kernel, one token per block.
constexpr int tile_min_q_default = 16;

// Query heads that one split-K block serves from one pass over K/V: the GQA group, or
// chunks of 8 heads of a larger group (the chunks re-read K/V, mostly from L2).
__host__ __device__ inline int group_chunk(int group) {
  return group == 1 ? 1 : group == 2 ? 2 : group <= 4 ? 4 : 8;
}

// How one call is divided; made on the host, passed to the kernels by value.
struct attention_plan {
  int partition = 0;        // positions per split-K partition of the longest possible context
  int max_parts = 1;        // partitions of every context long enough (the workspace's third dim)
  int head_chunks = 1;      // split-K blocks per (token, KV head, partition)
  int lanes = 1;            // lanes that share one K/V row in the split kernel (a power of 2)
  int block_shift = -1;     // log2(block_size) when that is a power of two, else -1
  int tile_min_q = INT_MAX; // sequences with more tokens than this are the tiled kernel's
  int split_blocks = 0;     // split blocks of one partition of every token: tokens * kv_heads * head_chunks
  int slots = 0;            // split blocks the GPU holds at once (0: unknown)
  // Every sequence has one query token (the caller said so, and tokens == seqs): token t is
  // sequence t, and a split block skips the search of query_start (log2(seqs) dependent reads).
  bool one_token_sequences = false;
  float* ws_stats = nullptr; // [tokens, heads, max_parts, 2]: running max and sum of each partition
  float* ws_acc = nullptr;   // [tokens, heads, max_parts, head_dim]: unnormalised partial outputs
  // [tokens, kv_heads, head_chunks], zero between calls: partitions merge in their last block
  // (split_k_merge.cuh); null: in combine_kernel.
  std::uint32_t* counters = nullptr;
};

// Where a sequence's position lives in the paged cache: its block-table column and its slot in
// that block (a shift and a mask when plan.block_shift says the block size is a power of two).
struct cache_slot {
  int column = 0, offset = 0;
};
__device__ __forceinline__ cache_slot slot_of(int pos, int block_size, int block_shift) {
  if (block_shift >= 0)
    return {pos >> block_shift, pos & (block_size - 1)};
  const int column = pos / block_size;
  return {column, pos - column * block_size};
}
// Element offset of the K (or V) row in slot `offset` of cache block `block`, KV head g
// (the cache is [num_blocks, kv_heads, block_size, head_dim]).
__device__ __forceinline__ std::size_t cache_row_offset(std::int32_t block, int offset, int kv_heads, int g,
                                                        int block_size, int head_dim) {
  return ((static_cast<std::size_t>(block) * kv_heads + g) * block_size + offset) * head_dim;
}

// paged_attention_params::softcap: the score s (x * scale for a raw score x) as the softmax takes
// it, cap * tanh(s / cap), given x / cap as x * to_unit. tanhf (2 ulp), not tanh.approx, whose
// 2^-11 relative error would move a logit capped at 50 by up to 0.02. The kernels take `capped`
// (softcap > 0) as a template argument, so that an uncapped call runs the kernel it ran before: a
// branch on softcap took registers (the split kernel of a group of 2 over bf16: 96 -> 103, 5 -> 4
// blocks an SM) and made the tiles at head_dim 128 spill.
__device__ __forceinline__ float soft_cap(float x, float to_unit, float cap) {
  return cap * tanhf(x * to_unit);
}

// Split-K over the context (any token whose sequence has <= plan.tile_min_q tokens), plus the
// reduction of the partitions when there is more than one.
template <class T, class C>
cudaError_t launch_split_kv(const paged_attention_params<T, C>& p, const attention_plan& plan, cudaStream_t stream);
// Split-K blocks of this call's shape that one SM holds at once (0 if the device cannot say).
template <class T, class C>
int split_blocks_per_sm(int group, int head_dim);

// Decode on tensor cores (paged_attention_split_kv_mma.cu): the split-K kernel's work for bf16
// or fp16 activations T (tensor_core_activations), head_dim 64 or 128, Q 4-byte aligned: GQA
// groups of 2 and up over a cache of T, and every group over an fp8 e4m3 cache (for MHA over a
// 16-bit cache the CUDA-core kernel reaches ~88 % of the copy ceiling; over fp8 it is bound by its
// conversions). It writes what the CUDA-core split kernel writes (the output, or partitions for
// the combine).
template <class T>
constexpr bool tensor_core_activations = std::is_same_v<T, __nv_bfloat16> || std::is_same_v<T, __half>;
constexpr bool split_mma_support(int group, int head_dim, bool fp8_cache) {
  return (group >= 2 || fp8_cache) && (head_dim == 64 || head_dim == 128);
}
template <class T, class C>
cudaError_t launch_split_kv_mma(const paged_attention_params<T, C>& p, const attention_plan& plan, cudaStream_t stream);
template <class T, class C>
int split_mma_blocks_per_sm(int head_dim);

// Query tiles with tensor cores (bf16 or fp16 activations T, head_dim 64 or 128; a cache of T or
// fp8) for the sequences with more than plan.tile_min_q tokens.
template <class T, class C>
cudaError_t launch_prefill_tiles(const paged_attention_params<T, C>& p, const attention_plan& plan,
                                 cudaStream_t stream);

constexpr bool prefill_tiles_support(int head_dim) {
  return head_dim == 64 || head_dim == 128;
}

} // namespace troupe::kernels::cuda::detail
