// The MoE router's top-k: one warp a token. Lane l holds experts l, l + 32, ... (up to 16 each);
// the softmax's max and sum are warp butterflies; top_k rounds of a warp arg-max on (probability,
// lower index) pick the experts in order, each removing its winner. The selection compares the
// probabilities as computed, not the logits, so that ties are those of the probabilities.
#include "kernels/cuda/moe.hpp"
#include "kernels/cuda/numeric.cuh"

namespace troupe::kernels::cuda {

namespace {
constexpr int warps_per_block = 4;
constexpr int per_lane = moe_max_experts / 32;

__global__ void __launch_bounds__(warps_per_block * 32)
    route_kernel(const float* __restrict__ logits, int logits_stride, int rows, int experts, int top_k, bool normalize,
                 int* __restrict__ topk_ids, float* __restrict__ topk_weights) {
  const int lane = threadIdx.x & 31;
  const int row = blockIdx.x * warps_per_block + (threadIdx.x >> 5);
  if (row >= rows)
    return;
  const float* l = logits + static_cast<std::size_t>(row) * logits_stride;

  float p[per_lane];
  float max = -INFINITY;
#pragma unroll
  for (int j = 0; j < per_lane; ++j) {
    const int e = lane + 32 * j;
    p[j] = e < experts ? l[e] : -INFINITY;
    max = fmaxf(max, p[j]);
  }
  max = detail::warp_max(max);
  float sum = 0.0f;
#pragma unroll
  for (int j = 0; j < per_lane; ++j) {
    p[j] = lane + 32 * j < experts ? expf(p[j] - max) : 0.0f;
    sum += p[j];
  }
  const float inv_sum = 1.0f / detail::warp_sum(sum);
#pragma unroll
  for (int j = 0; j < per_lane; ++j) // a taken or absent expert is -1, below every probability
    p[j] = lane + 32 * j < experts ? p[j] * inv_sum : -1.0f;

  int my_id = 0;
  float my_weight = 0.0f, chosen_sum = 0.0f;
  for (int slot = 0; slot < top_k; ++slot) {
    float best = -1.0f;
    int best_j = 0;
#pragma unroll
    for (int j = 0; j < per_lane; ++j) { // strictly greater: the lower index wins a tie
      if (p[j] > best) {
        best = p[j];
        best_j = j;
      }
    }
    int best_e = lane + 32 * best_j;
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) {
      const float other = __shfl_xor_sync(0xffffffffu, best, offset);
      const int other_e = __shfl_xor_sync(0xffffffffu, best_e, offset);
      if (other > best || (other == best && other_e < best_e)) {
        best = other;
        best_e = other_e;
      }
    }
    if ((best_e & 31) == lane) {
#pragma unroll
      for (int j = 0; j < per_lane; ++j)
        if (j == best_e / 32)
          p[j] = -1.0f;
    }
    chosen_sum += best; // the same on every lane, in slot order
    if (lane == slot) {
      my_id = best_e;
      my_weight = best;
    }
  }
  if (lane < top_k) {
    const std::size_t at = static_cast<std::size_t>(row) * top_k + lane;
    topk_ids[at] = my_id;
    topk_weights[at] = normalize ? my_weight / chosen_sum : my_weight;
  }
}
} // namespace

cudaError_t moe_route(const float* logits, int logits_stride, int rows, int experts, int top_k, bool normalize,
                      int* topk_ids, float* topk_weights, cudaStream_t stream) {
  if (experts < 1 || experts > moe_max_experts || top_k < 1 || top_k > moe_max_top_k || top_k > experts ||
      logits_stride < experts)
    return cudaErrorInvalidValue;
  if (rows <= 0)
    return cudaSuccess;
  const unsigned blocks = static_cast<unsigned>((rows + warps_per_block - 1) / warps_per_block);
  route_kernel<<<blocks, warps_per_block * 32, 0, stream>>>(logits, logits_stride, rows, experts, top_k, normalize,
                                                            topk_ids, topk_weights);
  return cudaGetLastError();
}

} // namespace troupe::kernels::cuda
