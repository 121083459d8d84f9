// RoPE + KV-cache write: one block per token. The block first computes the
// token's head_dim/2 (cos, sin) pairs into shared memory (sincosf, accurate, as
// the CPU's cosf/sinf), then its threads share out the q pairs, the k pairs
// (rotated straight into the cache) and the v elements.
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
__global__ void rope_write_kv_kernel(rope_write_kv_params<T, C> p, float inv_k_scale, float inv_v_scale) {
  extern __shared__ float trig[]; // [half] cos, then [half] sin
  const int t = blockIdx.x;
  const int half = p.head_dim / 2;
  float* cos_t = trig;
  float* sin_t = trig + half;
  const float pos = static_cast<float>(p.positions[t]);
  for (int i = threadIdx.x; i < half; i += blockDim.x)
    sincosf(pos * p.inv_freq[i], &sin_t[i], &cos_t[i]);
  __syncthreads();

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

  const int q_pairs = p.heads * half, k_pairs = p.kv_heads * half, v_elems = p.kv_heads * p.head_dim;
  for (int item = threadIdx.x; item < q_pairs + k_pairs + v_elems; item += blockDim.x) {
    if (item < q_pairs) {
      const int h = item / half, i = item % half;
      const int col = h * p.head_dim + i;
      const float a = load(col), b = load(col + half), c = cos_t[i], s = sin_t[i];
      row[col] = from_float<T>(a * c - b * s);
      row[col + half] = from_float<T>(b * c + a * s);
    } else if (slot < 0) {
      break; // this token is not cached (the rest of the items are k and v)
    } else if (item < q_pairs + k_pairs) {
      const int h = (item - q_pairs) / half, i = (item - q_pairs) % half;
      const int col = (p.heads + h) * p.head_dim + i;
      const float a = load(col), b = load(col + half), c = cos_t[i], s = sin_t[i];
      p.k_cache[cache_index(h, i)] = from_float<C>((a * c - b * s) * inv_k_scale);
      p.k_cache[cache_index(h, i + half)] = from_float<C>((b * c + a * s) * inv_k_scale);
    } else {
      const int e = item - q_pairs - k_pairs;
      const int h = e / p.head_dim, d = e % p.head_dim;
      p.v_cache[cache_index(h, d)] = from_float<C>(load((p.heads + p.kv_heads) * p.head_dim + e) * inv_v_scale);
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
  const std::size_t smem = sizeof(float) * p.head_dim;
  rope_write_kv_kernel<T, C><<<p.tokens, threads, smem, stream>>>(p, 1.0f / p.k_scale, 1.0f / p.v_scale);
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
