// Split-K decode attention on tensor cores (bf16 or fp16 activations T, head_dim 64 or 128): GQA
// over a cache of T, and every group size over an fp8 e4m3 cache. ("bf16" below reads "fp16" for
// fp16 activations, whose MMAs and P parts are fp16's.) The CUDA-core split kernel does 4
// dot products and 4 shuffle reductions per K row for a group of 4 and ran at ~28 % of the
// copy ceiling, issue-bound, where MHA over bf16 reaches ~88 %. Here a warp takes 16 positions
// at a time and does the group's scores and its P · V as m16n8k16 MMAs, so a K or V row costs
// a few instructions whatever the group size.
//
// Same grid, partitions, workspace and merge as the CUDA-core split kernel: one block per
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
// - Over a bf16 cache a step's loads are not overlapped with the previous step's arithmetic
//   within a warp: the 3 blocks an SM (160 registers) do that. Prefetching the next step's K and V took 186
//   registers (2 blocks an SM): faster in the kernel benchmark at ctx 4096 (batch 8 49 vs 54 us),
//   but the 8B decode step at batch 12, ctx 1500, whose plan then has half the partitions, took
//   6.33 against 5.90 ms (H200). Capping registers at 128 for 4 blocks spilled and was slower.
// - An fp8 cache feeds fp16 MMAs (mma_cache<e4m3>): e4m3 -> fp16 is exact and one hardware
//   conversion per pair, where e4m3 -> bf16 has no such instruction (widening to bf16 pairs was
//   tried and was slower than the CUDA-core kernel: 8B, batch 8, ctx 4096, 123.5 against 111 us;
//   fp16: 42 us). MHA too: the CUDA-core kernel converts every element to fp32 and was slower
//   (13B, batch 12, ctx 1536: 109 against 69 us). Q is scaled by a power of two into fp16's
//   range (exact), and P goes in as fp16 high and low parts: one fp16 part (2^-11 relative per
//   weight) put outputs of the tests' short contexts up to 1.6x their tolerance (1e-4 + 2^-7 |x|).
//   It holds 128 registers, 4 blocks an SM (at head_dim 128 with 12 bytes spilled since the
//   staged loop; measured faster all the same). Loading two steps into registers before computing
//   the first (167 registers, 3 blocks) won at 16k contexts but lost where the plan then changed
//   (13B batch 12 step 10.74 against 9.75 ms). Instead the next step goes to shared memory by a
//   bulk copy while a step computes (see staged_by_bulk_copy).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/bulk_copy.cuh"
#include "kernels/cuda/numeric.cuh"
#include "kernels/cuda/paged_attention_internal.cuh"
#include "kernels/cuda/split_k_merge.cuh"
#include "kernels/cuda/split_k_partition.cuh"
#include "kernels/cuda/tensor_core.cuh"

namespace troupe::kernels::cuda::detail {

namespace {
using bf16 = __nv_bfloat16;
using e4m3 = __nv_fp8_e4m3;
constexpr int mma_warps = 4;
constexpr int mma_threads = 32 * mma_warps;
constexpr int mma_max_heads = 8; // query heads of one block: the n of an m16n8 tile
constexpr int step = 16;         // positions of one warp step

// `runs` 16-byte loads from `row`, `stride` 16-byte units apart, into 4 words each; zeros when
// the row is past the context.
template <int runs, int stride, bool global = true>
__device__ __forceinline__ void load_runs(const void* row, bool valid, std::uint32_t* w) {
  const uint4* src = reinterpret_cast<const uint4*>(row);
#pragma unroll
  for (int i = 0; i < runs; ++i) {
    const uint4 v = !valid ? make_uint4(0u, 0u, 0u, 0u) : global ? __ldg(src + stride * i) : src[stride * i];
    w[4 * i] = v.x;
    w[4 * i + 1] = v.y;
    w[4 * i + 2] = v.z;
    w[4 * i + 3] = v.w;
  }
}

// Two consecutive activations (4-byte aligned) as floats.
__device__ __forceinline__ float2 pair_to_float2(const bf16* p) {
  return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(p));
}
__device__ __forceinline__ float2 pair_to_float2(const __half* p) {
  return __half22float2(*reinterpret_cast<const __half2*>(p));
}

// How one cache type becomes MMA operands. Per lane and step a K row is k_words 32-bit words,
// 16-byte runs 64 bytes apart from k_lane(c) elements into the row (for both types), and a V
// row v_words (at v_lane(g)); both are 0 past the context. dim_of(mt, g) is the dim of row g of
// Vᵀ m-tile mt (row g + 8 is the next dim). split() cuts P into the high and low parts that
// mma() takes. T is the activations' type; C the cache's, T or e4m3.
template <class T, class C, int HD>
struct mma_cache;

// bf16: the cache is the MMA's input as it is. K: k-step j is dims d0 .. d0+3, d0 = 32 (j / 2) +
// 8c + 4 (j % 2), 16 contiguous bytes a lane per pair of k-steps. V: dims F = 64 (mt / 4) + 8g +
// 2 (mt % 4) and F+1, 16 bytes a lane per 64 dims; P as bf16 high and low parts.
template <class T, int HD>
struct mma_cache<T, T, HD> {
  static constexpr int k_words = HD / 8, v_words = HD / 16;
  __device__ static int k_lane(int c) { return 8 * c; }
  __device__ static int v_lane(int g) { return 8 * g; }
  __device__ static int dim_of(int mt, int g) { return 64 * (mt / 4) + 8 * g + 2 * (mt % 4); }
  template <bool global = true>
  __device__ static void load_v(const T* row, bool valid, std::uint32_t (&w)[v_words]) {
    load_runs<HD / 64, 8, global>(row, valid, w);
  }
  // Q's A fragments (rows 8..15 are 0); q is null for a row past the block's heads.
  __device__ static void load_q(const T* q, int c, std::uint32_t (&qa)[HD / 16][4], float& qk_scale) {
    const auto* q32 = reinterpret_cast<const std::uint32_t*>(q);
#pragma unroll
    for (int j = 0; j < HD / 16; ++j) {
      const int d0 = 32 * (j / 2) + 8 * c + 4 * (j % 2);
      qa[j][0] = q != nullptr ? q32[d0 / 2] : 0u;
      qa[j][1] = 0u;
      qa[j][2] = q != nullptr ? q32[d0 / 2 + 1] : 0u;
      qa[j][3] = 0u;
    }
    (void)qk_scale;
  }
  __device__ static void k_fragment(const std::uint32_t (&w)[k_words], int j, std::uint32_t& b0, std::uint32_t& b1) {
    const int base = 4 * (j / 2) + 2 * (j % 2);
    b0 = w[base];
    b1 = w[base + 1];
  }
  // Vᵀ's A fragment of m-tile mt from the lane's 4 rows (positions 2c, 2c+1, 2c+8, 2c+9).
  __device__ static void v_fragment(const std::uint32_t (&w)[4][v_words], int mt, std::uint32_t (&a)[4]) {
    // Dims F, F+1 are word mt of each row (16 bytes per 64 dims, word mt % 4 of block mt / 4).
    a[0] = __byte_perm(w[0][mt], w[1][mt], 0x5410); // dim F at positions 2c, 2c+1
    a[1] = __byte_perm(w[0][mt], w[1][mt], 0x7632); // dim F+1
    a[2] = __byte_perm(w[2][mt], w[3][mt], 0x5410); // dim F at positions 2c+8, 2c+9
    a[3] = __byte_perm(w[2][mt], w[3][mt], 0x7632);
  }
  __device__ static void mma(float (&c)[4], const std::uint32_t (&a)[4], std::uint32_t b0, std::uint32_t b1) {
    if constexpr (std::is_same_v<T, bf16>)
      mma_bf16(c, a, b0, b1);
    else
      mma_f16(c, a, b0, b1);
  }
  __device__ static void split(float x, float y, std::uint32_t& hi, std::uint32_t& lo) {
    if constexpr (std::is_same_v<T, bf16>)
      split_pair(x, y, hi, lo);
    else
      split_pair_f16(x, y, hi, lo);
  }
};

// e4m3: widened to fp16 in registers (exact). K: k-step j is dims d0 .. d0+3, d0 = 64 (j / 4) +
// 16c + 4 (j % 4), 16 contiguous bytes a lane per 4 k-steps. V: a lane holds HD / 8 contiguous
// bytes of each of its rows, dims F = (HD / 8) g + 2 mt and F+1. P as fp16 high and low parts.
template <class T, int HD>
struct mma_cache<T, e4m3, HD> {
  static constexpr int k_words = HD / 16, v_words = HD / 32;
  __device__ static int k_lane(int c) { return 16 * c; }
  __device__ static int v_lane(int g) { return HD / 8 * g; }
  __device__ static int dim_of(int mt, int g) { return HD / 8 * g + 2 * mt; }
  template <bool global = true>
  __device__ static void load_v(const e4m3* row, bool valid, std::uint32_t (&w)[v_words]) {
    if constexpr (v_words == 4)
      load_runs<1, 0, global>(row, valid, w);
    else {
      const auto* src = reinterpret_cast<const uint2*>(row);
      const uint2 v = !valid ? make_uint2(0u, 0u) : global ? __ldg(src) : *src;
      w[0] = v.x;
      w[1] = v.y;
    }
  }
  // Q times 2^-e in fp16, e chosen per head so that its largest |q| lands in [2^13, 2^14): in
  // range whatever the model's scale, and exact (a bf16 is an fp16 there; an fp16 Q stays one,
  // short of fp16's subnormals); qk_scale takes 2^e. The 4 lanes of a head (same g) agree on e.
  // NaN in q stays NaN.
  // Q is read as pairs of T (4-byte aligned), and scaled by two exact powers of two, each
  // within float's range whatever e is: the same values as ldexpf(x, -e), whose 32 calls a
  // lane took ~800 more cycles of a block's start-up (H200, per-block clock64 trace).
  __device__ static void load_q(const T* q, int c, std::uint32_t (&qa)[HD / 16][4], float& qk_scale) {
    float x[HD / 16][4];
    float big = 0.0f;
#pragma unroll
    for (int j = 0; j < HD / 16; ++j)
#pragma unroll
      for (int i = 0; i < 4; i += 2) {
        const int d = 64 * (j / 4) + 16 * c + 4 * (j % 4) + i;
        const float2 v = q != nullptr ? pair_to_float2(q + d) : make_float2(0.0f, 0.0f);
        x[j][i] = v.x;
        x[j][i + 1] = v.y;
        big = fmaxf(big, fmaxf(fabsf(v.x), fabsf(v.y)));
      }
    big = fmaxf(big, __shfl_xor_sync(0xffffffffu, big, 1));
    big = fmaxf(big, __shfl_xor_sync(0xffffffffu, big, 2));
    const int e = big > 0.0f && big <= 3.0e38f ? ilogbf(big) - 13 : 0; // -162 .. 114
    const int k1 = -e / 2, k2 = -e - k1;                               // each -57 .. 81
    const float f1 = __int_as_float((127 + k1) << 23), f2 = __int_as_float((127 + k2) << 23);
#pragma unroll
    for (int j = 0; j < HD / 16; ++j) {
      qa[j][0] = bits(__floats2half2_rn(x[j][0] * f1 * f2, x[j][1] * f1 * f2));
      qa[j][1] = 0u;
      qa[j][2] = bits(__floats2half2_rn(x[j][2] * f1 * f2, x[j][3] * f1 * f2));
      qa[j][3] = 0u;
    }
    qk_scale = ldexpf(qk_scale, e);
  }
  __device__ static void k_fragment(const std::uint32_t (&w)[k_words], int j, std::uint32_t& b0, std::uint32_t& b1) {
    widen_e4m3x4(w[j], b0, b1);
  }
  __device__ static void v_fragment(const std::uint32_t (&w)[4][v_words], int mt, std::uint32_t (&a)[4]) {
    const int i = mt / 2;
    const std::uint32_t sel = mt % 2 == 0 ? 0x5140 : 0x7362; // bytes (F, F+1) of both rows, interleaved
    widen_e4m3x4(__byte_perm(w[0][i], w[1][i], sel), a[0], a[1]);
    widen_e4m3x4(__byte_perm(w[2][i], w[3][i], sel), a[2], a[3]);
  }
  __device__ static void mma(float (&c)[4], const std::uint32_t (&a)[4], std::uint32_t b0, std::uint32_t b1) {
    mma_f16(c, a, b0, b1);
  }
  __device__ static void split(float x, float y, std::uint32_t& hi, std::uint32_t& lo) {
    split_pair_f16(x, y, hi, lo);
  }
};

// Over an fp8 cache a warp's next step is in flight, by bulk copy into shared memory, while it
// computes the current one (bulk_copy.cuh). A step's 16 K rows and 16 V rows lie in one cache
// block (power-of-two block sizes of 16 and up), so each is one copy. Measured on the H200 against loads into
// registers (8B shapes): batch 8, ctx 4096: 41.9 -> 39.1 us; batch 64, ctx 16384: 604 -> 564 us;
// 13B MHA, batch 12, ctx 1536: 71.4 -> 65.0 us. Over a bf16 cache the same lost at large
// batches (8B batch 64, ctx 4096: 287 -> 307 us), and three steps in flight (2 blocks an SM)
// changed the plans of small steps for the worse (8B batch-12 step 6.51 against 6.02 ms), so
// bf16 keeps its loads into registers. cp.async of each lane's 16-byte runs was slower still
// (8B bf16 batch 64, ctx 4096: 446 us).
template <class C>
constexpr bool staged_by_bulk_copy = std::is_same_v<C, e4m3>;
constexpr int staged_steps = 2;
// Bytes of one warp's staged step: 16 K rows, then 16 V rows, as they lie in the cache.
template <class C, int HD>
constexpr int warp_step_bytes = 2 * step* HD* static_cast<int>(sizeof(C));

// capped: paged_attention_params::softcap > 0 (soft_cap).
template <class T, class C, int HD, bool capped>
__global__ void __launch_bounds__(mma_threads, std::is_same_v<C, e4m3> ? 4 : 3) // blocks an SM
    split_kv_mma_kernel(paged_attention_params<T, C> p, attention_plan plan) {
  static_assert(HD % 64 == 0 && HD <= 128, "V rows are loaded 64 dims at a time");
  using ops = mma_cache<T, C, HD>;
  constexpr int ksteps = HD / 16;
  constexpr bool staged = staged_by_bulk_copy<C>;
  constexpr int step_bytes = warp_step_bytes<C, HD>;
  // Each warp's unnormalised output for the merge: a staged block keeps it in its warp's first
  // stage, free once the loop is done.
  static_assert(!staged || mma_max_heads * HD * 4 <= step_bytes, "a warp's output fits its stage");
  __shared__ alignas(128) unsigned char stages_s[staged ? mma_warps * staged_steps * step_bytes : 16];
  __shared__ float acc_own[staged ? 1 : mma_warps][mma_max_heads][staged ? 1 : HD];
  auto acc_s = [&](int w) -> float(*)[HD] {
    if constexpr (staged)
      return reinterpret_cast<float(*)[HD]>(stages_s + w * staged_steps * step_bytes);
    else
      return acc_own[w];
  };
  __shared__ float m_s[mma_warps][mma_max_heads], l_s[mma_warps][mma_max_heads];
  // The merge in the last block reuses the warps' output space from acc_s(0) on: acc_own, or
  // the stages (each warp's output in its first stage).
  constexpr int merge_scratch_floats = mma_warps * mma_max_heads * HD;
  static_assert(staged ? sizeof(stages_s) >= merge_scratch_floats * sizeof(float)
                       : sizeof(acc_own) == merge_scratch_floats * sizeof(float),
                "the merge's scratch lies in the block's shared memory");

  split_block b;
  if (!split_block_of(p, plan, b))
    return;
  const int t = b.token, kv = b.kv_head, chunk = b.chunk, part = b.part, seq = b.seq;
  const int begin = b.begin, end = b.end, parts = b.parts;
  // Positions before lo are masked like those past the end: under a sliding window, fewer than a
  // granule at the start of the token's first partition (split_of), which starts on a granule.
  const int lo = b.first;
  const int group = p.heads / p.kv_heads, gc = group_chunk(group);
  const int h0 = chunk * gc, heads_here = min(gc, group - h0);
  const int head0 = kv * group + h0;

  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int g = lane / 4, c = lane % 4;

  // Q as A fragments of every k-step; rows past the block's heads are zero.
  float qk_scale = p.scale * p.k_scale;
  std::uint32_t qa[ksteps][4];
  ops::load_q(g < heads_here ? p.q + static_cast<std::size_t>(t) * p.q_stride + static_cast<std::size_t>(head0 + g) * HD
                             : nullptr,
              c, qa, qk_scale);

  const std::int32_t* table = p.block_tables + static_cast<std::size_t>(seq) * p.max_blocks_per_seq;
  // Block sizes of 16 and up (powers of two) hold a whole step in one block: one table read.
  const bool step_in_one_block = plan.block_shift >= 4;
  auto row_offset = [&](int pos) {
    const cache_slot at = slot_of(pos, p.block_size, plan.block_shift);
    return cache_row_offset(table[at.column], at.offset, p.kv_heads, kv, p.block_size, HD);
  };

  float m_run = -INFINITY, l_run = 0.0f; // of head g (every c holds the same)
  float acc[ksteps][4];                  // Oᵀ: dims F, F+1 of m-tile mt x heads 2c, 2c+1
#pragma unroll
  for (int mt = 0; mt < ksteps; ++mt)
#pragma unroll
    for (int i = 0; i < 4; ++i)
      acc[mt][i] = 0.0f;

  // A step's rows of this lane, counted from the step's first position: K rows g and 8 + g (n-tiles
  // 0 and 1 of S), V rows 2c, 2c+1, 2c+8, 2c+9 (r = 0..3: P's B fragment). Outside [lo, end) the
  // register loop loads zeros; the staged loop reads K rows there (their scores are masked) and
  // zeros V rows. V must never be stale there: 0 * NaN is NaN.
  auto lane_k_row = [g](int n) { return 8 * n + g; };
  auto lane_v_row = [c](int r) { return 2 * c + (r & 1) + 8 * (r >> 1); };
  auto step_base = [&](int s0) -> std::size_t { return step_in_one_block ? row_offset(s0) : 0; };
  auto offset_of = [&](int s0, std::size_t base, int pos) -> std::size_t {
    return step_in_one_block ? base + static_cast<std::size_t>(pos - s0) * HD : row_offset(pos);
  };
  // Calls k_row(row, valid, n) for the lane's K rows (n 0, 1), then v_row(row, valid, r) for its
  // V rows (r 0..3).
  auto visible = [&](int pos) { return pos >= lo && pos < end; };
  auto for_each_row = [&](int s0, std::size_t base, auto&& k_row, auto&& v_row) {
#pragma unroll
    for (int n = 0; n < 2; ++n) {
      const int pos = s0 + lane_k_row(n);
      const bool valid = visible(pos);
      k_row(p.k_cache + (valid ? offset_of(s0, base, pos) : 0) + ops::k_lane(c), valid, n);
    }
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int pos = s0 + lane_v_row(r);
      const bool valid = visible(pos);
      v_row(p.v_cache + (valid ? offset_of(s0, base, pos) : 0) + ops::v_lane(g), valid, r);
    }
  };

  auto cap = [&](float score) {
    if constexpr (capped)
      return soft_cap(score, 1.0f / p.softcap, p.softcap);
    else
      return score;
  };
  // One warp step: the scores of 16 positions, the online softmax, and P · V.
  auto compute_step = [&](int s0, const std::uint32_t(&kw)[2][ops::k_words],
                          const std::uint32_t(&vw)[4][ops::v_words]) {
    // S = Q Kᵀ for positions s0 .. s0+7 (n-tile 0) and s0+8 .. s0+15 (n-tile 1).
    float s[2][4] = {};
#pragma unroll
    for (int n = 0; n < 2; ++n)
#pragma unroll
      for (int j = 0; j < ksteps; ++j) {
        std::uint32_t b0, b1;
        ops::k_fragment(kw[n], j, b0, b1);
        ops::mma(s[n], qa[j], b0, b1);
      }
    // Head g's true scores at positions s0 + 8n + 2c + e (qk_scale also undoes the power of two on
    // Q over an fp8 cache), capped under a softcap; outside [lo, end): -inf.
    float mx = -INFINITY;
#pragma unroll
    for (int n = 0; n < 2; ++n)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        s[n][e] = visible(s0 + 8 * n + 2 * c + e) ? cap(s[n][e] * qk_scale) : -INFINITY;
        mx = fmaxf(mx, s[n][e]);
      }
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float m_new = fmaxf(m_run, mx); // finite: every step holds a visible position
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
    // The high parts go first over every m-tile, then the low parts.
    std::uint32_t va[ksteps][4];
#pragma unroll
    for (int mt = 0; mt < ksteps; ++mt)
      ops::v_fragment(vw, mt, va[mt]);
    std::uint32_t hi[2], lo[2];
    ops::split(s[0][0], s[0][1], hi[0], lo[0]);
    ops::split(s[1][0], s[1][1], hi[1], lo[1]);
#pragma unroll
    for (int mt = 0; mt < ksteps; ++mt)
      ops::mma(acc[mt], va[mt], hi[0], hi[1]);
#pragma unroll
    for (int mt = 0; mt < ksteps; ++mt)
      ops::mma(acc[mt], va[mt], lo[0], lo[1]);
  };

  constexpr int stride = mma_warps * step;
  // A warp whose first step lies wholly before lo (a window's masked head, less than a granule)
  // starts a round later, so that every step it computes holds a visible position.
  static_assert(stride >= split_granule, "a window's masked head covers at most a warp's first step");
  const int first = begin + warp * step + (begin + warp * step + step <= lo ? stride : 0);
  auto register_loop = [&] {
    for (int s0 = first; s0 < end; s0 += stride) {
      std::uint32_t kw[2][ops::k_words], vw[4][ops::v_words];
      for_each_row(
          s0, step_base(s0),
          [&](const C* row, bool valid, int n) { load_runs<ops::k_words / 4, 4>(row, valid, kw[n]); },
          [&](const C* row, bool valid, int r) { ops::load_v(row, valid, vw[r]); });
      compute_step(s0, kw, vw);
    }
  };
  if (!staged || !step_in_one_block) {
    register_loop();
  } else {
    __shared__ alignas(8) std::uint64_t bars[mma_warps][staged_steps]; // a barrier per warp and stage
    unsigned char* my_stages = stages_s + warp * staged_steps * step_bytes;
    constexpr int k_bytes = step_bytes / 2; // the step's K rows (then as many of V rows)
    if (lane == 0) {
#pragma unroll
      for (int k = 0; k < staged_steps; ++k)
        barrier_init(&bars[warp][k]);
      barrier_init_fence();
    }
    __syncwarp();
    auto issue = [&](int s0, std::size_t base, int stage) { // by lane 0
      unsigned char* dst = my_stages + stage * step_bytes;
      barrier_expect(&bars[warp][stage], step_bytes);
      bulk_copy(dst, p.k_cache + base, k_bytes, &bars[warp][stage]);
      bulk_copy(dst + k_bytes, p.v_cache + base, k_bytes, &bars[warp][stage]);
    };
    if (lane == 0) {
#pragma unroll
      for (int k = 0; k < staged_steps - 1; ++k)
        if (const int s = first + k * stride; s < end)
          issue(s, step_base(s), k);
    }
    std::uint32_t parities = 0; // bit k: the parity of stage k's next phase
    int stage = 0;
    for (int s0 = first; s0 < end; s0 += stride) {
      // The table read for the step to fetch goes out before this step's wait.
      const int ahead = s0 + (staged_steps - 1) * stride;
      const std::size_t ahead_base = ahead < end ? step_base(ahead) : 0;
      barrier_wait(&bars[warp][stage], (parities >> stage) & 1u);
      parities ^= 1u << stage;
      std::uint32_t kw[2][ops::k_words], vw[4][ops::v_words];
      const C* ks = reinterpret_cast<const C*>(my_stages + stage * step_bytes);
      const C* vs = ks + step * HD;
#pragma unroll
      for (int n = 0; n < 2; ++n) // K rows outside [lo, end) are read: their scores are masked
        load_runs<ops::k_words / 4, 4, false>(ks + lane_k_row(n) * HD + ops::k_lane(c), true, kw[n]);
#pragma unroll
      for (int r = 0; r < 4; ++r) { // V rows outside [lo, end) are 0 (the block's stale rows may be NaN)
        const int row = lane_v_row(r);
        ops::template load_v<false>(vs + row * HD + ops::v_lane(g), visible(s0 + row), vw[r]);
      }
      // Every lane has read the stage of the step before (its registers are consumed), so the
      // next copy may overwrite it.
      __syncwarp();
      if (lane == 0 && ahead < end) {
        fence_before_bulk_copy();
        issue(ahead, ahead_base, stage == 0 ? staged_steps - 1 : stage - 1);
      }
      compute_step(s0, kw, vw);
      stage = stage == staged_steps - 1 ? 0 : stage + 1;
    }
  }

  // Merge the warps: each wrote its statistics and unnormalised output; one pass sums them.
  if (c == 0) {
    m_s[warp][g] = m_run;
    l_s[warp][g] = l_run;
  }
  {
    float(*my_rows)[HD] = acc_s(warp);
#pragma unroll
    for (int mt = 0; mt < ksteps; ++mt) {
      const int f = ops::dim_of(mt, g);
      my_rows[2 * c][f] = acc[mt][0];
      my_rows[2 * c + 1][f] = acc[mt][1];
      my_rows[2 * c][f + 1] = acc[mt][2];
      my_rows[2 * c + 1][f + 1] = acc[mt][3];
    }
  }
  __syncthreads();

  // Each head's statistics over the warps, once: its max and sum, and each warp's rescale in
  // place of the warp's max (instead of 4 exponentials per output element).
  __shared__ float total_s[2][mma_max_heads]; // max, sum
  if (threadIdx.x < heads_here) {
    const int h = threadIdx.x;
    float m = -INFINITY;
#pragma unroll
    for (int w = 0; w < mma_warps; ++w)
      m = fmaxf(m, m_s[w][h]);
    float l = 0.0f;
#pragma unroll
    for (int w = 0; w < mma_warps; ++w) {
      const float scale = __expf(m_s[w][h] - m); // 0 for a warp that had no step (m_s = -inf)
      m_s[w][h] = scale;
      l += scale * l_s[w][h];
    }
    total_s[0][h] = m;
    total_s[1][h] = l;
  }
  __syncthreads();

  const std::size_t row0 = static_cast<std::size_t>(t) * p.heads + head0; // (token, head) row of head h0
  const bool whole = parts == 1;
  for (int i = threadIdx.x; i < heads_here * HD; i += mma_threads) {
    const int h = i / HD, d = i % HD;
    float a = 0.0f;
#pragma unroll
    for (int w = 0; w < mma_warps; ++w)
      a += m_s[w][h] * acc_s(w)[h][d];
    a *= p.v_scale;
    if (whole)
      p.out[row0 * HD + i] = from_float<T>(a / total_s[1][h]);
    else {
      plan.ws_acc[((row0 + h) * plan.max_parts + part) * HD + d] = a;
      if (d == 0) {
        const std::size_t r = (row0 + h) * plan.max_parts + part;
        plan.ws_stats[2 * r] = total_s[0][h];
        plan.ws_stats[2 * r + 1] = total_s[1][h];
      }
    }
  }
  if (!whole && plan.counters != nullptr &&
      last_partition_arrived(split_counter(plan, t, p.kv_heads, kv, chunk), parts))
    merge_partials<4>(plan, parts, row0, heads_here, HD, p.out, mma_threads, reinterpret_cast<float*>(acc_s(0)),
                      merge_scratch_floats); // where the warps' outputs were: merged above
}

template <class T, class C, int HD>
int resident_mma_blocks() {
  int dev = 0, blocks = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64)
    return 0;
  static std::atomic<int> cache[64];
  if (const int c = cache[dev].load(std::memory_order_relaxed); c > 0)
    return c;
  // The uncapped kernel's: a softcap does not change the plan.
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, split_kv_mma_kernel<T, C, HD, false>, mma_threads, 0) !=
      cudaSuccess)
    return 0;
  cache[dev].store(blocks, std::memory_order_relaxed);
  return blocks;
}

template <class T, class C, int HD>
void launch_mma_of(const paged_attention_params<T, C>& p, const attention_plan& plan, cudaStream_t stream) {
  const auto kernel = p.softcap > 0.0f ? split_kv_mma_kernel<T, C, HD, true> : split_kv_mma_kernel<T, C, HD, false>;
  const dim3 grid(p.tokens, plan.max_parts * plan.head_chunks, p.kv_heads);
  kernel<<<grid, mma_threads, 0, stream>>>(p, plan);
}
} // namespace

template <class T, class C>
int split_mma_blocks_per_sm(int head_dim) {
  return head_dim == 64 ? resident_mma_blocks<T, C, 64>() : head_dim == 128 ? resident_mma_blocks<T, C, 128>() : 0;
}

template <class T, class C>
cudaError_t launch_split_kv_mma(const paged_attention_params<T, C>& p, const attention_plan& plan,
                                cudaStream_t stream) {
  if (p.head_dim == 64)
    launch_mma_of<T, C, 64>(p, plan, stream);
  else if (p.head_dim == 128)
    launch_mma_of<T, C, 128>(p, plan, stream);
  else
    return cudaErrorInvalidValue;
  return cudaGetLastError();
}

template int split_mma_blocks_per_sm<bf16, bf16>(int);
template int split_mma_blocks_per_sm<bf16, e4m3>(int);
template int split_mma_blocks_per_sm<__half, __half>(int);
template int split_mma_blocks_per_sm<__half, e4m3>(int);
template cudaError_t launch_split_kv_mma<bf16, bf16>(const paged_attention_params<bf16, bf16>&, const attention_plan&,
                                                     cudaStream_t);
template cudaError_t launch_split_kv_mma<bf16, e4m3>(const paged_attention_params<bf16, e4m3>&, const attention_plan&,
                                                     cudaStream_t);
template cudaError_t launch_split_kv_mma<__half, __half>(const paged_attention_params<__half, __half>&,
                                                         const attention_plan&, cudaStream_t);
template cudaError_t launch_split_kv_mma<__half, e4m3>(const paged_attention_params<__half, e4m3>&,
                                                       const attention_plan&, cudaStream_t);

} // namespace troupe::kernels::cuda::detail
