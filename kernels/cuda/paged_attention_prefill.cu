// Prefill paged attention on tensor cores: one block per (tile of 128 query rows of one
// sequence, KV head), where a row is a (query token, head of the GQA group) pair, so the
// group's heads share every K/V tile. The tile's context is walked in tiles of 64
// positions, double-buffered: while the warps compute on one K/V tile, cp.async gathers
// the next from the block table into shared memory (an fp8 cache lands raw and is widened
// to bf16 exactly, in shared memory). S = Q K^T with mma.sync m16n8k16 (bf16 in, fp32
// accumulate), the causal mask and an online softmax in fp32 registers, then O += P V with
// P split into a bf16 high and low part (two MMAs) so that P keeps ~16 bits, as fp32 would.
// Blocks start with the sequence's last row tile: under the causal mask it has the most work,
// so the long tiles are not left for the end of the grid.
// Each warp owns 16 rows; fragments follow the PTX m16n8k16 layouts (g = lane / 4,
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
constexpr int tile_warps = 8;
constexpr int tile_rows = 16 * tile_warps; // (token, head) rows per block, 16 per warp
constexpr int tile_keys = 64;              // positions per K/V tile
constexpr int tile_threads = 32 * tile_warps;

// Four 8x8 b16 matrices; lanes 8m..8m+7 give the row addresses of matrix m.
__device__ __forceinline__ void load_matrix_x4(std::uint32_t (&r)[4], const bf16* row) {
  const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}
__device__ __forceinline__ void load_matrix_x4_trans(std::uint32_t (&r)[4], const bf16* row) {
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

// Where a K/V tile lands, and how it becomes the bf16 rows that ldmatrix reads. A bf16 cache
// lands in its compute layout (rows padded by 16 bytes, which makes ldmatrix conflict-free),
// in two stages. An fp8 cache lands raw in two stages (HD bytes a row); after it arrives,
// each thread widens its own 16-byte chunks into the one bf16 tile (e4m3 -> bf16 is exact).
template <class C, int HD>
struct tile_layout;
template <int HD>
struct tile_layout<bf16, HD> {
  static constexpr int ld = HD + 8;                // bf16 row stride of the compute tile
  static constexpr int elems = 8;                  // cache elements in 16 bytes
  static constexpr int stage_kv = tile_keys * ld;  // V's offset in a stage, in elements
  static constexpr int stage_elems = 2 * stage_kv; // K then V, bf16
  static constexpr std::size_t bytes = 2 * stage_elems * sizeof(bf16);
  __device__ static bf16* stage(char* smem, int s) { return reinterpret_cast<bf16*>(smem) + s * stage_elems; }
  __device__ static const bf16* compute(char* smem, int s) { return stage(smem, s); }
  __device__ static int landing(int row, int chunk) { return row * ld + chunk * elems; }
};
template <int HD>
struct tile_layout<__nv_fp8_e4m3, HD> {
  static constexpr int ld = HD + 8;
  static constexpr int elems = 16;
  static constexpr int stage_kv = tile_keys * HD;  // V's offset in a stage, in bytes
  static constexpr int stage_elems = 2 * stage_kv; // K then V, raw
  static constexpr std::size_t bytes = 2 * stage_elems + 2 * tile_keys * ld * sizeof(bf16);
  __device__ static std::uint8_t* stage(char* smem, int s) {
    return reinterpret_cast<std::uint8_t*>(smem) + s * stage_elems;
  }
  __device__ static bf16* compute(char* smem, int) { return reinterpret_cast<bf16*>(smem + 2 * stage_elems); }
  __device__ static int landing(int row, int chunk) { return row * HD + chunk * elems; }
  __device__ static std::uint32_t widen_pair(unsigned pair) {
    const float2 f =
        __half22float2(__half2(__nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(pair), __NV_E4M3)));
    return bits(__floats2bfloat162_rn(f.x, f.y));
  }
  // Chunk (row, chunk) of K (kv 0) or V (kv 1) in stage s -> the compute tile.
  __device__ static void widen(char* smem, int s, int row, int chunk) {
#pragma unroll
    for (int kv = 0; kv < 2; ++kv) {
      const uint4 w = *reinterpret_cast<const uint4*>(stage(smem, s) + kv * stage_kv + landing(row, chunk));
      const unsigned u[4] = {w.x, w.y, w.z, w.w};
      std::uint32_t o[8];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        o[2 * i] = widen_pair(u[i] & 0xffffu);
        o[2 * i + 1] = widen_pair(u[i] >> 16);
      }
      bf16* dst = compute(smem, s) + kv * tile_keys * ld + row * ld + chunk * elems;
      reinterpret_cast<uint4*>(dst)[0] = make_uint4(o[0], o[1], o[2], o[3]);
      reinterpret_cast<uint4*>(dst)[1] = make_uint4(o[4], o[5], o[6], o[7]);
    }
  }
};

// grid: kv_heads x (an upper bound of the row tiles), KV head fastest; block: tile_threads;
// dynamic shared memory: tile_layout<C, HD>::bytes.
template <class C, int HD>
__global__ void __launch_bounds__(tile_threads, 1)
    prefill_tile_kernel(paged_attention_params<bf16, C> p, attention_plan plan) {
  using layout = tile_layout<C, HD>;
  constexpr int ld = layout::ld;
  extern __shared__ __align__(16) char smem[];
  __shared__ int row_pos_s[tile_rows];
  __shared__ int seq_s, tile_s, kv_end_s;

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
      kv_end_s = 0;
    }
  }
  __syncthreads();
  const int seq = seq_s;
  if (seq < 0)
    return; // past the last tile
  const int q0 = p.query_start[seq], rows = (p.query_start[seq + 1] - q0) * group;
  const int row_begin = tile_s * tile_rows;
  if (threadIdx.x < tile_rows) {
    const int r = row_begin + threadIdx.x;
    int pos = -1; // a row past the sequence: masked everywhere, never written
    if (r < rows) {
      pos = p.positions[q0 + r / group];
      atomicMax(&kv_end_s, pos + 1);
    }
    row_pos_s[threadIdx.x] = pos;
  }
  __syncthreads();
  const int kv_end = kv_end_s;
  const std::int32_t* table = p.block_tables + static_cast<std::size_t>(seq) * p.max_blocks_per_seq;

  // Each thread gathers the same `loads` 16-byte chunks of K and of V in every tile.
  constexpr int E = layout::elems;
  constexpr int per_row = HD / E;                           // 16-byte chunks per K (or V) row
  constexpr int loads = tile_keys * per_row / tile_threads; // per thread and tile, for K and for V
  static_assert(loads >= 1 && tile_keys * per_row % tile_threads == 0, "a tile splits evenly over the threads");
  auto gather = [&](int kv0, int stage) {
#pragma unroll
    for (int b = 0; b < loads; ++b) {
      const int i = threadIdx.x + b * tile_threads;
      const int row = i / per_row, chunk = i % per_row;
      const int pos = kv0 + row;
      std::size_t src = 0;
      int bytes = 0; // past the context: zeros (masked, and 0 * V stays finite)
      if (pos < kv_end) {
        const cache_slot at = slot_of(pos, p.block_size, plan.block_shift);
        src = cache_row_offset(table[at.column], at.offset, p.kv_heads, g, p.block_size, HD) + chunk * E;
        bytes = 16;
      }
      auto* dst = layout::stage(smem, stage) + layout::landing(row, chunk);
      copy_async_16(dst, p.k_cache + src, bytes);
      copy_async_16(dst + layout::stage_kv, p.v_cache + src, bytes);
    }
    copy_async_commit();
  };
  gather(0, 0);

  // This thread's two rows (local lr0 and lr0 + 8) and the warp's position range.
  const int lr0 = warp * 16 + gid, lr1 = lr0 + 8;
  const int pos0 = row_pos_s[lr0], pos1 = row_pos_s[lr1];
  int warp_max_pos = max(pos0, pos1), warp_min_pos = min(pos0, pos1);
  for (int o = 1; o < 32; o *= 2) {
    warp_max_pos = max(warp_max_pos, __shfl_xor_sync(0xffffffffu, warp_max_pos, o));
    warp_min_pos = min(warp_min_pos, __shfl_xor_sync(0xffffffffu, warp_min_pos, o));
  }

  // Q as A fragments, straight from global memory (read once).
  auto q_row = [&](int lr) -> const bf16* {
    const int r = row_begin + lr;
    if (r >= rows)
      return nullptr;
    return p.q + static_cast<std::size_t>(q0 + r / group) * p.q_stride +
           static_cast<std::size_t>(g * group + r % group) * HD;
  };
  const bf16* qa = q_row(lr0);
  const bf16* qb = q_row(lr1);
  auto q_pair = [](const bf16* row, int d) -> std::uint32_t {
    return row != nullptr ? *reinterpret_cast<const std::uint32_t*>(row + d) : 0u;
  };
  std::uint32_t qf[HD / 16][4];
#pragma unroll
  for (int ks = 0; ks < HD / 16; ++ks) {
    const int d = ks * 16 + tig * 2;
    qf[ks][0] = q_pair(qa, d);
    qf[ks][1] = q_pair(qb, d);
    qf[ks][2] = q_pair(qa, d + 8);
    qf[ks][3] = q_pair(qb, d + 8);
  }

  float o[HD / 8][4];
#pragma unroll
  for (int dn = 0; dn < HD / 8; ++dn)
    o[dn][0] = o[dn][1] = o[dn][2] = o[dn][3] = 0.0f;
  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f; // log2 domain maxima; partial sums of this thread
  const float scale_log2 = p.scale * p.k_scale * 1.4426950408889634f;
  const int mi = lane / 8, mr = lane % 8; // ldmatrix: matrix and row this lane addresses

  for (int kv0 = 0, stage = 0; kv0 < kv_end; kv0 += tile_keys, stage ^= 1) {
    copy_async_wait_all();
    __syncthreads(); // this tile is in for every thread, and every warp is done with the other stage
    if (kv0 + tile_keys < kv_end)
      gather(kv0 + tile_keys, stage ^ 1); // lands while this tile is computed
    if constexpr (!std::is_same_v<C, bf16>) {
#pragma unroll
      for (int b = 0; b < loads; ++b) {
        const int i = threadIdx.x + b * tile_threads;
        layout::widen(smem, stage, i / per_row, i % per_row);
      }
      __syncthreads();
    }
    if (kv0 > warp_max_pos)
      continue; // causal: all of this warp's rows come before the tile
    const bf16* k_s = layout::compute(smem, stage);
    const bf16* v_s = k_s + tile_keys * ld;

    // S = Q K^T for this warp's 16 rows and the tile's 64 positions.
    float s[tile_keys / 8][4];
#pragma unroll
    for (int nt = 0; nt < tile_keys / 8; ++nt)
      s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
#pragma unroll
    for (int ks = 0; ks < HD / 16; ++ks) {
      std::uint32_t b[tile_keys / 16][4]; // B of n-tiles 2np (b[np][0], b[np][1]) and 2np+1 (b[np][2], b[np][3])
#pragma unroll
      for (int np = 0; np < tile_keys / 16; ++np)
        load_matrix_x4(b[np], k_s + (np * 16 + (mi >> 1) * 8 + mr) * ld + ks * 16 + (mi & 1) * 8);
#pragma unroll
      for (int np = 0; np < tile_keys / 16; ++np) {
        mma_bf16(s[2 * np], qf[ks], b[np][0], b[np][1]);
        mma_bf16(s[2 * np + 1], qf[ks], b[np][2], b[np][3]);
      }
    }

    // Scale into the log2 domain, mask, and update the running maxima (rows spread over 4 lanes).
    const bool mask = kv0 + tile_keys - 1 > warp_min_pos;
    float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
    for (int nt = 0; nt < tile_keys / 8; ++nt)
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        float x = s[nt][j] * scale_log2;
        if (mask && kv0 + nt * 8 + tig * 2 + (j & 1) > (j < 2 ? pos0 : pos1))
          x = -INFINITY;
        s[nt][j] = x;
        if (j < 2)
          mx0 = fmaxf(mx0, x);
        else
          mx1 = fmaxf(mx1, x);
      }
    for (int o2 = 1; o2 < 4; o2 *= 2) {
      mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, o2));
      mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, o2));
    }
    const float new0 = fmaxf(m0, mx0), new1 = fmaxf(m1, mx1);
    const float ref0 = new0 == -INFINITY ? 0.0f : new0, ref1 = new1 == -INFINITY ? 0.0f : new1;
    const float alpha0 = exp2f(m0 - ref0), alpha1 = exp2f(m1 - ref1); // 0 while a row has seen nothing
    m0 = new0;
    m1 = new1;
    float sum0 = 0.0f, sum1 = 0.0f;
#pragma unroll
    for (int nt = 0; nt < tile_keys / 8; ++nt) {
      s[nt][0] = exp2f(s[nt][0] - ref0);
      s[nt][1] = exp2f(s[nt][1] - ref0);
      s[nt][2] = exp2f(s[nt][2] - ref1);
      s[nt][3] = exp2f(s[nt][3] - ref1);
      sum0 += s[nt][0] + s[nt][1];
      sum1 += s[nt][2] + s[nt][3];
    }
    l0 = l0 * alpha0 + sum0;
    l1 = l1 * alpha1 + sum1;
#pragma unroll
    for (int dn = 0; dn < HD / 8; ++dn) {
      o[dn][0] *= alpha0;
      o[dn][1] *= alpha0;
      o[dn][2] *= alpha1;
      o[dn][3] *= alpha1;
    }

    // O += P V: the C fragments of n-tiles 2kk and 2kk+1 are the A fragment of key step kk.
    // The high parts go first over every d n-tile, then the low parts, so that no MMA waits on
    // the one just before it.
#pragma unroll
    for (int kk = 0; kk < tile_keys / 16; ++kk) {
      std::uint32_t ph[4], pl[4];
      split_pair(s[2 * kk][0], s[2 * kk][1], ph[0], pl[0]);
      split_pair(s[2 * kk][2], s[2 * kk][3], ph[1], pl[1]);
      split_pair(s[2 * kk + 1][0], s[2 * kk + 1][1], ph[2], pl[2]);
      split_pair(s[2 * kk + 1][2], s[2 * kk + 1][3], ph[3], pl[3]);
      std::uint32_t b[HD / 16][4]; // B of d n-tiles 2dp (b[dp][0], b[dp][1]) and 2dp+1 (b[dp][2], b[dp][3])
#pragma unroll
      for (int dp = 0; dp < HD / 16; ++dp)
        load_matrix_x4_trans(b[dp], v_s + (kk * 16 + (mi & 1) * 8 + mr) * ld + dp * 16 + (mi >> 1) * 8);
#pragma unroll
      for (int dp = 0; dp < HD / 16; ++dp) {
        mma_bf16(o[2 * dp], ph, b[dp][0], b[dp][1]);
        mma_bf16(o[2 * dp + 1], ph, b[dp][2], b[dp][3]);
      }
#pragma unroll
      for (int dp = 0; dp < HD / 16; ++dp) {
        mma_bf16(o[2 * dp], pl, b[dp][0], b[dp][1]);
        mma_bf16(o[2 * dp + 1], pl, b[dp][2], b[dp][3]);
      }
    }
  }

  // Row sums over the 4 lanes of each row; write the valid rows.
  for (int o2 = 1; o2 < 4; o2 *= 2) {
    l0 += __shfl_xor_sync(0xffffffffu, l0, o2);
    l1 += __shfl_xor_sync(0xffffffffu, l1, o2);
  }
  auto write_row = [&](int lr, int pos, float l, int half) {
    if (pos < 0)
      return;
    const int r = row_begin + lr;
    bf16* out = p.out + (static_cast<std::size_t>(q0 + r / group) * p.heads + g * group + r % group) * HD;
    const float inv = p.v_scale / l;
#pragma unroll
    for (int dn = 0; dn < HD / 8; ++dn)
      *reinterpret_cast<__nv_bfloat162*>(out + dn * 8 + tig * 2) =
          __floats2bfloat162_rn(o[dn][2 * half] * inv, o[dn][2 * half + 1] * inv);
  };
  write_row(lr0, pos0, l0, 0);
  write_row(lr1, pos1, l1, 1);
}

// Launches the kernel of one head size, with the dynamic shared memory its layout needs
// (over the 48 KiB default; the allowance is per device, so it is set on every launch).
template <class C, int HD>
cudaError_t launch_tiles_of(const paged_attention_params<bf16, C>& p, const attention_plan& plan, long long blocks,
                            cudaStream_t stream) {
  constexpr std::size_t bytes = tile_layout<C, HD>::bytes;
  const cudaError_t allowed = cudaFuncSetAttribute(
      prefill_tile_kernel<C, HD>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
  if (allowed != cudaSuccess)
    return allowed;
  prefill_tile_kernel<C, HD><<<static_cast<unsigned>(blocks), tile_threads, bytes, stream>>>(p, plan);
  return cudaGetLastError();
}
} // namespace

template <class C>
cudaError_t launch_prefill_tiles(const paged_attention_params<bf16, C>& p, const attention_plan& plan,
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
    return launch_tiles_of<C, 64>(p, plan, blocks, stream);
  if (p.head_dim == 128)
    return launch_tiles_of<C, 128>(p, plan, blocks, stream);
  return cudaErrorInvalidValue;
}

template cudaError_t launch_prefill_tiles<bf16>(const paged_attention_params<bf16, bf16>&, const attention_plan&,
                                                cudaStream_t);
template cudaError_t launch_prefill_tiles<__nv_fp8_e4m3>(const paged_attention_params<bf16, __nv_fp8_e4m3>&,
                                                         const attention_plan&, cudaStream_t);

} // namespace troupe::kernels::cuda::detail
