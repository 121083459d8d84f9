// What the paged-attention launcher (paged_attention.cu) and its fast kernels
// (paged_attention_split_kv.cu, paged_attention_prefill.cu) share: the plan of a
// call and the token -> sequence lookup. Only those .cu files include this.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <climits>
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/paged_attention.hpp"

namespace troupe::kernels::cuda::detail {

// The CUDA-core split kernel scores a chunk of this many positions into shared memory, takes its
// softmax statistics, then accumulates its V. A split-K partition is at least one chunk long.
constexpr int split_chunk = 128;
// A split-K partition is a whole number of these positions: one round of a block's loop, 4 warps
// of one 16-position tensor-core step each (and 8 register loads of 8 rows in the CUDA-core MHA
// kernel), so that no partition ends on a round its warps only part fill. A multiple of 16 also
// keeps the staged kernel's steps inside one cache block (blocks of 16 or more, a power of two).
// Not whole chunks: chunk-rounded partitions left the last one of a context short, and with one
// wave of blocks, each SM holding ~3, the SMs whose blocks were all full set the time. On the
// H200 (bench/results/2026-12-02-h200-even-partitions), in a CUDA graph: 8B shapes, batch 8,
// ctx 4096, 6 partitions of 768 (the last 256) took 44.7 us, 6 of 704 43.5; a granule of 16 (688)
// took 42.7 there but cost batch 64 at ctx 1024 4.5 % (3 of 352 run as many rounds as 3 of 384).
constexpr int split_granule = 64;
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
  int partition = 0;         // positions per split-K partition of the longest possible context
  int max_parts = 1;         // partitions of every context long enough (the workspace's third dim)
  int head_chunks = 1;       // split-K blocks per (token, KV head, partition)
  int lanes = 1;             // lanes that share one K/V row in the split kernel (a power of 2)
  int block_shift = -1;      // log2(block_size) when that is a power of two, else -1
  int tile_min_q = INT_MAX;  // sequences with more tokens than this are the tiled kernel's
  int split_blocks = 0;      // split blocks of one partition of every token: tokens * kv_heads * head_chunks
  int slots = 0;             // split blocks the GPU holds at once (0: unknown)
  // Every sequence has one query token (the caller said so, and tokens == seqs): token t is
  // sequence t, and a split block skips the search of query_start (log2(seqs) dependent reads).
  bool one_token_sequences = false;
  float* ws_stats = nullptr; // [tokens, heads, max_parts, 2]: running max and sum of each partition
  float* ws_acc = nullptr;   // [tokens, heads, max_parts, head_dim]: unnormalised partial outputs
  // [tokens, kv_heads, head_chunks], zero between calls: partitions merge in their last block
  // (split_k_merge.cuh); null: in combine_kernel.
  std::uint32_t* counters = nullptr;
};

// A token's partitions are merged by one block that reads every partial, and each partition is a
// block with its own start-up (Q, the table, the merge's ticket). Measured on the H200, 8B shapes
// (32/8 heads), split-K decode at batch 1, ctx 16384: 16 partitions 46.5 us, 32 47.0, 43 55.0,
// 64 68.1 (bf16 cache); 34.9, 39.4, 48.9, 53.7 us (fp8).
constexpr int merge_parts_max = 16;

// Partitions at least this long keep their blocks' start-ups small against their streaming:
// there a better-filled last wave is worth a second wave, and more than merge_parts_max
// partitions are worth their merge. H200, 8B shapes, batch 32, bf16 cache: at ctx 16384, 3
// partitions of 5504 (two waves, 97 % filled) took 512-527 us where one (one wave, 65 %) took
// 553 us; at ctx 4096, 3 of 1408 took 152.4 us against one's 150.8, and at ctx 1024 3 of 384
// took 64.0-66.4 against 49.6-53.4 us.
constexpr int long_partition = 2048;

// The partitions a token of `context` positions takes when one wave holds every token's: as many
// as that wave holds (`fit`), at most merge_parts_max, or more when each is still long_partition
// positions long (contexts past 32k); never more than `limit` (the plan's width).
__host__ __device__ inline long long one_wave_parts(long long fit, long long limit, long long context) {
  const long long by_length = context / long_partition;
  long long cap = by_length > merge_parts_max ? by_length : merge_parts_max;
  cap = limit < cap ? limit : cap;
  return fit < cap ? fit : cap;
}

// Positions per split-K partition of a token: its own context divided into partitions as even as
// whole granules allow (split_granule; at least a chunk), never more than the plan's max_parts
// (the workspace's width).
// - One wave: when the GPU's resident slots hold every token's partitions, one_wave_parts. More
//   waves of shorter partitions only add start-ups: on the H200, 8B shapes, batch 8, ctx 16384,
//   6 partitions of 2816 (one wave of 384 blocks) took 144.5 us where 43 of 384 (7 waves, the
//   best-filled last wave) took 205 us; batch 1, 16 of 1024 took 46.5 us where 43 of 384 took
//   55 us (bf16; over fp8 16 of 1024 took 34.9 us where the old plan's 64 of 256 took 56.6).
// - Best fill: the partitions that one, two and three waves hold are weighed (every token taken
//   as long as this one), and the best-filled last wave wins, the fewest partitions among
//   equals, as choose_split does on the host: a last wave that fills a tenth of the slots
//   leaves HBM idle for a whole wave's time.
// The one-wave count is taken unless the best fill fills better with partitions of at least
// long_partition positions (or there is no one-wave count: many tokens).
//
// Every split block of the token computes this before its first load, so it is kept to 32-bit
// arithmetic: its 64-bit divisions (a software routine on the GPU) added ~1,900 cycles, ~1 us, to
// each block's start (H200, per-block clock64 trace, 8B shapes, batch 1 and 8). When a context
// has more than one partition the launcher keeps split_blocks * max_parts below
// 2 * blocks_per_sm * SMs (choose_split), far below what 32 bits hold; a plan past
// max_weighed_blocks (blocks or slots) is not weighed, and host and device agree on that.
constexpr long long max_weighed_blocks = 1LL << 24;
__host__ __device__ inline int token_partition(const attention_plan& plan, int context) {
  const unsigned ctx = static_cast<unsigned>(context);
  auto partition_of = [&](unsigned n) {
    const unsigned per = (ctx + n - 1) / n;
    const unsigned rounded = (per + split_granule - 1) / split_granule * split_granule;
    return static_cast<int>(rounded > split_chunk ? rounded : split_chunk);
  };
  int best = partition_of(static_cast<unsigned>(plan.max_parts));
  if (plan.max_parts <= 1 || plan.slots <= 0 || plan.split_blocks <= 0 || plan.slots > max_weighed_blocks ||
      static_cast<long long>(plan.split_blocks) * plan.max_parts > max_weighed_blocks)
    return best;
  const unsigned slots = static_cast<unsigned>(plan.slots), split_blocks = static_cast<unsigned>(plan.split_blocks);
  const unsigned max_parts = static_cast<unsigned>(plan.max_parts);
  auto fill_percent = [&](int partition) { // of the last wave
    const unsigned blocks = split_blocks * ((ctx + partition - 1) / static_cast<unsigned>(partition));
    const unsigned waves = (blocks + slots - 1) / slots;
    return 100 * blocks / (waves * slots);
  };
  unsigned best_fill = fill_percent(best);
  for (unsigned waves = 1; waves <= 3; ++waves) {
    const unsigned fit = waves * slots / split_blocks;
    const unsigned n = fit < max_parts ? fit : max_parts;
    if (n < 1)
      continue;
    const int candidate = partition_of(n);
    const unsigned fill = fill_percent(candidate);
    if (fill > best_fill || (fill == best_fill && candidate > best)) {
      best = candidate;
      best_fill = fill;
    }
  }
  if (const unsigned fit = slots / split_blocks; fit >= 1) {
    const int one_wave = partition_of(static_cast<unsigned>(one_wave_parts(fit, plan.max_parts, context)));
    if (best < long_partition || best_fill <= fill_percent(one_wave))
      return one_wave;
  }
  return best;
}

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

// The sequence of token t: the last s with query_start[s] <= t (empty sequences are skipped over).
__device__ __forceinline__ int sequence_of(const std::int32_t* query_start, int seqs, int t) {
  int lo = 0, hi = seqs - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (query_start[mid] <= t)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
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
