// Sampling: one thread block per row. Each cut (top-k, top-p) and the draw itself is the
// same search: the first candidate, in sampling order, at which a running total (of counts
// or of weights) passes a target. The order is that of 64-bit rank keys (the logit's
// order-preserving bits, then the id reversed so that ties go to the lower id), and the
// search fixes the key 8 bits at a time from the top with a 256-bin histogram in shared
// memory: at most 8 passes over the row instead of a sort of it (3-4 in practice: a bucket
// holding one key ends the search).
//
// Speed (bench/results/gpu-sampling-notes.md): the row is staged in shared memory when it
// fits (vocab <= ~40k), so that each pass reads it at shared-memory latency; each warp
// counts into its own histogram, because the first digit (sign and exponent) puts most of
// a row into two or three bins and one shared histogram serialised every atomic on them.
#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

#include "kernels/cuda/sampling.hpp"

namespace troupe::kernels::cuda {

namespace {
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
__device__ u64 block_reduce(u64 v, Op op, shared_state& sh) {
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
__device__ u64 first_crossing(const float* row, int vocab, u64 target, Admit admit, Weigh weigh, u64 fallback,
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
#pragma unroll 4
    for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
      const float x = row[i];
      const u64 key = rank_key(x, i);
      if ((key & mask) != prefix || !admit(key, x))
        continue;
      const int d = static_cast<int>((key >> shift) & 255);
      atomicAdd(&my_count[d], 1u);
      if (const u64 w = weigh(x))
        atomicAdd(&my_weight[d], w);
    }
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
      for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
        const float x = row[i];
        const u64 key = rank_key(x, i);
        if ((key & mask) == prefix && admit(key, x))
          sh.result = key;
      }
      __syncthreads();
      const u64 key = sh.result;
      __syncthreads();
      return key;
    }
    __syncthreads(); // before the next pass clears the histogram
  }
  return prefix;
}

__global__ void __launch_bounds__(threads)
    sample_kernel(const float* __restrict__ logits, int vocab, const sample_row_params* __restrict__ params,
                  std::int32_t* __restrict__ tokens, bool staged) {
  extern __shared__ __align__(16) unsigned char dynamic[];
  __shared__ shared_state sh;
  if (threadIdx.x == 0) {
    sh.warp_weight = reinterpret_cast<u64*>(dynamic);
    sh.warp_count = reinterpret_cast<unsigned*>(dynamic + warps * bins * sizeof(u64));
  }
  const sample_row_params p = params[blockIdx.x];
  const float* row = logits + static_cast<std::size_t>(p.logits_row) * vocab;
  const auto max_op = [](u64 a, u64 b) { return a > b ? a : b; };
  const auto sum_op = [](u64 a, u64 b) { return a + b; };

  // The first pass finds the top candidate and stages the row: every later pass reads the copy.
  float* copy = staged ? reinterpret_cast<float*>(dynamic + histogram_bytes) : nullptr;
  u64 top = 0;
#pragma unroll 4
  for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
    const float x = row[i];
    if (copy)
      copy[i] = x;
    top = max_op(top, rank_key(x, i));
  }
  top = block_reduce(top, max_op, sh); // its barriers publish the copy and sh's pointers
  if (copy)
    row = copy;
  if (p.temperature == 0.0f || vocab == 1) {
    if (threadIdx.x == 0)
      tokens[blockIdx.x] = id_of(top);
    return;
  }

  const float xmax = row[id_of(top)];
  const float inv_t = 1.0f / p.temperature;
  const auto weigh = [=](float x) { return fixed(weight(x, xmax, inv_t)); };
  const auto total_of = [&](auto admit) {
    u64 sum = 0;
    for (int i = threadIdx.x; i < vocab; i += blockDim.x) {
      const float x = row[i];
      if (admit(rank_key(x, i), x))
        sum += weigh(x);
    }
    return block_reduce(sum, sum_op, sh);
  };

  // Candidates are the keys >= bound. top-k: the k-th key in order.
  u64 bound = 0;
  if (p.top_k > 0 && p.top_k < vocab)
    bound = first_crossing(
        row, vocab, static_cast<u64>(p.top_k - 1), [](u64, float) { return true; }, [](float) { return u64{1}; }, top,
        sh);
  // top-p: the shortest prefix whose weight reaches top_p of the total (the CPU's cum >= top_p).
  if (p.top_p < 1.0f) {
    const auto in_bound = [=](u64 key, float) { return key >= bound; };
    const u64 total = total_of(in_bound);
    const double reach = ceil(static_cast<double>(p.top_p) * static_cast<double>(total));
    const u64 target = reach >= 1.0 ? static_cast<u64>(reach) - 1 : 0;
    bound = first_crossing(row, vocab, target, in_bound, weigh, top, sh);
  }
  // min-p: weights at least min_p of the top one's (which is 1); the top always stays.
  const float min_p = p.min_p;
  const auto admitted = [=](u64 key, float x) {
    return key >= bound && (key == top || weight(x, xmax, inv_t) >= min_p);
  };
  const u64 total = total_of(admitted);
  if (total == 0) { // only when the logits hold inf or NaN
    if (threadIdx.x == 0)
      tokens[blockIdx.x] = id_of(top);
    return;
  }
  u64 target = static_cast<u64>(p.u * static_cast<double>(total));
  if (target >= total)
    target = total - 1;
  const u64 pick = first_crossing(row, vocab, target, admitted, weigh, top, sh);
  if (threadIdx.x == 0)
    tokens[blockIdx.x] = id_of(pick);
}
} // namespace

cudaError_t sample_rows(const float* logits, int vocab, const sample_row_params* params, int rows, std::int32_t* tokens,
                        cudaStream_t stream) {
  if (rows <= 0 || vocab <= 0)
    return cudaSuccess;
  int device = 0, optin = 0;
  if (cudaError_t e = cudaGetDevice(&device); e != cudaSuccess)
    return e;
  if (cudaError_t e = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device); e != cudaSuccess)
    return e;
  const std::size_t row_bytes = static_cast<std::size_t>(vocab) * sizeof(float);
  const std::size_t room = static_cast<std::size_t>(optin) - sizeof(shared_state) - 1024; // static shared + slack
  const bool staged = histogram_bytes + row_bytes <= room;
  const std::size_t dynamic = histogram_bytes + (staged ? row_bytes : 0);
  if (cudaError_t e =
          cudaFuncSetAttribute(sample_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(dynamic));
      e != cudaSuccess)
    return e;
  sample_kernel<<<rows, threads, dynamic, stream>>>(logits, vocab, params, tokens, staged);
  return cudaGetLastError();
}

} // namespace troupe::kernels::cuda
