// Edits and penalties: one thread block per row. The raw row is copied first (when asked),
// then the logit_bias entries are added and the banned ids set to -inf, each id by one thread
// (the ids are distinct). Then the block counts the sequence's tokens into a scratch
// row (output occurrences in the low bits, a prompt flag in bit 30) with atomics, then each
// token's first claimant (the thread whose atomicExch reads a nonzero count) applies the
// penalties once: distinct tokens are penalised once, as the host's sort-and-unique does,
// without a sort. The scratch is cleared for the tokens it touches before counting, so it
// need not be zero at launch; the claim leaves those entries zero again.
#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

#include "kernels/cuda/penalties.hpp"
#include "kernels/cuda/row_scan.cuh"

namespace troupe::kernels::cuda {

namespace {
constexpr int threads = 256;
constexpr std::int32_t in_prompt = 1 << 30;
constexpr std::int32_t output_mask = in_prompt - 1;

__global__ void __launch_bounds__(threads)
    penalties_kernel(float* __restrict__ logits, int vocab, const penalty_row* __restrict__ rows,
                     const std::int32_t* __restrict__ tokens, const logit_edit* __restrict__ edits) {
  const penalty_row p = rows[blockIdx.x];
  float* row = logits + static_cast<std::size_t>(p.logits_row) * vocab;
  if (p.copy_row >= 0) {
    float* copy = logits + static_cast<std::size_t>(p.copy_row) * vocab;
    scan_row(row, vocab, [&](float x, int i) { copy[i] = x; });
  }
  // Without tokens there is no scratch row (and nothing below touches it).
  auto* counts = reinterpret_cast<std::int32_t*>(logits + static_cast<std::size_t>(max(p.scratch_row, 0)) * vocab);
  const std::int32_t* ids = tokens + p.token_begin;
  for (int i = threadIdx.x; i < p.token_count; i += blockDim.x)
    if (const int t = ids[i]; t >= 0 && t < vocab)
      counts[t] = 0;
  __syncthreads(); // the copy is complete before any edit
  const logit_edit* bias = edits + p.edit_begin;
  for (int i = threadIdx.x; i < p.bias_count; i += blockDim.x)
    if (const int t = bias[i].id; t >= 0 && t < vocab)
      row[t] = __fadd_rn(row[t], bias[i].bias);
  __syncthreads(); // a banned id that is also biased ends at -inf, as on the host
  const logit_edit* banned = bias + p.bias_count;
  for (int i = threadIdx.x; i < p.ban_count; i += blockDim.x)
    if (const int t = banned[i].id; t >= 0 && t < vocab)
      row[t] = -INFINITY;
  for (int i = threadIdx.x; i < p.token_count; i += blockDim.x)
    if (const int t = ids[i]; t >= 0 && t < vocab) {
      if (i < p.prompt_len)
        atomicOr(&counts[t], in_prompt);
      else
        atomicAdd(&counts[t], 1);
    }
  __syncthreads();
  for (int i = threadIdx.x; i < p.token_count; i += blockDim.x) {
    const int t = ids[i];
    if (t < 0 || t >= vocab)
      continue;
    const std::int32_t c = atomicExch(&counts[t], 0);
    if (c == 0)
      continue; // another thread holds this token
    float x = row[t];
    // The host's float operations, one rounding each (no contraction into an fma).
    if (p.repetition != 1.0f)
      x = x > 0.0f ? __fdiv_rn(x, p.repetition) : __fmul_rn(x, p.repetition);
    const int out = c & output_mask;
    if (out > 0 && (p.frequency != 0.0f || p.presence != 0.0f))
      x = __fsub_rn(x, __fadd_rn(__fmul_rn(p.frequency, static_cast<float>(out)), p.presence));
    row[t] = x;
  }
}
} // namespace

cudaError_t apply_penalties(float* logits, int vocab, const penalty_row* rows, int n, const std::int32_t* tokens,
                            const logit_edit* edits, cudaStream_t stream) {
  if (n <= 0 || vocab <= 0)
    return cudaSuccess;
  penalties_kernel<<<n, threads, 0, stream>>>(logits, vocab, rows, tokens, edits);
  return cudaGetLastError();
}

} // namespace troupe::kernels::cuda
