// Rank keys and radix selection over a row of fp32 logits: the sampler's order, which the
// log-probability kernel's top n follows too. One thread block per row finds the first candidate, in sampling order, at
// which a running total (of counts or of weights) passes a target. The order is that of 64-bit rank keys (the logit's
// order-preserving bits, then the id reversed so that ties go to the lower id), and the search fixes the key 8 bits at
// a time from the top with a 256-bin histogram in shared memory: at most 8 passes over the row instead of a sort of it
// (3-4 in practice: a bucket holding one key ends the search).
//
// Each warp counts into its own histogram (dynamic shared memory, histogram_bytes), because
// the first digit (sign and exponent) puts most of a row into two or three bins and one shared
// histogram serialised every atomic on them. Launch with `threads` threads per block.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

#include "kernels/cuda/row_scan.cuh"

namespace troupe::kernels::cuda::radix {

using u64 = unsigned long long;
constexpr int threads = 512;
constexpr int warps = threads / 32;
constexpr int bins = 256;
constexpr std::size_t histogram_bytes = warps * bins * (sizeof(unsigned long long) + sizeof(unsigned));
constexpr unsigned full_mask = 0xffffffffu;
constexpr float fixed_one = 0x1p40f; // a weight of 1 (the top candidate's); scaling by 2^40 is exact

// Larger key = earlier in the order: logit descending, then id ascending. NaN sorts last.
__device__ inline u64 rank_key(float x, int id) {
  const std::uint32_t bits = __float_as_uint(x);
  const std::uint32_t ordered = isnan(x) ? 0u : (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
  return (static_cast<u64>(ordered) << 32) | (0xffffffffu - static_cast<std::uint32_t>(id));
}
__device__ inline int id_of(u64 key) {
  return static_cast<int>(0xffffffffu - static_cast<std::uint32_t>(key));
}

// The CPU sampler's weight, exp((x - max) / T), in float (the CPU's double exp rounded to
// float agrees to an ulp or two: a double exp per element per pass cost more than the rest).
__device__ inline float weight(float x, float xmax, float inv_t) {
  return isnan(x) ? 0.0f : expf((x - xmax) * inv_t);
}
__device__ inline u64 fixed(float w) {
  return w > 0.0f ? __float2ull_rn(w * fixed_one) : 0;
}

struct shared_state {
  u64 weight[bins];     // per digit: total weight (or count) of the admitted keys under the prefix
  unsigned count[bins]; // per digit: how many keys
  u64* warp_weight;     // [warps][bins] in dynamic shared memory: each warp's own histogram
  unsigned* warp_count; // [warps][bins]
  u64 partial[warps];   // block reductions
  u64 result;
  u64 above; // the running total before the chosen digit's bucket
  int digit; // the chosen digit, -1 if none crossed
  unsigned digit_count;
};

template <class Op>
__device__ inline u64 block_reduce(u64 v, Op op, shared_state& sh) {
  for (int o = 16; o > 0; o >>= 1)
    v = op(v, __shfl_down_sync(full_mask, v, o));
  if ((threadIdx.x & 31) == 0)
    sh.partial[threadIdx.x >> 5] = v;
  __syncthreads();
  if (threadIdx.x < 32) {
    v = threadIdx.x < warps ? sh.partial[threadIdx.x] : 0;
    for (int o = 16; o > 0; o >>= 1)
      v = op(v, __shfl_down_sync(full_mask, v, o));
    if (threadIdx.x == 0)
      sh.result = v;
  }
  __syncthreads();
  const u64 r = sh.result;
  __syncthreads(); // sh is reused by the next step
  return r;
}

// The rank key of the first admitted element, in order, at which the running total of
// weigh() exceeds target; `fallback` if none does (the caller keeps target below the total).
template <class Admit, class Weigh>
__device__ inline u64 first_crossing(const float* row, int vocab, u64 target, Admit admit, Weigh weigh, u64 fallback,
                                     shared_state& sh) {
  u64 prefix = 0, mask = 0, above = 0;
  for (int shift = 56; shift >= 0; shift -= 8) {
    for (int d = threadIdx.x; d < warps * bins; d += blockDim.x) {
      sh.warp_weight[d] = 0;
      sh.warp_count[d] = 0;
    }
    __syncthreads();
    u64* my_weight = sh.warp_weight + (threadIdx.x >> 5) * bins;
    unsigned* my_count = sh.warp_count + (threadIdx.x >> 5) * bins;
    scan_row(row, vocab, [&](float x, int i) {
      const u64 key = rank_key(x, i);
      if ((key & mask) != prefix || !admit(key, x))
        return;
      const int d = static_cast<int>((key >> shift) & 255);
      atomicAdd(&my_count[d], 1u);
      if (const u64 w = weigh(x))
        atomicAdd(&my_weight[d], w);
    });
    __syncthreads();
    for (int d = threadIdx.x; d < bins; d += blockDim.x) {
      u64 w = 0;
      unsigned c = 0;
      for (int k = 0; k < warps; ++k) {
        w += sh.warp_weight[k * bins + d];
        c += sh.warp_count[k * bins + d];
      }
      sh.weight[d] = w;
      sh.count[d] = c;
    }
    __syncthreads();
    if (threadIdx.x < 32) {
      // Lane l holds digits 255 - 8l down to 248 - 8l, in order; a scan over lanes finds the crossing one.
      const int lane = threadIdx.x;
      u64 lane_total = 0;
      for (int j = 0; j < 8; ++j)
        lane_total += sh.weight[255 - 8 * lane - j];
      u64 inclusive = lane_total;
      for (int o = 1; o < 32; o <<= 1) {
        const u64 n = __shfl_up_sync(full_mask, inclusive, o);
        if (lane >= o)
          inclusive += n;
      }
      const unsigned crossing = __ballot_sync(full_mask, above + inclusive > target);
      if (crossing == 0 && lane == 0)
        sh.digit = -1;
      if (crossing != 0 && lane == __ffs(crossing) - 1) {
        u64 before = above + inclusive - lane_total;
        int d = 255 - 8 * lane;
        for (int j = 0; j < 8; ++j, --d) {
          if (before + sh.weight[d] > target)
            break;
          before += sh.weight[d];
        }
        sh.digit = d;
        sh.above = before;
        sh.digit_count = sh.count[d];
      }
    }
    __syncthreads();
    const int digit = sh.digit;
    const unsigned in_bucket = sh.digit_count;
    above = sh.above;
    if (digit < 0)
      return fallback;
    prefix |= static_cast<u64>(digit) << shift;
    mask |= static_cast<u64>(255) << shift;
    if (in_bucket == 1 && shift > 0) {
      // One key left under the prefix: find it instead of fixing its remaining bits.
      __syncthreads(); // every thread has read sh.digit*
      scan_row(row, vocab, [&](float x, int i) {
        const u64 key = rank_key(x, i);
        if ((key & mask) == prefix && admit(key, x))
          sh.result = key;
      });
      __syncthreads();
      const u64 key = sh.result;
      __syncthreads();
      return key;
    }
    __syncthreads(); // before the next pass clears the histogram
  }
  return prefix;
}

} // namespace troupe::kernels::cuda::radix
