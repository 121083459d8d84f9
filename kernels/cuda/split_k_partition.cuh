// How split-K attention cuts each token's context into partitions, and where a split block's
// work lies (its token, sequence, context and partition): the arithmetic that the launcher
// (paged_attention.cu, on the host) and the split kernels (paged_attention_split_kv*.cu, on the
// device) must agree on, kept in one place. Only those .cu files include this.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/paged_attention.hpp"
#include "kernels/cuda/paged_attention_internal.cuh"

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

// Positions per split-K partition of a token: its own context (under a sliding window, its span:
// split_of) divided into partitions as even as whole granules allow (split_granule; at least a
// chunk), never more than the plan's max_parts (the workspace's width), whatever the length.
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

// A sliding window (paged_attention_params::window) lets a token of `context` positions see only
// [first_visible, context). Its partitions cut the span from span_start, that position rounded
// down to a granule, so that they still start on granule boundaries (the tensor-core kernel's
// 16-position steps then stay inside one cache block), and the kernels mask the fewer than
// split_granule positions in between. A partition is at least a chunk (two granules) long, so
// the first one always holds visible positions.
__host__ __device__ inline int first_visible(int context, int window) {
  return window > 0 && context > window ? context - window : 0;
}
__host__ __device__ inline int span_start(int context, int window) {
  return static_cast<int>(static_cast<unsigned>(first_visible(context, window)) / split_granule * split_granule);
}
static_assert(split_chunk >= 2 * split_granule, "a partition reaches past the masked head of a window's span");

// How a split-K call cuts one token: partitions of `partition` positions from `start` to the
// context, `parts` of them (the last may be shorter). Every place that works out a token's
// partitions (the split blocks, the combine kernel, paged_attention_partition_size) asks this.
struct token_split {
  int start, partition, parts;
};
__host__ __device__ inline token_split split_of(const attention_plan& plan, int context, int window) {
  const int start = span_start(context, window), span = context - start;
  const int partition = token_partition(plan, span);
  return {start, partition, (span + partition - 1) / partition};
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

// Where a split-K block's work lies. grid: (tokens, max_parts * head_chunks, kv_heads).
// split_block_of fills it. No member initializers: with them, nvcc numbered two registers of the
// fp8 tensor-core kernel (head_dim 128) the other way round, and ptxas then scheduled it differently.
struct split_block {
  int token, kv_head, chunk, part; // from the block's index
  int seq;                         // the token's sequence
  int context;                     // positions[token] + 1: the token attends to [first, context)
  int first;                       // its first visible position (first_visible; 0 without a window)
  int partition;                   // positions per partition of its span (split_of)
  int begin, end;                  // this block's positions: [begin, end); those before `first` are masked
  int parts;                       // partitions of the token's span
};

// The prologue of every split-K block: false when the block has nothing to do (its token is the
// tiled kernel's, or its partition starts past the token's context).
template <class T, class C>
__device__ __forceinline__ bool split_block_of(const paged_attention_params<T, C>& p, const attention_plan& plan,
                                               split_block& b) {
  b.token = blockIdx.x;
  b.kv_head = blockIdx.z;
  b.chunk = blockIdx.y % plan.head_chunks;
  b.part = blockIdx.y / plan.head_chunks;
  b.seq = plan.one_token_sequences ? b.token : sequence_of(p.query_start, p.seqs, b.token);
  if (!plan.one_token_sequences && p.query_start[b.seq + 1] - p.query_start[b.seq] > plan.tile_min_q)
    return false; // the tiled kernel's token
  b.context = p.positions[b.token] + 1;
  b.first = first_visible(b.context, p.window);
  const token_split split = split_of(plan, b.context, p.window);
  b.partition = split.partition;
  b.begin = split.start + b.part * b.partition;
  if (b.begin >= b.context)
    return false;
  b.end = min(b.context, b.begin + b.partition);
  b.parts = split.parts;
  return true;
}

} // namespace troupe::kernels::cuda::detail
