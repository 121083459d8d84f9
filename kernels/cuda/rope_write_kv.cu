// RoPE + KV-cache write: a grid of (token, group of heads), where the heads are the token's q
// heads, then its k heads, then its v heads. Each thread owns a pack of V consecutive rotary
// pairs of one head: elements i .. i+V-1 and their partners i + head_dim/2 .. (16 bytes of
// bf16 or fp32 each where head_dim/2 and the pointers allow; element_pack.cuh). A block first
// works out the (cos, sin) of its token's head_dim/2 angles (sincosf, accurate, as the CPU's
// cosf/sinf) into shared memory, for all its heads.
// With Qwen3's q/k norm the block first works out each of its q and k heads' 1 / rms (a warp a
// head, fp32) too, and every pack is scaled by it and by the weight before it is rotated.
// History (H200): one block per token walking all its heads left a 12-token decode step on 12
// SMs (32 us a layer); then one pair a thread, each with its own sincosf, took 55 / 220 us at
// 1,000 / 4,096 prefill tokens of 13B, about 4x its bytes (bench/results/2026-12-01-h200-prefill-small-kernels).
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <type_traits>

#include "kernels/cuda/element_pack.cuh"
#include "kernels/cuda/numeric.cuh"
#include "kernels/cuda/rope_write_kv.hpp"

namespace troupe::kernels::cuda {

namespace {
using detail::element_pack;
using detail::from_float;
using detail::to_float;
constexpr int threads = 256;

template <class T, class C, int V>
__global__ void __launch_bounds__(threads)
    rope_write_kv_kernel(rope_write_kv_params<T, C> p, int heads_per_block, float inv_k_scale, float inv_v_scale) {
  extern __shared__ float2 angle_s[]; // [head_dim / 2]: (cos, sin) of this token's angles
  // then [heads_per_block] floats: 1 / rms of the block's q and k heads (q/k norm only)
  float* inv_rms_s = reinterpret_cast<float*>(angle_s + p.head_dim / 2);
  const int t = blockIdx.x;
  const int half = p.head_dim / 2, packs = half / V; // packs in half a head
  const int all_heads = p.heads + 2 * p.kv_heads;
  const bool qk_norm = p.q_norm != nullptr;
  const float pos = static_cast<float>(p.positions[t]);
  for (int i = threadIdx.x; i < half; i += blockDim.x) {
    float sin_i, cos_i;
    sincosf(pos * p.inv_freq[i], &sin_i, &cos_i);
    angle_s[i] = make_float2(cos_i, sin_i);
  }

  T* row = p.qkv + static_cast<std::size_t>(t) * all_heads * p.head_dim;
  // A pack of the row, in fp32.
  auto load = [&](int col, float(&out)[V]) {
    const element_pack<T, V> x = detail::load_pack<V>(row + col);
#pragma unroll
    for (int v = 0; v < V; ++v)
      out[v] = to_float(x.e[v]);
  };
  auto store = [](auto* to, const float(&in)[V], float scale) {
    using E = std::remove_pointer_t<decltype(to)>;
    element_pack<E, V> x;
#pragma unroll
    for (int v = 0; v < V; ++v)
      x.e[v] = from_float<E>(in[v] * scale);
    detail::store_pack(to, x);
  };
  const std::int64_t slot = p.slot_mapping[t];
  const std::int64_t block = slot / p.block_size, offset = slot % p.block_size;
  // Element d of kv head h of this token's slot.
  auto cache_index = [&](int h, int d) {
    return ((static_cast<std::size_t>(block) * p.kv_heads + h) * p.block_size + offset) * p.head_dim + d;
  };
  const int first_head = blockIdx.y * heads_per_block;
  if (qk_norm) { // a warp per q or k head: the mean of its squares, in fp32 as rms_norm.cu
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    for (int j = warp; j < heads_per_block; j += blockDim.x / 32) {
      const int head = first_head + j;
      if (head >= p.heads + p.kv_heads)
        break; // v heads (and past the row): not normalized
      float sum_sq = 0.0f;
      for (int d = lane; d < p.head_dim; d += 32) {
        const float x = to_float(row[head * p.head_dim + d]);
        sum_sq += x * x;
      }
#pragma unroll
      for (int o = 16; o > 0; o /= 2)
        sum_sq += __shfl_xor_sync(0xffffffffu, sum_sq, o);
      if (lane == 0)
        inv_rms_s[j] = rsqrtf(sum_sq / static_cast<float>(p.head_dim) + p.norm_eps);
    }
  }
  __syncthreads(); // angle_s (and inv_rms_s) are complete

  for (int item = threadIdx.x; item < heads_per_block * packs; item += blockDim.x) {
    const int head = first_head + item / packs, i = item % packs * V;
    if (head >= all_heads)
      break; // items go head by head: every later one is past the row too
    const int col = head * p.head_dim + i;
    const bool cached = slot >= 0;
    if (head < p.heads + p.kv_heads) { // q or k: rotate the pairs
      if (head >= p.heads && !cached)
        continue; // this token is not cached
      float a[V], b[V], lo[V], hi[V];
      load(col, a);
      load(col + half, b);
      if (qk_norm) { // x / rms(x) * weight, kept in fp32 into the rotation
        const T* weight = head < p.heads ? p.q_norm : p.k_norm;
        const float inv_rms = inv_rms_s[head - first_head];
        const auto scale = [&](int d) { return detail::norm_scale(weight[d], p.norm_weight_offset); };
#pragma unroll
        for (int v = 0; v < V; ++v) {
          a[v] = a[v] * inv_rms * scale(i + v);
          b[v] = b[v] * inv_rms * scale(i + half + v);
        }
      }
#pragma unroll
      for (int v = 0; v < V; ++v) {
        const float2 cs = angle_s[i + v];
        lo[v] = a[v] * cs.x - b[v] * cs.y;
        hi[v] = b[v] * cs.x + a[v] * cs.y;
      }
      if (head < p.heads) {
        store(row + col, lo, 1.0f);
        store(row + col + half, hi, 1.0f);
      } else {
        store(p.k_cache + cache_index(head - p.heads, i), lo, inv_k_scale);
        store(p.k_cache + cache_index(head - p.heads, i + half), hi, inv_k_scale);
      }
    } else if (cached) { // v: copied, both packs of the pair
      const int h = head - p.heads - p.kv_heads;
      float a[V], b[V];
      load(col, a);
      load(col + half, b);
      store(p.v_cache + cache_index(h, i), a, inv_v_scale);
      store(p.v_cache + cache_index(h, i + half), b, inv_v_scale);
    }
  }
}

template <class T, class C, int V>
cudaError_t launch(const rope_write_kv_params<T, C>& p, cudaStream_t stream) {
  // As many heads per block as fill its threads with packs, at least one.
  const int packs = p.head_dim / 2 / V;
  const int heads_per_block = packs >= threads ? 1 : threads / packs;
  const int all_heads = p.heads + 2 * p.kv_heads;
  const dim3 grid(p.tokens, (all_heads + heads_per_block - 1) / heads_per_block);
  if (grid.y > 65535)
    return cudaErrorInvalidValue;
  const std::size_t smem = sizeof(float2) * (p.head_dim / 2) + (p.q_norm != nullptr ? sizeof(float) * heads_per_block : 0);
  rope_write_kv_kernel<T, C, V>
      <<<grid, threads, smem, stream>>>(p, heads_per_block, 1.0f / p.k_scale, 1.0f / p.v_scale);
  return cudaGetLastError();
}
} // namespace

template <class T, class C>
cudaError_t rope_write_kv(const rope_write_kv_params<T, C>& p, cudaStream_t stream) {
  if (p.tokens <= 0)
    return cudaSuccess;
  if (p.head_dim <= 0 || p.head_dim % 2 != 0 || p.block_size <= 0 || p.heads <= 0 || p.kv_heads <= 0 ||
      p.head_dim / 2 > 6144) // the angles of half a head fit in 48 KB of shared memory
    return cudaErrorInvalidValue;
  if (p.q_norm != nullptr && p.head_dim / 2 > 6144 - threads / 2) // and the block's heads' 1 / rms
    return cudaErrorInvalidValue;
  if ((p.q_norm == nullptr) != (p.k_norm == nullptr)) // q/k norm is both or neither
    return cudaErrorInvalidValue;
  // Every offset a thread adds is a multiple of the pack (head_dim / 2 is).
  constexpr std::size_t widest = sizeof(T) > sizeof(C) ? sizeof(T) : sizeof(C);
  return detail::with_pack_width(
      detail::widest_pack(p.head_dim / 2, 16 / static_cast<int>(sizeof(T)), widest, p.qkv, p.k_cache, p.v_cache),
      [&](auto v) { return launch<T, C, decltype(v)::value>(p, stream); });
}

template cudaError_t rope_write_kv<float, float>(const rope_write_kv_params<float, float>&, cudaStream_t);
template cudaError_t rope_write_kv<float, __nv_fp8_e4m3>(const rope_write_kv_params<float, __nv_fp8_e4m3>&,
                                                         cudaStream_t);
template cudaError_t rope_write_kv<__nv_bfloat16, __nv_bfloat16>(
    const rope_write_kv_params<__nv_bfloat16, __nv_bfloat16>&, cudaStream_t);
template cudaError_t rope_write_kv<__nv_bfloat16, __nv_fp8_e4m3>(
    const rope_write_kv_params<__nv_bfloat16, __nv_fp8_e4m3>&, cudaStream_t);
template cudaError_t rope_write_kv<__half, __half>(const rope_write_kv_params<__half, __half>&, cudaStream_t);
template cudaError_t rope_write_kv<__half, __nv_fp8_e4m3>(const rope_write_kv_params<__half, __nv_fp8_e4m3>&,
                                                          cudaStream_t);

} // namespace troupe::kernels::cuda
