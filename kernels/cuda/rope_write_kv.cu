// RoPE + KV-cache write: a grid of (token, group of heads_per_block heads), where the heads
// are the token's q heads, then its k heads, then its v heads; each thread owns one rotary
// pair (i, i + head_dim/2) of one head and computes its (cos, sin) itself (sincosf,
// accurate, as the CPU's cosf/sinf). One block per token walking all its heads left a
// decode step of 12 tokens on 12 SMs, 32 us per layer (bench/results/2026-11-30-h200-kernels.md).
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include "kernels/cuda/numeric.cuh"
#include "kernels/cuda/rope_write_kv.hpp"

namespace troupe::kernels::cuda {

namespace {
using detail::from_float;
using detail::to_float;
constexpr int threads = 128;

template <class T, class C>
__global__ void rope_write_kv_kernel(rope_write_kv_params<T, C> p, int heads_per_block, float inv_k_scale,
                                     float inv_v_scale) {
  const int t = blockIdx.x;
  const int half = p.head_dim / 2;
  const int row_width = (p.heads + 2 * p.kv_heads) * p.head_dim;
  T* row = p.qkv + static_cast<std::size_t>(t) * row_width;
  auto load = [&](int col) {
    float v = to_float(row[col]);
    if (p.qkv_bias != nullptr)
      v += to_float(p.qkv_bias[col]);
    return v;
  };
  const std::int64_t slot = p.slot_mapping[t];
  const std::int64_t block = slot / p.block_size, offset = slot % p.block_size;
  // Element d of kv head h of this token's slot.
  auto cache_index = [&](int h, int d) {
    return ((static_cast<std::size_t>(block) * p.kv_heads + h) * p.block_size + offset) * p.head_dim + d;
  };
  const float pos = static_cast<float>(p.positions[t]);

  const int first_head = blockIdx.y * heads_per_block;
  for (int item = threadIdx.x; item < heads_per_block * half; item += blockDim.x) {
    const int head = first_head + item / half, i = item % half;
    const int col = head * p.head_dim + i;
    if (head < p.heads + p.kv_heads) { // q or k: rotate the pair
      if (head >= p.heads && slot < 0)
        continue; // this token is not cached
      float sin_i, cos_i;
      sincosf(pos * p.inv_freq[i], &sin_i, &cos_i);
      const float a = load(col), b = load(col + half);
      const float lo = a * cos_i - b * sin_i, hi = b * cos_i + a * sin_i;
      if (head < p.heads) {
        row[col] = from_float<T>(lo);
        row[col + half] = from_float<T>(hi);
      } else {
        p.k_cache[cache_index(head - p.heads, i)] = from_float<C>(lo * inv_k_scale);
        p.k_cache[cache_index(head - p.heads, i + half)] = from_float<C>(hi * inv_k_scale);
      }
    } else if (head < p.heads + 2 * p.kv_heads && slot >= 0) { // v: copied, both elements of the pair
      const int h = head - p.heads - p.kv_heads;
      p.v_cache[cache_index(h, i)] = from_float<C>(load(col) * inv_v_scale);
      p.v_cache[cache_index(h, i + half)] = from_float<C>(load(col + half) * inv_v_scale);
    }
  }
}
} // namespace

template <class T, class C>
cudaError_t rope_write_kv(const rope_write_kv_params<T, C>& p, cudaStream_t stream) {
  if (p.tokens <= 0)
    return cudaSuccess;
  if (p.head_dim <= 0 || p.head_dim % 2 != 0 || p.block_size <= 0 || p.heads <= 0 || p.kv_heads <= 0)
    return cudaErrorInvalidValue;
  // As many heads per block as fill its threads with pairs (2 for head_dim 128), at least one.
  const int half = p.head_dim / 2;
  const int heads_per_block = half >= threads ? 1 : threads / half;
  const int all_heads = p.heads + 2 * p.kv_heads;
  const dim3 grid(p.tokens, (all_heads + heads_per_block - 1) / heads_per_block);
  if (grid.y > 65535)
    return cudaErrorInvalidValue;
  rope_write_kv_kernel<T, C><<<grid, threads, 0, stream>>>(p, heads_per_block, 1.0f / p.k_scale, 1.0f / p.v_scale);
  return cudaGetLastError();
}

template cudaError_t rope_write_kv<float, float>(const rope_write_kv_params<float, float>&, cudaStream_t);
template cudaError_t rope_write_kv<float, __nv_fp8_e4m3>(const rope_write_kv_params<float, __nv_fp8_e4m3>&,
                                                         cudaStream_t);
template cudaError_t rope_write_kv<__nv_bfloat16, __nv_bfloat16>(
    const rope_write_kv_params<__nv_bfloat16, __nv_bfloat16>&, cudaStream_t);
template cudaError_t rope_write_kv<__nv_bfloat16, __nv_fp8_e4m3>(
    const rope_write_kv_params<__nv_bfloat16, __nv_fp8_e4m3>&, cudaStream_t);

} // namespace troupe::kernels::cuda
