// Log-probabilities: one thread block per row, two passes over it. The first finds the top n
// (and with them the maximum): each thread keeps its own largest rank keys (radix_select.cuh's
// order: logit descending, ties to the lower id) in registers, which most elements skip with one
// compare; each warp then merges its lanes' lists and the first warp the warps' (n rounds of a
// warp-wide max). The list is indexed only by constants, so that it stays in registers: a list
// in local memory made every launch pay for the driver's local-memory resize (~0.2-0.4 ms).
// No atomics either: a radix select's histograms serialise on the two or three bins a row's
// exponents fall into (~0.3 ms per 128k-token row). The second pass sums exp(x - max) in double.
#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

#include "kernels/cuda/logprobs.hpp"
#include "kernels/cuda/radix_select.cuh"
#include "kernels/cuda/row_scan.cuh"

namespace troupe::kernels::cuda {

namespace {
using namespace radix;

__device__ double block_sum(double v, double* partial) {
  for (int o = 16; o > 0; o >>= 1)
    v += __shfl_down_sync(full_mask, v, o);
  if ((threadIdx.x & 31) == 0)
    partial[threadIdx.x >> 5] = v;
  __syncthreads();
  double total = 0.0;
  for (int w = 0; w < warps; ++w) // every thread adds the warps' sums in the same order
    total += partial[w];
  __syncthreads();
  return total;
}

__device__ u64 warp_max(u64 v) {
  for (int o = 16; o > 0; o >>= 1) {
    const u64 other = __shfl_xor_sync(full_mask, v, o);
    v = other > v ? other : v;
  }
  return v;
}

constexpr int most_kept = max_top_logprobs + 1; // the top n, and the maximum when n is 0

// Inserts key into the descending list (a no-op for a key below its last).
template <int kept>
__device__ __forceinline__ void insert(u64 (&list)[kept], u64 key) {
#pragma unroll
  for (int j = 0; j < kept; ++j)
    if (key > list[j]) {
      const u64 t = list[j];
      list[j] = key;
      key = t;
    }
}

// Drops the list's first key.
template <int kept>
__device__ __forceinline__ void pop(u64 (&list)[kept]) {
#pragma unroll
  for (int j = 0; j + 1 < kept; ++j)
    list[j] = list[j + 1];
  list[kept - 1] = 0;
}

// `kept` >= n + 1 of every row: a thread's list is no longer than the rows need (each insertion
// costs `kept` compare-and-swaps, and most elements of a thread's first stretch insert).
template <int kept>
__global__ void __launch_bounds__(threads)
    logprobs_kernel(const float* __restrict__ logits, int vocab, const logprob_row* __restrict__ rows,
                    const std::int32_t* __restrict__ tokens, logprob_result* __restrict__ out) {
  __shared__ u64 warp_top[warps][kept];
  __shared__ u64 block_top[kept];
  __shared__ double partial[warps];
  const logprob_row p = rows[blockIdx.x];
  const float* row = logits + static_cast<std::size_t>(p.source_row) * vocab;
  const int n = min(min(p.top_n, kept - 1), vocab);
  const int rounds = n + 1;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;

  // Pass 1: each thread's largest keys (0: none; every real key is larger).
  u64 list[kept];
#pragma unroll
  for (int j = 0; j < kept; ++j)
    list[j] = 0;
  scan_row(row, vocab, [&](float x, int i) {
    if (const u64 key = rank_key(x, i); key > list[kept - 1])
      insert(list, key);
  });
  // Each warp's `rounds` largest: the lane holding the warp's largest head gives it up.
  for (int k = 0; k < rounds; ++k) {
    const u64 best = warp_max(list[0]);
    if (best != 0 && list[0] == best)
      pop(list);
    if (lane == 0)
      warp_top[warp][k] = best;
  }
  __syncthreads();
  if (warp == 0) {
    int from = 0; // lane < warps: how many of warp_top[lane] are taken
    for (int k = 0; k < rounds; ++k) {
      const u64 head = lane < warps && from < rounds ? warp_top[lane][from] : u64{0};
      const u64 best = warp_max(head);
      if (best != 0 && head == best)
        ++from;
      if (lane == 0)
        block_top[k] = best;
    }
  }
  __syncthreads();
  // Pass 2: log_z = max + log(sum exp(x - max)), the sum in double.
  const float xmax = row[id_of(block_top[0])];
  double sum = 0.0;
  scan_row(row, vocab, [&](float x, int) { sum += static_cast<double>(expf(x - xmax)); });
  sum = block_sum(sum, partial);
  const float log_z = xmax + static_cast<float>(log(sum));
  if (threadIdx.x == 0) {
    logprob_result& r = out[blockIdx.x];
    r.logprob = row[tokens[p.token_index]] - log_z;
    for (int k = 0; k < n; ++k) {
      r.top_ids[k] = id_of(block_top[k]);
      r.top_logprobs[k] = row[id_of(block_top[k])] - log_z;
    }
  }
}
} // namespace

cudaError_t compute_logprobs(const float* logits, int vocab, const logprob_row* rows, int n, int max_top_n,
                             const std::int32_t* tokens, logprob_result* out, cudaStream_t stream) {
  if (n <= 0 || vocab <= 0)
    return cudaSuccess;
  if (max_top_n < 2)
    logprobs_kernel<2><<<n, threads, 0, stream>>>(logits, vocab, rows, tokens, out);
  else if (max_top_n < 4)
    logprobs_kernel<4><<<n, threads, 0, stream>>>(logits, vocab, rows, tokens, out);
  else if (max_top_n < 8)
    logprobs_kernel<8><<<n, threads, 0, stream>>>(logits, vocab, rows, tokens, out);
  else
    logprobs_kernel<most_kept><<<n, threads, 0, stream>>>(logits, vocab, rows, tokens, out);
  return cudaGetLastError();
}

} // namespace troupe::kernels::cuda
