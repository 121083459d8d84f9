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
#include <cuda/atomic>

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
// arrives last of `parts`. The block's barrier orders every thread's partial before thread 0's
// ticket, whose release (at GPU scope) publishes them to whichever block is last; that block's
// acquire orders its reads after every other block's partial (the pattern of cooperative
// groups' grid barrier and CUTLASS's semaphore). One thread takes the ticket, and no thread
// fences on its own: the block's tail is on the kernel's critical path, since the last block
// to finish merges.
__device__ __forceinline__ bool last_partition_arrived(std::uint32_t* counter, int parts) {
  __shared__ bool last;
  __syncthreads();
  if (threadIdx.x == 0) {
    ::cuda::atomic_ref<std::uint32_t, ::cuda::thread_scope_device> ticket(*counter);
    last = ticket.fetch_add(1u, ::cuda::memory_order_acq_rel) == static_cast<std::uint32_t>(parts - 1);
    if (last) // every other block has taken its ticket: ready for the next call
      ticket.store(0u, ::cuda::memory_order_relaxed);
  }
  __syncthreads();
  return last;
}

// out rows row0 .. row0 + rows - 1 from their `parts` partials, per output element: the
// statistics, then the partials, each a round trip to L2, and no shared memory. For calls whose
// weights do not fit the caller's spare shared memory (contexts of hundreds of thousands of
// positions, whose partitions are long enough that the merge is a small part of the call).
template <class T>
__device__ void merge_partials_streamed(const attention_plan& plan, int parts, std::size_t row0, int rows, int hd,
                                        T* out, int threads) {
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

// out rows row0 .. row0 + rows - 1 from their `parts` partials: out = sum_j e^(m_j - M) acc_j /
// sum_j e^(m_j - M) l_j. The partials were written by other blocks of this grid: read through
// L2 (__ldcg), never from this SM's L1. A warp per row reads its (max, sum) pairs and keeps each
// partition's weight in shared memory (one round of L2 reads), then every thread reads its
// elements' partials with `in_flight` elements x 8 partitions of loads in flight (one round when
// rows * hd <= in_flight * threads and parts <= 8, as at 8B shapes, batch 8; a few more otherwise).
// in_flight: the elements a thread has when rows * hd is about in_flight * threads (more cost
// registers: 4 in the MHA CUDA-core kernel, held to 64 registers, spilled 24 bytes).
// `scratch`: shared memory the block no longer needs (its partial is written), room for
// 2 * rows * parts + rows floats; with less, merge_partials_streamed.
// Reading statistics and partials per element (merge_partials_streamed) took 8 dependent rounds
// for 4 rows of 128 dims on 128 threads: the merging block's tail took ~14,000 cycles, now
// ~6,600, against ~1,500 for a block that does not merge (H200, per-block clock64 trace, 8B
// shapes, batch 8, ctx 4096); the last block to finish merges, so this is the kernel's end.
template <int in_flight, class T>
__device__ void merge_partials(const attention_plan& plan, int parts, std::size_t row0, int rows, int hd, T* out,
                               int threads, float* scratch, int scratch_floats) {
  if (2 * rows * parts + rows > scratch_floats) {
    merge_partials_streamed(plan, parts, row0, rows, hd, out, threads);
    return;
  }
  float* weight_s = scratch;               // [rows, parts]
  float* sum_s = weight_s + rows * parts;  // [rows, parts]
  float* inv_sum_s = sum_s + rows * parts; // [rows]
  // A warp per row: its (max, sum) pairs, then each partition's weight e^(m_j - M) in place of
  // its max. The lane that writes an entry is the lane that reads it back.
  const int lane = threadIdx.x % 32, warps = threads / 32;
  for (int h = threadIdx.x / 32; h < rows; h += warps) {
    const float2* stats = reinterpret_cast<const float2*>(plan.ws_stats) + (row0 + h) * plan.max_parts;
    float* weights = weight_s + h * parts;
    float* sums = sum_s + h * parts;
    float m = -INFINITY;
    for (int j = lane; j < parts; j += 32) {
      const float2 s = __ldcg(stats + j);
      weights[j] = s.x;
      sums[j] = s.y;
      m = fmaxf(m, s.x);
    }
    m = warp_max(m);
    float l = 0.0f;
    for (int j = lane; j < parts; j += 32) {
      const float w = __expf(weights[j] - m);
      weights[j] = w;
      l += w * sums[j];
    }
    l = warp_sum(l);
    if (lane == 0)
      inv_sum_s[h] = 1.0f / l;
  }
  __syncthreads();
  // Every thread: in_flight output elements at a time, their partials 8 partitions at a time.
  const int n = rows * hd;
  for (int base = threadIdx.x; base < n; base += threads * in_flight) {
    const float* acc[in_flight];
    int weight_row[in_flight];
    float o[in_flight];
#pragma unroll
    for (int e = 0; e < in_flight; ++e) {
      const int i = min(base + e * threads, n - 1), h = i / hd;
      acc[e] = plan.ws_acc + (row0 + h) * plan.max_parts * hd + (i - h * hd);
      weight_row[e] = h * parts;
      o[e] = 0.0f;
    }
#pragma unroll 8
    for (int j = 0; j < parts; ++j)
#pragma unroll
      for (int e = 0; e < in_flight; ++e)
        o[e] += weight_s[weight_row[e] + j] * __ldcg(acc[e] + static_cast<std::size_t>(j) * hd);
#pragma unroll
    for (int e = 0; e < in_flight; ++e)
      if (const int i = base + e * threads; i < n)
        out[row0 * hd + i] = from_float<T>(o[e] * inv_sum_s[i / hd]);
  }
}

} // namespace troupe::kernels::cuda::detail
