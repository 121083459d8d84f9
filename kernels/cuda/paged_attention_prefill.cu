// Prefill paged attention on tensor cores, for bf16 or fp16 activations (T; "bf16" below reads
// "T" for fp16, whose MMAs are the fp16 ones): one block per (tile of 128 query rows of one
// sequence, KV head), where a row is a (query token, head of the GQA group) pair, so the
// group's heads share every K/V tile. The tile's context is walked in tiles of 64
// positions, double-buffered: while the warps compute on one K/V tile, cp.async gathers
// the next from the block table into shared memory (an fp8 cache lands raw and is widened
// to bf16 exactly, in shared memory). S = Q K^T with mma.sync m16n8k16 (bf16 in, fp32
// accumulate), the causal mask and an online softmax in fp32 registers, then O += P V with
// P rounded to bf16, as FlashAttention does (the row sums keep fp32). P was split into a bf16
// high and low part until a plain bf16 P measured faster: PV took 2/3 of the MMAs, and each
// weight's rounding (2^-8 in bf16, 2^-11 in fp16) is the activations' own (bench/results/2026-12-02-h200-bf16-p).
// Blocks start with the sequence's last row tile: under the causal mask it has the most work,
// so the long tiles are not left for the end of the grid. Under a sliding window a block walks
// only the K/V tiles from the window of its earliest row on, a warp skips those before the
// windows of all its rows, and the window is masked element-wise beside the causal mask.
// Each of the 4 warps owns 32 rows (two m16 tiles, as FlashAttention-2 lays out its warps), so
// each K or V fragment read from shared memory serves two MMAs; Q waits in shared memory (the
// registers hold O and S), and two blocks share an SM so that one's MMAs overlap the other's
// softmax and barrier. Fragments follow the PTX m16n8k16 layouts (g = lane / 4,
// c = lane % 4: A rows g, g+8 / cols 2c.., 2c+8..; B col g / rows 2c.., 2c+8..; C rows g, g+8 / cols 2c, 2c+1).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/paged_attention_internal.cuh"
#include "kernels/cuda/tensor_core.cuh"

namespace troupe::kernels::cuda::detail {

namespace {
using bf16 = __nv_bfloat16;
constexpr int tile_warps = 4;
constexpr int warp_rows = 32;                     // (token, head) rows a warp: two m16 tiles
constexpr int tile_rows = warp_rows * tile_warps; // rows a block
constexpr int tile_keys = 64;                     // positions per K/V tile
constexpr int tile_threads = 32 * tile_warps;
// Two blocks an SM (registers <= 255 a thread, ~105 KB of shared memory a block): while one
// block waits at its tile barrier or computes its softmax, the other's MMAs run.
constexpr int tile_blocks_per_sm = 2;

// Four 8x8 b16 matrices; lanes 8m..8m+7 give the row addresses of matrix m.
__device__ __forceinline__ void load_matrix_x4(std::uint32_t (&r)[4], const void* row) {
  const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}
__device__ __forceinline__ void load_matrix_x4_trans(std::uint32_t (&r)[4], const void* row) {
  const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}
// 16 bytes global -> shared without passing through registers; src_bytes 0 writes zeros.
__device__ __forceinline__ void copy_async_16(void* dst, const void* src, int src_bytes) {
  const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(addr), "l"(src), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void copy_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
__device__ __forceinline__ void copy_async_wait_all() {
  asm volatile("cp.async.wait_group 0;\n" ::: "memory");
}

// The 16-bit type the tiles compute in, the activations' (bf16 or fp16): the MMA's inputs, P's
// rounding before P V, and the output's.
template <class T>
struct tile_math;
template <>
struct tile_math<bf16> {
  __device__ static void mma(float (&c)[4], const std::uint32_t (&a)[4], std::uint32_t b0, std::uint32_t b1) {
    mma_bf16(c, a, b0, b1);
  }
  __device__ static std::uint32_t pack(float x, float y) { return bits(__floats2bfloat162_rn(x, y)); }
  // Two e4m3 (the low and high byte) -> a pair of T, exactly.
  __device__ static std::uint32_t widen_e4m3_pair(unsigned pair) {
    const float2 f =
        __half22float2(__half2(__nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(pair), __NV_E4M3)));
    return pack(f.x, f.y);
  }
};
template <>
struct tile_math<__half> {
  __device__ static void mma(float (&c)[4], const std::uint32_t (&a)[4], std::uint32_t b0, std::uint32_t b1) {
    mma_f16(c, a, b0, b1);
  }
  __device__ static std::uint32_t pack(float x, float y) { return bits(__floats2half2_rn(x, y)); }
  __device__ static std::uint32_t widen_e4m3_pair(unsigned pair) {
    return bits(__half2(__nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(pair), __NV_E4M3)));
  }
};

// Where a K/V tile lands, and how it becomes the T rows that ldmatrix reads. A cache of T lands
// in its compute layout (rows padded by 16 bytes, which makes ldmatrix conflict-free), in two
// stages. An fp8 cache lands raw in two stages (HD bytes a row); after it arrives, each thread
// widens its own 16-byte chunks into the one T tile (e4m3 -> bf16 or fp16 is exact).
template <class T, class C, int HD>
struct tile_layout;
template <class T, int HD>
struct tile_layout<T, T, HD> {
  static constexpr int ld = HD + 8;                // T row stride of the compute tile
  static constexpr int elems = 8;                  // cache elements in 16 bytes
  static constexpr int stage_kv = tile_keys * ld;  // V's offset in a stage, in elements
  static constexpr int stage_elems = 2 * stage_kv; // K then V, T
  static constexpr std::size_t bytes = 2 * stage_elems * sizeof(T);
  __device__ static T* stage(char* smem, int s) { return reinterpret_cast<T*>(smem) + s * stage_elems; }
  __device__ static const T* compute(char* smem, int s) { return stage(smem, s); }
  __device__ static int landing(int row, int chunk) { return row * ld + chunk * elems; }
};
template <class T, int HD>
struct tile_layout<T, __nv_fp8_e4m3, HD> {
  static constexpr int ld = HD + 8;
  static constexpr int elems = 16;
  static constexpr int stage_kv = tile_keys * HD;  // V's offset in a stage, in bytes
  static constexpr int stage_elems = 2 * stage_kv; // K then V, raw
  static constexpr std::size_t bytes = 2 * stage_elems + 2 * tile_keys * ld * sizeof(T);
  __device__ static std::uint8_t* stage(char* smem, int s) {
    return reinterpret_cast<std::uint8_t*>(smem) + s * stage_elems;
  }
  __device__ static T* compute(char* smem, int) { return reinterpret_cast<T*>(smem + 2 * stage_elems); }
  __device__ static int landing(int row, int chunk) { return row * HD + chunk * elems; }
  // Chunk (row, chunk) of K (kv 0) or V (kv 1) in stage s -> the compute tile.
  __device__ static void widen(char* smem, int s, int row, int chunk) {
#pragma unroll
    for (int kv = 0; kv < 2; ++kv) {
      const uint4 w = *reinterpret_cast<const uint4*>(stage(smem, s) + kv * stage_kv + landing(row, chunk));
      const unsigned u[4] = {w.x, w.y, w.z, w.w};
      std::uint32_t o[8];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        o[2 * i] = tile_math<T>::widen_e4m3_pair(u[i] & 0xffffu);
        o[2 * i + 1] = tile_math<T>::widen_e4m3_pair(u[i] >> 16);
      }
      T* dst = compute(smem, s) + kv * tile_keys * ld + row * ld + chunk * elems;
      reinterpret_cast<uint4*>(dst)[0] = make_uint4(o[0], o[1], o[2], o[3]);
      reinterpret_cast<uint4*>(dst)[1] = make_uint4(o[4], o[5], o[6], o[7]);
    }
  }
};

// Q's row stride in shared memory: 16 bytes of padding make its ldmatrix reads conflict-free.
template <int HD>
constexpr int q_ld = HD + 8;
// A block's dynamic shared memory: the K/V stages, then the block's Q rows (T).
template <class T, class C, int HD>
constexpr std::size_t tile_bytes = tile_layout<T, C, HD>::bytes + std::size_t{tile_rows} * q_ld<HD> * sizeof(T);

// 2^x for x <= 0 (the softmax's exponent): the hardware's approximation (~2 ulp), flushing
// results below 2^-126 to zero, which no probability sum can tell from their value.
__device__ __forceinline__ float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// grid: kv_heads x (an upper bound of the row tiles), KV head fastest; block: tile_threads;
// dynamic shared memory: tile_bytes<T, C, HD>. capped: paged_attention_params::softcap > 0 (soft_cap).
template <class T, class C, int HD, bool capped>
__global__ void __launch_bounds__(tile_threads, tile_blocks_per_sm)
    prefill_tile_kernel(paged_attention_params<T, C> p, attention_plan plan) {
  using layout = tile_layout<T, C, HD>;
  using math = tile_math<T>;
  constexpr int ld = layout::ld;
  constexpr int ldq = q_ld<HD>;
  extern __shared__ __align__(16) char smem[];
  T* q_s = reinterpret_cast<T*>(smem + layout::bytes);
  __shared__ int row_pos_s[tile_rows];
  __shared__ int seq_s, tile_s, kv_lo_s, kv_end_s;

  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int gid = lane / 4, tig = lane % 4;
  const int group = p.heads / p.kv_heads, g = static_cast<int>(blockIdx.x % p.kv_heads);
  const int linear_tile = static_cast<int>(blockIdx.x / p.kv_heads);

  // Which (sequence, row tile) this block is: tiles are numbered through the sequences with
  // more than tile_min_q tokens, in order, and within a sequence from its last tile down;
  // warp 0 scans the sequences 32 at a time.
  if (warp == 0) {
    int before = 0, seq = -1, tile = 0;
    for (int base = 0; base < p.seqs; base += 32) {
      const int s = base + lane;
      int n = 0;
      if (s < p.seqs) {
        const int len = p.query_start[s + 1] - p.query_start[s];
        if (len > plan.tile_min_q)
          n = (len * group + tile_rows - 1) / tile_rows;
      }
      int incl = n;
      for (int o = 1; o < 32; o *= 2) {
        const int y = __shfl_up_sync(0xffffffffu, incl, o);
        if (lane >= o)
          incl += y;
      }
      const unsigned hit = __ballot_sync(0xffffffffu, before + incl > linear_tile);
      if (hit != 0u) {
        const int src = __ffs(hit) - 1;
        seq = base + src;
        const int end_of_seq = __shfl_sync(0xffffffffu, before + incl, src); // one past its last tile
        tile = end_of_seq - 1 - linear_tile;
        break;
      }
      before += __shfl_sync(0xffffffffu, incl, 31);
    }
    if (lane == 0) {
      seq_s = seq;
      tile_s = tile;
      kv_lo_s = INT_MAX;
      kv_end_s = 0;
    }
  }
  __syncthreads();
  const int seq = seq_s;
  if (seq < 0)
    return; // past the last tile
  const int q0 = p.query_start[seq], rows = (p.query_start[seq + 1] - q0) * group;
  const int row_begin = tile_s * tile_rows;
  for (int lr = threadIdx.x; lr < tile_rows; lr += tile_threads) {
    const int r = row_begin + lr;
    int pos = -1; // a row past the sequence: masked everywhere, never written
    if (r < rows) {
      pos = p.positions[q0 + r / group];
      atomicMax(&kv_end_s, pos + 1);
      if (p.window > 0)
        atomicMin(&kv_lo_s, max(0, pos - p.window + 1));
    }
    row_pos_s[lr] = pos;
  }
  __syncthreads();
  // The block's rows see positions [kv_lo, kv_end) (kv_lo: the first of its earliest window, 0
  // without one); K/V tiles start on tile_keys from the one that holds kv_lo.
  const int kv_end = kv_end_s, kv_lo = p.window > 0 ? kv_lo_s : 0;
  const int kv_begin = kv_lo / tile_keys * tile_keys;
  const std::int32_t* table = p.block_tables + static_cast<std::size_t>(seq) * p.max_blocks_per_seq;

  // Q lands in shared memory with the first K/V tile (one commit group); rows past the
  // sequence are zeros.
  {
    constexpr int q_chunks = HD / 8; // 16-byte chunks a Q row
    for (int i = threadIdx.x; i < tile_rows * q_chunks; i += tile_threads) {
      const int lr = i / q_chunks, chunk = i % q_chunks, r = row_begin + lr;
      const T* src = p.q;
      int bytes = 0;
      if (r < rows) {
        src = p.q + static_cast<std::size_t>(q0 + r / group) * p.q_stride +
              static_cast<std::size_t>(g * group + r % group) * HD + chunk * 8;
        bytes = 16;
      }
      copy_async_16(q_s + lr * ldq + chunk * 8, src, bytes);
    }
  }

  // Each tile of K (and of V) lands in passes of whole rows (per_row threads a row, so each warp
  // instruction reads whole rows); a thread takes the same chunk of `loads` consecutive rows
  // (2-8 by head size and cache type), which share one cache block whenever the block size is a
  // multiple of `loads`: one block-table look-up a tile, not one a row.
  constexpr int E = layout::elems;
  constexpr int per_row = HD / E;                       // 16-byte chunks per K (or V) row
  constexpr int rows_per_pass = tile_threads / per_row; // rows the block covers an instruction
  constexpr int loads = tile_keys / rows_per_pass;      // rows a thread gathers a tile, for K and for V
  static_assert(tile_threads % per_row == 0 && tile_keys % rows_per_pass == 0, "a tile splits evenly over the threads");
  const int gather_chunk = threadIdx.x % per_row, gather_row = threadIdx.x / per_row * loads;
  const bool rows_share_block = p.block_size % loads == 0;
  auto row_source = [&](int pos) {
    const cache_slot at = slot_of(pos, p.block_size, plan.block_shift);
    return cache_row_offset(table[at.column], at.offset, p.kv_heads, g, p.block_size, HD) + gather_chunk * E;
  };
  // Rows outside [kv_lo, kv_end) land as zeros (masked, and 0 * V stays finite), and their
  // table entries are not read (blocks wholly before a window may be gone).
  auto gather = [&](int kv0, int stage) {
    const int first = kv0 + gather_row;
    const std::size_t first_src = rows_share_block && first < kv_end && first + loads > kv_lo ? row_source(first) : 0;
    auto* dst = layout::stage(smem, stage) + layout::landing(gather_row, gather_chunk);
#pragma unroll
    for (int b = 0; b < loads; ++b) {
      const int pos = first + b;
      std::size_t src = 0;
      int bytes = 0;
      if (pos >= kv_lo && pos < kv_end) {
        src = rows_share_block ? first_src + static_cast<std::size_t>(b) * HD : row_source(pos);
        bytes = 16;
      }
      copy_async_16(dst + layout::landing(b, 0), p.k_cache + src, bytes);
      copy_async_16(dst + layout::landing(b, 0) + layout::stage_kv, p.v_cache + src, bytes);
    }
    copy_async_commit();
  };
  gather(kv_begin, 0);

  // This thread's rows: m-tile mt, half h (the C fragment's rows g and g + 8).
  const auto local_row = [warp, gid](int mt, int h) { return warp * warp_rows + mt * 16 + h * 8 + gid; };
  int pos[2][2];
  // warp_lo: the first position any of the warp's rows sees (INT_MAX when it has none).
  int warp_max_pos = -1, warp_min_pos = INT_MAX, warp_lo = INT_MAX;
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      pos[mt][h] = row_pos_s[local_row(mt, h)];
      warp_max_pos = max(warp_max_pos, pos[mt][h]);
      warp_min_pos = min(warp_min_pos, pos[mt][h]);
      if (pos[mt][h] >= 0)
        warp_lo = min(warp_lo, p.window > 0 ? max(0, pos[mt][h] - p.window + 1) : 0);
    }
  for (int o = 1; o < 32; o *= 2) {
    warp_max_pos = max(warp_max_pos, __shfl_xor_sync(0xffffffffu, warp_max_pos, o));
    warp_min_pos = min(warp_min_pos, __shfl_xor_sync(0xffffffffu, warp_min_pos, o));
    warp_lo = min(warp_lo, __shfl_xor_sync(0xffffffffu, warp_lo, o));
  }

  float o[2][HD / 8][4];
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int dn = 0; dn < HD / 8; ++dn)
      o[mt][dn][0] = o[mt][dn][1] = o[mt][dn][2] = o[mt][dn][3] = 0.0f;
  // Per row: the running maximum of the scaled scores (log2 domain) and this thread's partial sum.
  float m[2][2], l[2][2];
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
    for (int h = 0; h < 2; ++h) {
      m[mt][h] = -INFINITY;
      l[mt][h] = 0.0f;
    }
  // Raw scores reach the log2 domain times scale_log2 > 0 (the launcher's condition), so their
  // maximum is that of the scaled ones. Capped, they are the softmax's scores already (scaled, then
  // capped) and take log2(e) alone.
  const float scale_log2 = (capped ? 1.0f : p.scale * p.k_scale) * 1.4426950408889634f;
  const float raw_to_unit = p.scale * p.k_scale / p.softcap; // capped: a raw score -> s / softcap
  const int mi = lane / 8, mr = lane % 8; // ldmatrix: matrix and row this lane addresses
  const T* q_warp = q_s + warp * warp_rows * ldq;

  for (int kv0 = kv_begin, stage = 0; kv0 < kv_end; kv0 += tile_keys, stage ^= 1) {
    copy_async_wait_all();
    __syncthreads(); // this tile is in for every thread, and every warp is done with the other stage
    if (kv0 + tile_keys < kv_end)
      gather(kv0 + tile_keys, stage ^ 1); // lands while this tile is computed
    if constexpr (!std::is_same_v<C, T>) {
#pragma unroll
      for (int b = 0; b < loads; ++b) // the chunks this thread gathered
        layout::widen(smem, stage, gather_row + b, gather_chunk);
      __syncthreads();
    }
    if (kv0 > warp_max_pos || kv0 + tile_keys <= warp_lo)
      continue; // all of this warp's rows come before the tile (causal), or the tile before their windows
    const T* k_s = layout::compute(smem, stage);
    const T* v_s = k_s + tile_keys * ld;

    // S = Q K^T for this warp's 32 rows (two m-tiles) and the tile's 64 positions: each K
    // fragment serves both m-tiles.
    float s[2][tile_keys / 8][4];
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int nt = 0; nt < tile_keys / 8; ++nt)
        s[mt][nt][0] = s[mt][nt][1] = s[mt][nt][2] = s[mt][nt][3] = 0.0f;
#pragma unroll
    for (int ks = 0; ks < HD / 16; ++ks) {
      std::uint32_t a[2][4];
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
        load_matrix_x4(a[mt], q_warp + (mt * 16 + (mi & 1) * 8 + mr) * ldq + ks * 16 + (mi >> 1) * 8);
      std::uint32_t b[tile_keys / 16][4]; // B of n-tiles 2np (b[np][0], b[np][1]) and 2np+1 (b[np][2], b[np][3])
#pragma unroll
      for (int np = 0; np < tile_keys / 16; ++np)
        load_matrix_x4(b[np], k_s + (np * 16 + (mi >> 1) * 8 + mr) * ld + ks * 16 + (mi & 1) * 8);
#pragma unroll
      for (int np = 0; np < tile_keys / 16; ++np)
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {
          math::mma(s[mt][2 * np], a[mt], b[np][0], b[np][1]);
          math::mma(s[mt][2 * np + 1], a[mt], b[np][2], b[np][3]);
        }
    }

    if constexpr (capped) { // before the masks: a masked score stays -inf
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int nt = 0; nt < tile_keys / 8; ++nt)
#pragma unroll
          for (int j = 0; j < 4; ++j)
            s[mt][nt][j] = soft_cap(s[mt][nt][j], raw_to_unit, p.softcap);
    }
    // Mask (only tiles that reach past the warp's first row), then the running maxima over the
    // raw (or capped) scores (rows spread over 4 lanes), then P = 2^(s * scale - max) in one FFMA each.
    if (kv0 + tile_keys - 1 > warp_min_pos) { // a branch of its own: most tiles skip it whole
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int nt = 0; nt < tile_keys / 8; ++nt)
#pragma unroll
          for (int j = 0; j < 4; ++j)
            if (kv0 + nt * 8 + tig * 2 + (j & 1) > pos[mt][j / 2])
              s[mt][nt][j] = -INFINITY;
    }
    // The sliding window (only tiles that start inside the window of the warp's last row): a row
    // may see none of the tile, which the softmax below takes as it takes a causally masked row.
    if (p.window > 0 && kv0 <= warp_max_pos - p.window) {
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int nt = 0; nt < tile_keys / 8; ++nt)
#pragma unroll
          for (int j = 0; j < 4; ++j)
            if (kv0 + nt * 8 + tig * 2 + (j & 1) <= pos[mt][j / 2] - p.window)
              s[mt][nt][j] = -INFINITY;
    }
#pragma unroll
    for (int mt = 0; mt < 2; ++mt) {
      float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
      for (int nt = 0; nt < tile_keys / 8; ++nt)
#pragma unroll
        for (int j = 0; j < 4; ++j)
          mx[j / 2] = fmaxf(mx[j / 2], s[mt][nt][j]);
      float alpha[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        for (int o2 = 1; o2 < 4; o2 *= 2)
          mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], o2));
        const float next = fmaxf(m[mt][h], mx[h] * scale_log2);
        const float ref = next == -INFINITY ? 0.0f : next; // a row that has seen nothing keeps P = 0
        // 1 exactly while the maximum stays (also for a row that has seen nothing yet: its O is 0).
        alpha[h] = next == m[mt][h] ? 1.0f : exp2_approx(m[mt][h] - ref);
        m[mt][h] = next;
        float sum = 0.0f;
#pragma unroll
        for (int nt = 0; nt < tile_keys / 8; ++nt) {
          s[mt][nt][2 * h] = exp2_approx(fmaf(s[mt][nt][2 * h], scale_log2, -ref));
          s[mt][nt][2 * h + 1] = exp2_approx(fmaf(s[mt][nt][2 * h + 1], scale_log2, -ref));
          sum += s[mt][nt][2 * h] + s[mt][nt][2 * h + 1];
        }
        l[mt][h] = l[mt][h] * alpha[h] + sum;
      }
      // Once the maxima settle (most tiles), no row of this m-tile moves: skip the multiplies.
      if (__any_sync(0xffffffffu, alpha[0] != 1.0f || alpha[1] != 1.0f)) {
#pragma unroll
        for (int dn = 0; dn < HD / 8; ++dn) {
          o[mt][dn][0] *= alpha[0];
          o[mt][dn][1] *= alpha[0];
          o[mt][dn][2] *= alpha[1];
          o[mt][dn][3] *= alpha[1];
        }
      }
    }

    // O += P V: the C fragments of n-tiles 2kk and 2kk+1 are the A fragment of key step kk, P
    // rounded to bf16 (the row sums l keep the fp32 values). Each V fragment serves both m-tiles.
#pragma unroll
    for (int kk = 0; kk < tile_keys / 16; ++kk) {
      std::uint32_t pp[2][4]; // [m-tile]: A fragments of P
#pragma unroll
      for (int mt = 0; mt < 2; ++mt) {
        pp[mt][0] = math::pack(s[mt][2 * kk][0], s[mt][2 * kk][1]);
        pp[mt][1] = math::pack(s[mt][2 * kk][2], s[mt][2 * kk][3]);
        pp[mt][2] = math::pack(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
        pp[mt][3] = math::pack(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
      }
#pragma unroll
      for (int dp = 0; dp < HD / 16; ++dp) {
        std::uint32_t b[4]; // B of d n-tiles 2dp (b[0], b[1]) and 2dp+1 (b[2], b[3])
        load_matrix_x4_trans(b, v_s + (kk * 16 + (mi & 1) * 8 + mr) * ld + dp * 16 + (mi >> 1) * 8);
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) {
          math::mma(o[mt][2 * dp], pp[mt], b[0], b[1]);
          math::mma(o[mt][2 * dp + 1], pp[mt], b[2], b[3]);
        }
      }
    }
  }

  // Row sums over the 4 lanes of each row; write the valid rows.
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float sum = l[mt][h];
      for (int o2 = 1; o2 < 4; o2 *= 2)
        sum += __shfl_xor_sync(0xffffffffu, sum, o2);
      if (pos[mt][h] < 0)
        continue;
      const int r = row_begin + local_row(mt, h);
      T* out = p.out + (static_cast<std::size_t>(q0 + r / group) * p.heads + g * group + r % group) * HD;
      const float inv = p.v_scale / sum;
#pragma unroll
      for (int dn = 0; dn < HD / 8; ++dn)
        *reinterpret_cast<std::uint32_t*>(out + dn * 8 + tig * 2) =
            math::pack(o[mt][dn][2 * h] * inv, o[mt][dn][2 * h + 1] * inv);
    }
}

// Launches the kernel of one head size, with the dynamic shared memory its layout needs
// (over the 48 KiB default; the allowance is per device, so it is set on every launch).
template <class T, class C, int HD>
cudaError_t launch_tiles_of(const paged_attention_params<T, C>& p, const attention_plan& plan, long long blocks,
                            cudaStream_t stream) {
  const auto kernel = p.softcap > 0.0f ? prefill_tile_kernel<T, C, HD, true> : prefill_tile_kernel<T, C, HD, false>;
  constexpr std::size_t bytes = tile_bytes<T, C, HD>;
  const cudaError_t allowed =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
  if (allowed != cudaSuccess)
    return allowed;
  // All of the SM's unified L1 / shared memory as shared memory, so that two blocks fit. A hint:
  // if the device declines it, the blocks still run (one an SM), and its error is cleared.
  if (cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared) !=
      cudaSuccess)
    (void)cudaGetLastError();
  kernel<<<static_cast<unsigned>(blocks), tile_threads, bytes, stream>>>(p, plan);
  return cudaGetLastError();
}
} // namespace

template <class T, class C>
cudaError_t launch_prefill_tiles(const paged_attention_params<T, C>& p, const attention_plan& plan,
                                 cudaStream_t stream) {
  const long long group = p.heads / p.kv_heads;
  // Each long sequence adds at most one partial tile.
  const long long bound = (p.tokens * group + tile_rows - 1) / tile_rows +
                          std::min<long long>(p.seqs, p.tokens / (static_cast<long long>(plan.tile_min_q) + 1));
  if (bound <= 0)
    return cudaSuccess;
  const long long blocks = bound * p.kv_heads;
  if (blocks > INT_MAX)
    return cudaErrorInvalidValue;
  if (p.head_dim == 64)
    return launch_tiles_of<T, C, 64>(p, plan, blocks, stream);
  if (p.head_dim == 128)
    return launch_tiles_of<T, C, 128>(p, plan, blocks, stream);
  return cudaErrorInvalidValue;
}

template cudaError_t launch_prefill_tiles<bf16, bf16>(const paged_attention_params<bf16, bf16>&, const attention_plan&,
                                                      cudaStream_t);
template cudaError_t launch_prefill_tiles<bf16, __nv_fp8_e4m3>(const paged_attention_params<bf16, __nv_fp8_e4m3>&,
                                                               const attention_plan&, cudaStream_t);
template cudaError_t launch_prefill_tiles<__half, __half>(const paged_attention_params<__half, __half>&,
                                                          const attention_plan&, cudaStream_t);
template cudaError_t launch_prefill_tiles<__half, __nv_fp8_e4m3>(const paged_attention_params<__half, __nv_fp8_e4m3>&,
                                                                 const attention_plan&, cudaStream_t);

} // namespace troupe::kernels::cuda::detail
