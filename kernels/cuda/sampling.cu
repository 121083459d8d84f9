// Sampling: one thread block per row. Each cut (top-k, top-p) and the draw itself is the
// same search (radix_select.cuh): the first candidate, in sampling order, at which a running
// total (of counts or of weights) passes a target.
//
// Speed (bench/results/gpu-sampling-notes.md): the row is staged in shared memory when it
// fits (vocab <= ~40k), so that each pass reads it at shared-memory latency.
#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

#include "kernels/cuda/radix_select.cuh"
#include "kernels/cuda/sampling.hpp"

namespace troupe::kernels::cuda {

namespace {
using namespace radix;

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
  if (p.target >= 0) { // uniform across the block: nobody reaches a barrier
    if (threadIdx.x == 0)
      tokens[blockIdx.x] = p.target;
    return;
  }
  const float* row = logits + static_cast<std::size_t>(p.logits_row) * vocab;
  const auto max_op = [](u64 a, u64 b) { return a > b ? a : b; };
  const auto sum_op = [](u64 a, u64 b) { return a + b; };

  // The first pass finds the top candidate and stages the row: every later pass reads the copy.
  float* copy = staged ? reinterpret_cast<float*>(dynamic + histogram_bytes) : nullptr;
  u64 top = 0;
  scan_row(row, vocab, [&](float x, int i) {
    if (copy)
      copy[i] = x;
    top = max_op(top, rank_key(x, i));
  });
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
    scan_row(row, vocab, [&](float x, int i) {
      if (admit(rank_key(x, i), x))
        sum += weigh(x);
    });
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
