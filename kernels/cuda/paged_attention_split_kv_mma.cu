// Split-K decode attention for GQA groups on tensor cores (bf16 activations and cache,
// head_dim 64 or 128). The CUDA-core split kernel does 4 dot products and 4 shuffle
// reductions per K row for a group of 4 and ran at ~28 % of the copy ceiling, issue-bound,
// where MHA reaches ~88 %. Here a warp takes 16 positions at a time and does the group's
// scores and its P · V as m16n8k16 MMAs, so a K or V row costs a few instructions whatever
// the group size.
//
// Same grid, partitions, workspace and combine as the CUDA-core split kernel: one block per
// (token, partition, head chunk, KV head), 4 warps that take the partition's 16-position steps
// in turn, each with its own online softmax, merged through shared memory at the end.
//
// One step of a warp (g = lane / 4, c = lane % 4; at most 8 heads, rows 8..15 of every A are 0):
// - S[head, pos] = Q · Kᵀ: A = Q [heads x dims], B = Kᵀ [dims x 8 positions], two n-tiles.
//   A dot product does not care in which order its dims are summed, so k position 2c, 2c+1,
//   2c+8, 2c+9 of k-step j is dims d0 .. d0+3 with d0 = 32 (j / 2) + 8c + 4 (j % 2): a lane then
//   loads 16 contiguous bytes of K row g (and 8+g) per pair of k-steps, 4 lanes a 64-byte run.
// - The C fragment of S (head g, positions 2c, 2c+1 of each n-tile) is, unchanged, the B
//   fragment of P in Oᵀ[dim, head] = Vᵀ · Pᵀ, where A = Vᵀ [16 dims x 16 positions].
// - Vᵀ's rows are dims, also free to permute: row g of m-tile mt is dim
//   F = 64 (mt / 4) + 8g + 2 (mt % 4), row g+8 is F+1. A lane loads 16 contiguous bytes of each
//   of its 4 V rows (positions 2c, 2c+1, 2c+8, 2c+9) per 64 dims (8 lanes a 128-byte run), and
//   builds each A register from two rows with one byte permute.
// - P goes in as bf16 high and low parts (two MMAs), so that it keeps fp32-like precision.
// - A step's loads are not overlapped with the previous step's arithmetic within a warp: the
//   3 blocks an SM (160 registers) do that. Prefetching the next step's K and V took 186
//   registers (2 blocks an SM): faster in the kernel benchmark at ctx 4096 (batch 8 49 vs 54 us),
//   but the 8B decode step at batch 12, ctx 1500, whose plan then has half the partitions, took
//   6.33 against 5.90 ms (H200). Capping registers at 128 for 4 blocks spilled and was slower.
// - An fp8 cache stays on the CUDA-core kernel: widening e4m3 to bf16 pairs in registers before
//   these MMAs was tried and was slower than that kernel (8B, batch 8, ctx 4096: 123.5 against
//   111 us); the widening, not the bytes, bounds it. fp16 MMAs (one conversion per pair) are the
//   next thing to try there.
#include <cuda_bf16.h>

#include <atomic>
#include <cmath>
#include <cstdint>

#include "kernels/cuda/numeric.cuh"
#include "kernels/cuda/paged_attention_internal.cuh"
#include "kernels/cuda/tensor_core.cuh"

namespace troupe::kernels::cuda::detail {

namespace {
using bf16 = __nv_bfloat16;
constexpr int mma_warps = 4;
constexpr int mma_threads = 32 * mma_warps;
constexpr int mma_max_heads = 8; // query heads of one block: the n of an m16n8 tile
constexpr int step = 16;         // positions of one warp step

__device__ __forceinline__ std::uint32_t word(const uint4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

template <int HD>
__global__ void __launch_bounds__(mma_threads)
    split_kv_mma_kernel(paged_attention_params<bf16, bf16> p, attention_plan plan) {
  static_assert(HD % 64 == 0 && HD <= 128, "V rows are loaded 64 dims at a time");
  constexpr int ksteps = HD / 16, kloads = HD / 32, vloads = HD / 64;
  __shared__ float acc_s[mma_warps][mma_max_heads][HD]; // each warp's unnormalised output
  __shared__ float m_s[mma_warps][mma_max_heads], l_s[mma_warps][mma_max_heads];

  const int t = blockIdx.x, kv = blockIdx.z;
  const int chunk = blockIdx.y % plan.head_chunks, part = blockIdx.y / plan.head_chunks;
  const int seq = sequence_of(p.query_start, p.seqs, t);
  if (p.query_start[seq + 1] - p.query_start[seq] > plan.tile_min_q)
    return; // the tiled kernel's token
  const int context = p.positions[t] + 1;
  const int partition = token_partition(plan, context);
  const int begin = part * partition;
  if (begin >= context)
    return;
  const int end = min(context, begin + partition);
  const int parts = (context + partition - 1) / partition;
  const int group = p.heads / p.kv_heads, gc = group_chunk(group);
  const int h0 = chunk * gc, heads_here = min(gc, group - h0);
  const int head0 = kv * group + h0;

  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int g = lane / 4, c = lane % 4;

  // Q as A fragments of every k-step; rows past the block's heads are zero.
  std::uint32_t qa[ksteps][4];
  {
    const bool mine = g < heads_here;
    const auto* q = reinterpret_cast<const std::uint32_t*>(p.q + static_cast<std::size_t>(t) * p.q_stride +
                                                           static_cast<std::size_t>(head0 + (mine ? g : 0)) * HD);
#pragma unroll
    for (int j = 0; j < ksteps; ++j) {
      const int d0 = 32 * (j / 2) + 8 * c + 4 * (j % 2);
      qa[j][0] = mine ? q[d0 / 2] : 0u;
      qa[j][1] = 0u;
      qa[j][2] = mine ? q[d0 / 2 + 1] : 0u;
      qa[j][3] = 0u;
    }
  }

  const std::int32_t* table = p.block_tables + static_cast<std::size_t>(seq) * p.max_blocks_per_seq;
  // Block sizes of 16 and up (powers of two) hold a whole step in one block: one table read.
  const bool step_in_one_block = plan.block_shift >= 4;
  auto row_offset = [&](int pos) {
    const cache_slot at = slot_of(pos, p.block_size, plan.block_shift);
    return cache_row_offset(table[at.column], at.offset, p.kv_heads, kv, p.block_size, HD);
  };
  const float qk_scale = p.scale * p.k_scale;

  float m_run = -INFINITY, l_run = 0.0f; // of head g (every c holds the same)
  float acc[ksteps][4];                  // Oᵀ: dims F, F+1 of m-tile mt x heads 2c, 2c+1
#pragma unroll
  for (int mt = 0; mt < ksteps; ++mt)
#pragma unroll
    for (int i = 0; i < 4; ++i)
      acc[mt][i] = 0.0f;

  // A step's K rows (positions s0 + g, s0 + 8 + g) and V rows (s0 + 2c, +1, +8, +9) of this lane.
  // Past the context both are 0: V must not be stale there (0 * NaN is NaN).
  auto step_base = [&](int s0) -> std::size_t { return step_in_one_block ? row_offset(s0) : 0; };
  auto offset_of = [&](int s0, std::size_t base, int pos) -> std::size_t {
    return step_in_one_block ? base + static_cast<std::size_t>(pos - s0) * HD : row_offset(pos);
  };
  auto load_k = [&](int s0, std::size_t base, uint4(&kw)[2][kloads]) {
#pragma unroll
    for (int n = 0; n < 2; ++n) {
      const int pos = s0 + 8 * n + g;
      const bool valid = pos < end;
      const uint4* src = reinterpret_cast<const uint4*>(p.k_cache + (valid ? offset_of(s0, base, pos) : 0) + 8 * c);
#pragma unroll
      for (int i = 0; i < kloads; ++i)
        kw[n][i] = valid ? __ldg(src + 4 * i) : make_uint4(0u, 0u, 0u, 0u);
    }
  };
  auto load_v = [&](int s0, std::size_t base, uint4(&vw)[4][vloads]) {
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int pos = s0 + 2 * c + (r & 1) + 8 * (r >> 1);
      const bool valid = pos < end;
      const uint4* src = reinterpret_cast<const uint4*>(p.v_cache + (valid ? offset_of(s0, base, pos) : 0) + 8 * g);
#pragma unroll
      for (int i = 0; i < vloads; ++i)
        vw[r][i] = valid ? __ldg(src + 8 * i) : make_uint4(0u, 0u, 0u, 0u);
    }
  };

  constexpr int stride = mma_warps * step;
  for (int s0 = begin + warp * step; s0 < end; s0 += stride) {
    uint4 kw[2][kloads], vw[4][vloads];
    const std::size_t base = step_base(s0);
    load_k(s0, base, kw);
    load_v(s0, base, vw);

    // S = Q Kᵀ for positions s0 .. s0+7 (n-tile 0) and s0+8 .. s0+15 (n-tile 1).
    float s[2][4] = {};
#pragma unroll
    for (int n = 0; n < 2; ++n)
#pragma unroll
      for (int j = 0; j < ksteps; ++j) {
        const uint4& k = kw[n][j / 2];
        mma_bf16(s[n], qa[j], j % 2 == 0 ? k.x : k.z, j % 2 == 0 ? k.y : k.w);
      }
    // Head g's scores at positions s0 + 8n + 2c + e; past the context: -inf.
    float mx = -INFINITY;
#pragma unroll
    for (int n = 0; n < 2; ++n)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        s[n][e] = s0 + 8 * n + 2 * c + e < end ? s[n][e] * qk_scale : -INFINITY;
        mx = fmaxf(mx, s[n][e]);
      }
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float m_new = fmaxf(m_run, mx); // finite: position s0 is in the context
    const float alpha = __expf(m_run - m_new);
    float sum = 0.0f;
#pragma unroll
    for (int n = 0; n < 2; ++n)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        s[n][e] = __expf(s[n][e] - m_new);
        sum += s[n][e];
      }
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    l_run = l_run * alpha + sum;
    m_run = m_new;
    // The accumulator's heads are 2c and 2c+1; head h's rescale is in lanes 4h .. 4h+3.
    const float alpha0 = __shfl_sync(0xffffffffu, alpha, 8 * c), alpha1 = __shfl_sync(0xffffffffu, alpha, 8 * c + 4);
#pragma unroll
    for (int mt = 0; mt < ksteps; ++mt) {
      acc[mt][0] *= alpha0;
      acc[mt][1] *= alpha1;
      acc[mt][2] *= alpha0;
      acc[mt][3] *= alpha1;
    }

    // Oᵀ += Vᵀ Pᵀ: P's B fragment is S's C fragment (positions 2c, 2c+1 and 8+2c, 9+2c of head g).
    std::uint32_t p_hi[2], p_lo[2];
    split_pair(s[0][0], s[0][1], p_hi[0], p_lo[0]);
    split_pair(s[1][0], s[1][1], p_hi[1], p_lo[1]);
    std::uint32_t va[ksteps][4];
#pragma unroll
    for (int mt = 0; mt < ksteps; ++mt) {
      const int i = mt / 4, w = mt % 4; // dims F, F+1 are word w of this lane's 16 bytes of 64-dim block i
      const std::uint32_t a0 = word(vw[0][i], w), a1 = word(vw[1][i], w);
      const std::uint32_t b0 = word(vw[2][i], w), b1 = word(vw[3][i], w);
      va[mt][0] = __byte_perm(a0, a1, 0x5410); // dim F at positions 2c, 2c+1
      va[mt][1] = __byte_perm(a0, a1, 0x7632); // dim F+1
      va[mt][2] = __byte_perm(b0, b1, 0x5410); // dim F at positions 2c+8, 2c+9
      va[mt][3] = __byte_perm(b0, b1, 0x7632);
    }
#pragma unroll
    for (int mt = 0; mt < ksteps; ++mt)
      mma_bf16(acc[mt], va[mt], p_hi[0], p_hi[1]);
#pragma unroll
    for (int mt = 0; mt < ksteps; ++mt)
      mma_bf16(acc[mt], va[mt], p_lo[0], p_lo[1]);
  }

  // Merge the warps: each wrote its statistics and unnormalised output; one pass sums them.
  if (c == 0) {
    m_s[warp][g] = m_run;
    l_s[warp][g] = l_run;
  }
#pragma unroll
  for (int mt = 0; mt < ksteps; ++mt) {
    const int f = 64 * (mt / 4) + 8 * g + 2 * (mt % 4);
    acc_s[warp][2 * c][f] = acc[mt][0];
    acc_s[warp][2 * c + 1][f] = acc[mt][1];
    acc_s[warp][2 * c][f + 1] = acc[mt][2];
    acc_s[warp][2 * c + 1][f + 1] = acc[mt][3];
  }
  __syncthreads();

  const std::size_t row0 = static_cast<std::size_t>(t) * p.heads + head0; // (token, head) row of head h0
  const bool whole = parts == 1;
  for (int i = threadIdx.x; i < heads_here * HD; i += mma_threads) {
    const int h = i / HD, d = i % HD;
    float m = -INFINITY;
#pragma unroll
    for (int w = 0; w < mma_warps; ++w)
      m = fmaxf(m, m_s[w][h]);
    float a = 0.0f, l = 0.0f;
#pragma unroll
    for (int w = 0; w < mma_warps; ++w) {
      const float scale = __expf(m_s[w][h] - m); // 0 for a warp that had no step (m_s = -inf)
      a += scale * acc_s[w][h][d];
      l += scale * l_s[w][h];
    }
    a *= p.v_scale;
    if (whole)
      p.out[row0 * HD + i] = from_float<bf16>(a / l);
    else {
      plan.ws_acc[((row0 + h) * plan.max_parts + part) * HD + d] = a;
      if (d == 0) {
        const std::size_t r = (row0 + h) * plan.max_parts + part;
        plan.ws_stats[2 * r] = m;
        plan.ws_stats[2 * r + 1] = l;
      }
    }
  }
}

template <int HD>
int resident_mma_blocks() {
  int dev = 0, blocks = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64)
    return 0;
  static std::atomic<int> cache[64];
  if (const int c = cache[dev].load(std::memory_order_relaxed); c > 0)
    return c;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, split_kv_mma_kernel<HD>, mma_threads, 0) != cudaSuccess)
    return 0;
  cache[dev].store(blocks, std::memory_order_relaxed);
  return blocks;
}
} // namespace

int split_mma_blocks_per_sm(int head_dim) {
  return head_dim == 64 ? resident_mma_blocks<64>() : head_dim == 128 ? resident_mma_blocks<128>() : 0;
}

cudaError_t launch_split_kv_mma(const paged_attention_params<bf16, bf16>& p, const attention_plan& plan,
                                cudaStream_t stream) {
  const dim3 grid(p.tokens, plan.max_parts * plan.head_chunks, p.kv_heads);
  if (p.head_dim == 64)
    split_kv_mma_kernel<64><<<grid, mma_threads, 0, stream>>>(p, plan);
  else if (p.head_dim == 128)
    split_kv_mma_kernel<128><<<grid, mma_threads, 0, stream>>>(p, plan);
  else
    return cudaErrorInvalidValue;
  return cudaGetLastError();
}

} // namespace troupe::kernels::cuda::detail
