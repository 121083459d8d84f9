// How the split-K decode kernels (paged_attention_split_kv*.cu) merge their partitions
// without a second kernel. Each block of a (token, KV head, head chunk) writes its
// partition's partial (max, sum, unnormalised output) to the workspace, then takes a ticket
// from a counter of that (token, KV head, head chunk); the block that takes the last ticket
// reads every partition's partial back from L2 and writes the output. A separate combine
// kernel cost a launch and a chain of dependent loads per layer: 8.7 us of a 25 us attention
// call at batch 1 (13B shapes, H200, ncu), against ~2 us for the merge in the last block.
//
// The counters start at zero (the caller clears them once) and the last block puts its
// counter back to zero, so every call, and every replay of a CUDA graph, finds them zeroed.
// Only the .cu files of the split kernels include this.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "kernels/cuda/numeric.cuh"
#include "kernels/cuda/paged_attention_internal.cuh"

namespace troupe::kernels::cuda::detail {

// The counter of a split block: one per (token, KV head, head chunk); tokens * heads bound them.
__device__ __forceinline__ std::uint32_t* split_counter(const attention_plan& plan, int t, int kv_heads, int kv,
                                                        int chunk) {
  return plan.counters + (static_cast<std::size_t>(t) * kv_heads + kv) * plan.head_chunks + chunk;
}

// Called by every thread of a block after it wrote its partial: true in the block that
// arrives last of `parts`. The fence before the ticket makes this block's partial visible to
// whichever block is last; the fence after it orders the last block's reads after every
// other block's writes (the threadfence-reduction pattern of the CUDA programming guide).
__device__ __forceinline__ bool last_partition_arrived(std::uint32_t* counter, int parts) {
  __shared__ bool last;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    last = atomicAdd(counter, 1u) == static_cast<std::uint32_t>(parts - 1);
    if (last)
      atomicExch(counter, 0u); // every other block has taken its ticket: ready for the next call
  }
  __syncthreads();
  if (last)
    __threadfence();
  return last;
}

// out rows row0 .. row0 + rows - 1 from their `parts` partials: out = sum_j e^(m_j - M) acc_j /
// sum_j e^(m_j - M) l_j. The partials were written by other blocks of this grid: read through
// L2 (__ldcg), never from this SM's L1.
template <class T>
__device__ void merge_partials(const attention_plan& plan, int parts, std::size_t row0, int rows, int hd, T* out,
                               int threads) {
  for (int i = threadIdx.x; i < rows * hd; i += threads) {
    const int h = i / hd, d = i - h * hd;
    const std::size_t r = (row0 + h) * plan.max_parts;
    const float* stats = plan.ws_stats + 2 * r;
    const float* acc = plan.ws_acc + r * hd + d;
    float m = -INFINITY;
#pragma unroll 4
    for (int j = 0; j < parts; ++j)
      m = fmaxf(m, __ldcg(stats + 2 * j));
    float o = 0.0f, l = 0.0f;
#pragma unroll 4
    for (int j = 0; j < parts; ++j) {
      const float w = __expf(__ldcg(stats + 2 * j) - m);
      l += w * __ldcg(stats + 2 * j + 1);
      o += w * __ldcg(acc + static_cast<std::size_t>(j) * hd);
    }
    out[(row0 + h) * hd + d] = from_float<T>(o * (1.0f / l));
  }
}

} // namespace troupe::kernels::cuda::detail
