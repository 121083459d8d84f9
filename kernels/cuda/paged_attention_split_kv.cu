// Split-K paged attention (flash-decoding): one block per (query token, KV head,
// partition of the positions it sees) serves the token's query heads of that KV head (up to
// 8 at once) from one pass over the partition's K and V. A group of lanes shares
// one K/V row, each lane holding 16 bytes of it (8 bf16 or 16 fp8, dequantised in
// registers; 32 bytes of fp32). The partition is walked in chunks of 128 positions:
// scores of the chunk into shared memory, the chunk's softmax statistics (fp32,
// online across chunks), then its V accumulated in registers. One partition: the
// block writes the output. More: it writes (max, sum, acc) to the workspace, and the
// last partition to finish merges them (split_k_merge.cuh), or, without counters,
// combine_kernel does.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/numeric.cuh"
#include "kernels/cuda/paged_attention_internal.cuh"
#include "kernels/cuda/split_k_merge.cuh"
#include "kernels/cuda/split_k_partition.cuh"

namespace troupe::kernels::cuda::detail {

namespace {
constexpr int split_threads = 128;
constexpr int split_warps = split_threads / 32;

// One lane's share of a K or V row, raw: 16 bytes of bf16 / fp8, 32 bytes of fp32.
template <class C>
struct kv_share {
  static constexpr int elems = sizeof(C) == 1 ? 16 : 8;
  static constexpr int words = elems * static_cast<int>(sizeof(C)) / 16;
  uint4 w[words];
};

template <class C>
__device__ __forceinline__ void load_share(kv_share<C>& r, const C* src) {
  const uint4* s = reinterpret_cast<const uint4*>(src);
#pragma unroll
  for (int i = 0; i < kv_share<C>::words; ++i)
    r.w[i] = __ldg(s + i);
}
template <class C>
__device__ __forceinline__ void zero_share(kv_share<C>& r) {
#pragma unroll
  for (int i = 0; i < kv_share<C>::words; ++i)
    r.w[i] = make_uint4(0u, 0u, 0u, 0u);
}

__device__ __forceinline__ void unpack(const kv_share<float>& r, float (&v)[8]) {
  const unsigned u[8] = {r.w[0].x, r.w[0].y, r.w[0].z, r.w[0].w, r.w[1].x, r.w[1].y, r.w[1].z, r.w[1].w};
#pragma unroll
  for (int i = 0; i < 8; ++i)
    v[i] = __uint_as_float(u[i]);
}
// bf16 is the top half of an fp32: the lower element of a word is its low 16 bits.
__device__ __forceinline__ void unpack(const kv_share<__nv_bfloat16>& r, float (&v)[8]) {
  const unsigned u[4] = {r.w[0].x, r.w[0].y, r.w[0].z, r.w[0].w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    v[2 * i] = __uint_as_float(u[i] << 16);
    v[2 * i + 1] = __uint_as_float(u[i] & 0xffff0000u);
  }
}
__device__ __forceinline__ void unpack(const kv_share<__half>& r, float (&v)[8]) {
  const unsigned u[4] = {r.w[0].x, r.w[0].y, r.w[0].z, r.w[0].w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&u[i]));
    v[2 * i] = f.x;
    v[2 * i + 1] = f.y;
  }
}
// e4m3 -> half is exact (and the hardware converts pairs).
__device__ __forceinline__ void unpack(const kv_share<__nv_fp8_e4m3>& r, float (&v)[16]) {
  const unsigned u[4] = {r.w[0].x, r.w[0].y, r.w[0].z, r.w[0].w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 lo = __half22float2(
        __half2(__nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(u[i] & 0xffffu), __NV_E4M3)));
    const float2 hi =
        __half22float2(__half2(__nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(u[i] >> 16), __NV_E4M3)));
    v[4 * i] = lo.x;
    v[4 * i + 1] = lo.y;
    v[4 * i + 2] = hi.x;
    v[4 * i + 3] = hi.y;
  }
}

// Shared memory of a split block: the chunk's row offsets [split_chunk] (size_t), then floats:
// q [gc, hd], chunk scores [gc, split_chunk], per-warp accumulators [warps, gc, hd] for the
// final sum, running max / sum / rescale [3, gc].
std::size_t split_smem_bytes(int gc, int hd) {
  return sizeof(std::size_t) * 2 * split_chunk +
         sizeof(float) * (static_cast<std::size_t>(gc) * hd * (1 + split_warps) +
                          static_cast<std::size_t>(gc) * split_chunk + 3 * static_cast<std::size_t>(gc));
}

// grid: (tokens, max_parts * head_chunks, kv_heads); block: split_threads. MHA over a bf16 cache
// (GC 1, the 13B decode path; also fp16) is held to 64 registers, 8 blocks an SM: the merge in the last
// block took it to 72 (7 blocks) otherwise, with no spills at 64. (fp8 and fp32 caches spill there.)
// capped: paged_attention_params::softcap > 0 (soft_cap).
template <class T, class C, int GC, bool capped>
__global__ void __launch_bounds__(split_threads, GC == 1 && sizeof(C) == 2 ? 8 : 1)
    split_kv_kernel(paged_attention_params<T, C> p, attention_plan plan) {
  constexpr int E = kv_share<C>::elems;
  // Rows each lane has in flight per step: ~16 KB of loads per block where registers allow.
  // (GC 4 with 8 rows in flight took 127 registers: 4 blocks per SM, too few warps to hide latency.)
  constexpr int unroll = kv_share<C>::words == 1 && GC <= 2 ? 8 : 4;
  extern __shared__ float4 smem4[];
  // Where each row of the chunk starts (K and V alike): worked out once per chunk instead of by
  // every lane for K and again for V. The kernel is issue-bound (ncu: 0.72 instructions issued
  // per scheduler cycle for MHA) and this address arithmetic was a good share of its instructions.
  static_assert(split_threads == split_chunk, "one row offset per thread and chunk");
  std::size_t* row_s = reinterpret_cast<std::size_t*>(smem4); // [2, split_chunk]
  float* smem = reinterpret_cast<float*>(row_s + 2 * split_chunk);
  const int hd = p.head_dim, group = p.heads / p.kv_heads;
  float* q_s = smem;                          // [GC, hd]
  float* s_s = q_s + GC * hd;                 // [GC, split_chunk] scores, then probabilities
  float* red_s = s_s + GC * split_chunk;      // [warps, GC, hd]
  float* m_s = red_s + split_warps * GC * hd; // [GC] running max
  float* l_s = m_s + GC;                      // [GC] running sum
  float* alpha_s = l_s + GC;                  // [GC] rescale of the accumulator for this chunk

  split_block b;
  if (!split_block_of(p, plan, b))
    return;
  const int t = b.token, g = b.kv_head, chunk = b.chunk, part = b.part, seq = b.seq;
  // A sliding window's first partition starts up to a granule before the token's first visible
  // position; this kernel needs no alignment, so it starts at that position (nothing to mask).
  const int begin = max(b.begin, b.first), end = b.end, parts = b.parts;
  const int h0 = chunk * GC, heads_here = min(GC, group - h0);
  const int head0 = g * group + h0; // first query head of this block

  const T* q = p.q + static_cast<std::size_t>(t) * p.q_stride + static_cast<std::size_t>(head0) * hd;
  for (int i = threadIdx.x; i < GC * hd; i += split_threads)
    q_s[i] = i < heads_here * hd ? to_float(q[i]) : 0.0f;
  if (threadIdx.x < GC) {
    m_s[threadIdx.x] = -INFINITY;
    l_s[threadIdx.x] = 0.0f;
  }

  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int L = plan.lanes, li = lane % L, gi = lane / L, rows_per_warp = 32 / L;
  const int stride = split_warps * rows_per_warp; // rows one step of the block covers
  const bool active = li * E < hd;                // lanes past the row (head_dim / E not a power of 2) idle
  const std::int32_t* table = p.block_tables + static_cast<std::size_t>(seq) * p.max_blocks_per_seq;
  const float qk_scale = p.scale * p.k_scale;

  const int share = li * E; // this lane's part of a row

  float acc[GC][E];
#pragma unroll
  for (int h = 0; h < GC; ++h)
#pragma unroll
    for (int j = 0; j < E; ++j)
      acc[h][j] = 0.0f;
  if (begin + static_cast<int>(threadIdx.x) < end) {
    const cache_slot at = slot_of(begin + static_cast<int>(threadIdx.x), p.block_size, plan.block_shift);
    row_s[threadIdx.x] = cache_row_offset(table[at.column], at.offset, p.kv_heads, g, p.block_size, hd);
  }
  __syncthreads(); // q_s, the statistics and the first chunk's row offsets are set

  for (int c0 = begin, buf = 0; c0 < end; c0 += split_chunk, buf ^= 1) {
    const int n = min(split_chunk, end - c0);
    const std::size_t* rows = row_s + buf * split_chunk;
    // The next chunk's block-table entry for this thread's row: loaded now, stored at the end
    // (its slot is worked out again there: holding it over the chunk costs registers).
    const int next_pos = c0 + split_chunk + static_cast<int>(threadIdx.x);
    const bool next_row = next_pos < end;
    const std::int32_t next_block = next_row ? table[slot_of(next_pos, p.block_size, plan.block_shift).column] : 0;
    // Scores: row i of the chunk is handled by lane group gi of a warp; i0 is warp-uniform, so
    // every lane takes part in the shuffles.
    for (int i0 = warp * rows_per_warp; i0 < n; i0 += unroll * stride) {
      kv_share<C> kr[unroll];
#pragma unroll
      for (int u = 0; u < unroll; ++u) {
        const int i = i0 + u * stride + gi;
        if (active && i < n)
          load_share(kr[u], p.k_cache + rows[i] + share);
        else
          zero_share(kr[u]);
      }
#pragma unroll
      for (int u = 0; u < unroll; ++u) {
        if (i0 + u * stride >= n)
          break;
        const int i = i0 + u * stride + gi;
        float k[E];
        unpack(kr[u], k);
#pragma unroll
        for (int h = 0; h < GC; ++h) {
          float d = 0.0f;
          if (active) {
            const float4* qh = reinterpret_cast<const float4*>(q_s + h * hd + li * E);
#pragma unroll
            for (int j = 0; j < E / 4; ++j) {
              const float4 qv = qh[j];
              d += qv.x * k[4 * j] + qv.y * k[4 * j + 1] + qv.z * k[4 * j + 2] + qv.w * k[4 * j + 3];
            }
          }
          for (int o = L / 2; o > 0; o /= 2)
            d += __shfl_xor_sync(0xffffffffu, d, o);
          if (li == 0 && i < n)
            s_s[h * split_chunk + i] = d * qk_scale;
        }
      }
    }
    __syncthreads();
    // The chunk's statistics, one warp per head; the scores become probabilities.
    for (int h = warp; h < GC; h += split_warps) {
      float* sh = s_s + h * split_chunk;
      if constexpr (capped) // here, not where the scores are formed: one copy of tanhf, not GC * unroll
        for (int r = lane; r < n; r += 32)
          sh[r] = soft_cap(sh[r], 1.0f / p.softcap, p.softcap);
      float mx = -INFINITY;
      for (int r = lane; r < n; r += 32)
        mx = fmaxf(mx, sh[r]);
      const float m_old = m_s[h];
      const float m_new = fmaxf(m_old, warp_max(mx));
      float sum = 0.0f;
      for (int r = lane; r < n; r += 32) {
        const float e = __expf(sh[r] - m_new);
        sh[r] = e;
        sum += e;
      }
      sum = warp_sum(sum);
      __syncwarp(); // every lane has read m_s[h] before lane 0 overwrites it
      if (lane == 0) {
        const float alpha = __expf(m_old - m_new); // 0 on the first chunk (m_old = -inf)
        alpha_s[h] = alpha;
        l_s[h] = l_s[h] * alpha + sum;
        m_s[h] = m_new;
      }
    }
    __syncthreads();
    // V: acc[h] = acc[h] * alpha[h] + sum over the lane group's rows of p[h][i] * v[i].
#pragma unroll
    for (int h = 0; h < GC; ++h) {
      const float a = alpha_s[h];
#pragma unroll
      for (int j = 0; j < E; ++j)
        acc[h][j] *= a;
    }
    for (int i0 = warp * rows_per_warp; i0 < n; i0 += unroll * stride) {
      kv_share<C> vr[unroll];
#pragma unroll
      for (int u = 0; u < unroll; ++u) {
        const int i = i0 + u * stride + gi;
        if (active && i < n)
          load_share(vr[u], p.v_cache + rows[i] + share);
        else
          zero_share(vr[u]);
      }
#pragma unroll
      for (int u = 0; u < unroll; ++u) {
        if (i0 + u * stride >= n)
          break;
        const int i = i0 + u * stride + gi;
        float v[E];
        unpack(vr[u], v);
#pragma unroll
        for (int h = 0; h < GC; ++h) {
          const float pr = i < n ? s_s[h * split_chunk + i] : 0.0f;
#pragma unroll
          for (int j = 0; j < E; ++j)
            acc[h][j] += pr * v[j];
        }
      }
    }
    if (next_row)
      row_s[(buf ^ 1) * split_chunk + threadIdx.x] = cache_row_offset(
          next_block, slot_of(next_pos, p.block_size, plan.block_shift).offset, p.kv_heads, g, p.block_size, hd);
    __syncthreads(); // the next chunk's offsets are in; it overwrites the probabilities and alpha
  }

  // Sum the lane groups of each warp (same dims, different rows), then the warps.
  for (int o = L; o < 32; o *= 2)
#pragma unroll
    for (int h = 0; h < GC; ++h)
#pragma unroll
      for (int j = 0; j < E; ++j)
        acc[h][j] += __shfl_xor_sync(0xffffffffu, acc[h][j], o);
  if (gi == 0 && active)
#pragma unroll
    for (int h = 0; h < GC; ++h)
#pragma unroll
      for (int j = 0; j < E; ++j)
        red_s[(warp * GC + h) * hd + li * E + j] = acc[h][j];
  __syncthreads();

  const std::size_t row0 = static_cast<std::size_t>(t) * p.heads + head0; // (token, head) row of query head head0
  const bool whole = parts == 1;
  for (int i = threadIdx.x; i < heads_here * hd; i += split_threads) {
    const int h = i / hd;
    float a = 0.0f;
#pragma unroll
    for (int w = 0; w < split_warps; ++w)
      a += red_s[w * GC * hd + i];
    a *= p.v_scale;
    if (whole)
      p.out[row0 * hd + i] = from_float<T>(a / l_s[h]);
    else
      plan.ws_acc[((row0 + h) * plan.max_parts + part) * hd + (i - h * hd)] = a;
  }
  if (!whole && threadIdx.x < heads_here) {
    const std::size_t r = (row0 + threadIdx.x) * plan.max_parts + part;
    plan.ws_stats[2 * r] = m_s[threadIdx.x];
    plan.ws_stats[2 * r + 1] = l_s[threadIdx.x];
  }
  // The merge keeps one output a head in flight (at most 4), and reuses q_s, s_s and red_s.
  constexpr int merge_in_flight = GC < 4 ? GC : 4;
  if (!whole && plan.counters != nullptr && last_partition_arrived(split_counter(plan, t, p.kv_heads, g, chunk), parts))
    merge_partials<merge_in_flight>(plan, parts, row0, heads_here, hd, p.out, split_threads, q_s,
                                    GC * (hd * (1 + split_warps) + split_chunk));
}

// One warp per (token, head) row: out = sum_j e^(m_j - M) acc_j / sum_j e^(m_j - M) l_j.
// Lane j holds partition j's weight (32 partitions at a time) and each lane sums the dims
// lane, lane + 32, ... over the partitions, four partitions per step so that the loads of
// several partitions are in flight together (ncu: one partition at a time made this kernel,
// which moves a few KB, take as long as the split kernel at batch 1).
template <class T, class C>
__global__ void __launch_bounds__(128) combine_kernel(paged_attention_params<T, C> p, attention_plan plan) {
  constexpr int max_dims = 8; // of one lane: head_dim <= 256 (the split kernel's limit)
  const int lane = threadIdx.x % 32;
  const long long row = static_cast<long long>(blockIdx.x) * 4 + threadIdx.x / 32;
  if (row >= static_cast<long long>(p.tokens) * p.heads)
    return;
  const int t = static_cast<int>(row / p.heads);
  const int seq = sequence_of(p.query_start, p.seqs, t);
  if (p.query_start[seq + 1] - p.query_start[seq] > plan.tile_min_q)
    return;
  const int parts = split_of(plan, p.positions[t] + 1, p.window).parts;
  if (parts <= 1)
    return; // the split kernel wrote this row itself
  const int hd = p.head_dim, dims = (hd - lane + 31) / 32; // this lane's dims: lane + 32 k, k < dims
  const float* stats = plan.ws_stats + 2 * row * plan.max_parts;
  const float* acc = plan.ws_acc + row * plan.max_parts * hd + lane;
  float m = -INFINITY;
  for (int j = lane; j < parts; j += 32)
    m = fmaxf(m, stats[2 * j]);
  m = warp_max(m);
  float o[max_dims], l = 0.0f;
#pragma unroll
  for (int k = 0; k < max_dims; ++k)
    o[k] = 0.0f;
  for (int j0 = 0; j0 < parts; j0 += 32) {
    const int here = min(32, parts - j0);
    const float w_lane = lane < here ? __expf(stats[2 * (j0 + lane)] - m) : 0.0f;
    l += lane < here ? w_lane * stats[2 * (j0 + lane) + 1] : 0.0f;
#pragma unroll 4
    for (int j = 0; j < here; ++j) {
      const float w = __shfl_sync(0xffffffffu, w_lane, j);
      const float* a = acc + static_cast<std::size_t>(j0 + j) * hd;
#pragma unroll
      for (int k = 0; k < max_dims; ++k)
        if (k < dims)
          o[k] += w * a[32 * k];
    }
  }
  const float inv = 1.0f / warp_sum(l);
#pragma unroll
  for (int k = 0; k < max_dims; ++k)
    if (k < dims)
      p.out[row * hd + lane + 32 * k] = from_float<T>(o[k] * inv);
}

// The CUDA-core split kernel, with the shared memory it asks for.
template <class T, class C, int GC>
cudaError_t launch_split_cuda_cores(const paged_attention_params<T, C>& p, const attention_plan& plan,
                                    cudaStream_t stream) {
  const auto kernel = p.softcap > 0.0f ? split_kv_kernel<T, C, GC, true> : split_kv_kernel<T, C, GC, false>;
  const std::size_t smem = split_smem_bytes(GC, p.head_dim);
  if (smem > 48 * 1024) {
    if (auto err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
        err != cudaSuccess)
      return err;
  }
  const dim3 grid(p.tokens, plan.max_parts * plan.head_chunks, p.kv_heads);
  kernel<<<grid, split_threads, smem, stream>>>(p, plan);
  return cudaGetLastError();
}

template <class T, class C, int GC>
cudaError_t launch_split(const paged_attention_params<T, C>& p, const attention_plan& plan, cudaStream_t stream) {
  cudaError_t split;
  if constexpr (tensor_core_activations<T>)
    split = split_mma_support(p.heads / p.kv_heads, p.head_dim, std::is_same_v<C, __nv_fp8_e4m3>) &&
                    p.q_stride % 2 == 0 && reinterpret_cast<std::uintptr_t>(p.q) % 4 == 0
                ? launch_split_kv_mma(p, plan, stream)
                : launch_split_cuda_cores<T, C, GC>(p, plan, stream);
  else
    split = launch_split_cuda_cores<T, C, GC>(p, plan, stream);
  if (split != cudaSuccess)
    return split;
  if (plan.max_parts > 1 && plan.counters == nullptr) { // else the last block of each row merged it
    const long long rows = static_cast<long long>(p.tokens) * p.heads;
    combine_kernel<T, C><<<static_cast<unsigned>((rows + 3) / 4), 128, 0, stream>>>(p, plan);
    return cudaGetLastError();
  }
  return cudaSuccess;
}

template <class T, class C, int GC>
int resident_blocks(int head_dim) {
  int dev = 0, blocks = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64 || head_dim <= 0 || head_dim > 256 ||
      head_dim % 8 != 0)
    return 0;
  // Asked once per device and head size (a multiple of 8 on this path): every call is planned with it
  // (the uncapped kernel's: a softcap does not change the plan).
  static std::atomic<int> cache[64][33];
  std::atomic<int>& cached = cache[dev][head_dim / 8];
  if (const int c = cached.load(std::memory_order_relaxed); c > 0)
    return c;
  const std::size_t smem = split_smem_bytes(GC, head_dim);
  if (smem > 48 * 1024 &&
      cudaFuncSetAttribute(split_kv_kernel<T, C, GC, false>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           static_cast<int>(smem)) != cudaSuccess)
    return 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, split_kv_kernel<T, C, GC, false>, split_threads, smem) !=
      cudaSuccess)
    return 0;
  cached.store(blocks, std::memory_order_relaxed);
  return blocks;
}
} // namespace

template <class T, class C>
int split_blocks_per_sm(int group, int head_dim) {
  if constexpr (tensor_core_activations<T>)
    if (split_mma_support(group, head_dim, std::is_same_v<C, __nv_fp8_e4m3>))
      return split_mma_blocks_per_sm<T, C>(head_dim);
  switch (group_chunk(group)) {
    case 1:
      return resident_blocks<T, C, 1>(head_dim);
    case 2:
      return resident_blocks<T, C, 2>(head_dim);
    case 4:
      return resident_blocks<T, C, 4>(head_dim);
    default:
      return resident_blocks<T, C, 8>(head_dim);
  }
}

template <class T, class C>
cudaError_t launch_split_kv(const paged_attention_params<T, C>& p, const attention_plan& plan, cudaStream_t stream) {
  switch (group_chunk(p.heads / p.kv_heads)) {
    case 1:
      return launch_split<T, C, 1>(p, plan, stream);
    case 2:
      return launch_split<T, C, 2>(p, plan, stream);
    case 4:
      return launch_split<T, C, 4>(p, plan, stream);
    default:
      return launch_split<T, C, 8>(p, plan, stream);
  }
}

template int split_blocks_per_sm<float, float>(int, int);
template int split_blocks_per_sm<float, __nv_fp8_e4m3>(int, int);
template int split_blocks_per_sm<__nv_bfloat16, __nv_bfloat16>(int, int);
template int split_blocks_per_sm<__nv_bfloat16, __nv_fp8_e4m3>(int, int);
template int split_blocks_per_sm<__half, __half>(int, int);
template int split_blocks_per_sm<__half, __nv_fp8_e4m3>(int, int);
template cudaError_t launch_split_kv<float, float>(const paged_attention_params<float, float>&, const attention_plan&,
                                                   cudaStream_t);
template cudaError_t launch_split_kv<float, __nv_fp8_e4m3>(const paged_attention_params<float, __nv_fp8_e4m3>&,
                                                           const attention_plan&, cudaStream_t);
template cudaError_t launch_split_kv<__nv_bfloat16, __nv_bfloat16>(
    const paged_attention_params<__nv_bfloat16, __nv_bfloat16>&, const attention_plan&, cudaStream_t);
template cudaError_t launch_split_kv<__nv_bfloat16, __nv_fp8_e4m3>(
    const paged_attention_params<__nv_bfloat16, __nv_fp8_e4m3>&, const attention_plan&, cudaStream_t);
template cudaError_t launch_split_kv<__half, __half>(const paged_attention_params<__half, __half>&,
                                                     const attention_plan&, cudaStream_t);
template cudaError_t launch_split_kv<__half, __nv_fp8_e4m3>(const paged_attention_params<__half, __nv_fp8_e4m3>&,
                                                            const attention_plan&, cudaStream_t);

} // namespace troupe::kernels::cuda::detail
