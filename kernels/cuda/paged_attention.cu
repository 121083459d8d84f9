// Paged attention, the simple correct version: one block per (query token, KV
// head) serves the whole GQA group of that KV head, so each K/V element is read
// once per group. It walks the token's context in tiles of positions: a tile of
// K and V is gathered from the block table into shared memory (converted to fp32),
// the group's scores for the tile are formed, and an online softmax (running max
// and sum in fp32) rescales the accumulator. Prefill and decode are the same
// loop; only the context length (position + 1) differs.
// Faster paths to come: split-K over the context for long decodes, several query
// tokens per block (and tensor cores) for prefill, vector loads.
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <cmath>

#include "kernels/cuda/numeric.cuh"
#include "kernels/cuda/paged_attention.hpp"

namespace troupe::kernels::cuda {

namespace {
using detail::from_float;
using detail::to_float;
constexpr int threads = 128;
constexpr int max_tile = 64;
constexpr std::size_t default_smem = 48 * 1024;

// Shared-memory floats of one block: q and accumulator [group, hd], K tile [tile, hd + 1]
// (padded: the score loop reads K rows across threads), V tile [tile, hd], scores
// [group, tile], and max / sum / rescale factor per head.
std::size_t smem_floats(int group, int hd, int tile) {
  return 2 * static_cast<std::size_t>(group) * hd + static_cast<std::size_t>(tile) * (2 * hd + 1) +
         static_cast<std::size_t>(group) * tile + 3 * static_cast<std::size_t>(group);
}

template <class T, class C>
__global__ void paged_attention_kernel(paged_attention_params<T, C> p, int tile) {
  extern __shared__ float smem[];
  const int t = blockIdx.x, g = blockIdx.y;
  const int hd = p.head_dim, group = p.heads / p.kv_heads;
  float* q_s = smem;                  // [group, hd]
  float* acc_s = q_s + group * hd;    // [group, hd]
  float* k_s = acc_s + group * hd;    // [tile, hd + 1]
  float* v_s = k_s + tile * (hd + 1); // [tile, hd]
  float* s_s = v_s + tile * hd;       // [group, tile]
  float* m_s = s_s + group * tile;    // [group] running max
  float* l_s = m_s + group;           // [group] running sum
  float* alpha_s = l_s + group;       // [group] rescale of this tile

  // The sequence of token t: the last s with query_start[s] <= t (empty sequences are skipped over).
  int lo = 0, hi = p.seqs - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (p.query_start[mid] <= t)
      lo = mid;
    else
      hi = mid - 1;
  }
  const std::int32_t* table = p.block_tables + static_cast<std::size_t>(lo) * p.max_blocks_per_seq;
  const int context = p.positions[t] + 1;

  const T* q = p.q + static_cast<std::size_t>(t) * p.q_stride + static_cast<std::size_t>(g) * group * hd;
  for (int i = threadIdx.x; i < group * hd; i += blockDim.x) {
    q_s[i] = to_float(q[i]);
    acc_s[i] = 0.0f;
  }
  for (int h = threadIdx.x; h < group; h += blockDim.x) {
    m_s[h] = -INFINITY;
    l_s[h] = 0.0f;
  }
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;

  for (int p0 = 0; p0 < context; p0 += tile) {
    const int n = min(tile, context - p0);
    for (int i = threadIdx.x; i < n * hd; i += blockDim.x) {
      const int r = i / hd, d = i - r * hd;
      const int pos = p0 + r;
      const std::size_t block = static_cast<std::size_t>(table[pos / p.block_size]);
      const std::size_t src = ((block * p.kv_heads + g) * p.block_size + pos % p.block_size) * hd + d;
      k_s[r * (hd + 1) + d] = to_float(p.k_cache[src]) * p.k_scale;
      v_s[r * hd + d] = to_float(p.v_cache[src]) * p.v_scale;
    }
    __syncthreads(); // also orders the q / statistics set-up before the first use
    for (int i = threadIdx.x; i < group * n; i += blockDim.x) {
      const int h = i / n, r = i - h * n;
      const float* qh = q_s + h * hd;
      const float* kr = k_s + r * (hd + 1);
      float s = 0.0f;
      for (int d = 0; d < hd; ++d)
        s += qh[d] * kr[d];
      s_s[h * tile + r] = s * p.scale;
    }
    __syncthreads();
    for (int h = warp; h < group; h += warps) {
      float* sh = s_s + h * tile;
      float tile_max = -INFINITY;
      for (int r = lane; r < n; r += 32)
        tile_max = fmaxf(tile_max, sh[r]);
      const float m_old = m_s[h];
      const float m_new = fmaxf(m_old, detail::warp_max(tile_max));
      float sum = 0.0f;
      for (int r = lane; r < n; r += 32) {
        const float e = expf(sh[r] - m_new);
        sh[r] = e;
        sum += e;
      }
      sum = detail::warp_sum(sum);
      if (lane == 0) {
        const float alpha = expf(m_old - m_new); // 0 on the first tile (m_old = -inf)
        alpha_s[h] = alpha;
        l_s[h] = l_s[h] * alpha + sum;
        m_s[h] = m_new;
      }
    }
    __syncthreads();
    for (int i = threadIdx.x; i < group * hd; i += blockDim.x) {
      const int h = i / hd, d = i - h * hd;
      const float* sh = s_s + h * tile;
      float a = acc_s[i] * alpha_s[h];
      for (int r = 0; r < n; ++r)
        a += sh[r] * v_s[r * hd + d];
      acc_s[i] = a;
    }
    __syncthreads(); // the next tile overwrites K, V and the scores
  }

  T* out = p.out + (static_cast<std::size_t>(t) * p.heads + static_cast<std::size_t>(g) * group) * hd;
  for (int i = threadIdx.x; i < group * hd; i += blockDim.x)
    out[i] = from_float<T>(acc_s[i] / l_s[i / hd]);
}
} // namespace

template <class T, class C>
cudaError_t paged_attention(const paged_attention_params<T, C>& p, cudaStream_t stream) {
  if (p.tokens <= 0)
    return cudaSuccess;
  if (p.heads <= 0 || p.kv_heads <= 0 || p.heads % p.kv_heads != 0 || p.head_dim <= 0 || p.block_size <= 0 ||
      p.seqs <= 0 || p.q_stride < p.heads * p.head_dim || p.kv_heads > 65535)
    return cudaErrorInvalidValue;
  const int group = p.heads / p.kv_heads, hd = p.head_dim;
  // The largest tile (up to max_tile positions) that fits the default 48 KiB; at least 8
  // positions, with more shared memory asked for when the group's rows alone are large.
  int tile = max_tile;
  while (tile > 8 && smem_floats(group, hd, tile) * sizeof(float) > default_smem)
    tile /= 2;
  const std::size_t smem = smem_floats(group, hd, tile) * sizeof(float);
  if (smem > default_smem) {
    if (auto err = cudaFuncSetAttribute(paged_attention_kernel<T, C>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        static_cast<int>(smem));
        err != cudaSuccess)
      return err;
  }
  const dim3 grid(p.tokens, p.kv_heads);
  paged_attention_kernel<T, C><<<grid, threads, smem, stream>>>(p, tile);
  return cudaGetLastError();
}

template cudaError_t paged_attention<float, float>(const paged_attention_params<float, float>&, cudaStream_t);
template cudaError_t paged_attention<float, __nv_fp8_e4m3>(const paged_attention_params<float, __nv_fp8_e4m3>&,
                                                           cudaStream_t);
template cudaError_t paged_attention<__nv_bfloat16, __nv_bfloat16>(
    const paged_attention_params<__nv_bfloat16, __nv_bfloat16>&, cudaStream_t);
template cudaError_t paged_attention<__nv_bfloat16, __nv_fp8_e4m3>(
    const paged_attention_params<__nv_bfloat16, __nv_fp8_e4m3>&, cudaStream_t);

} // namespace troupe::kernels::cuda
