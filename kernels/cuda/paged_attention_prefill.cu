// Prefill paged attention on tensor cores: one block per (tile of 64 query rows of one
// sequence, KV head), where a row is a (query token, head of the GQA group) pair, so the
// group's heads share every K/V tile. The tile's context is walked in tiles of 64
// positions: K and V are gathered from the block table into shared memory as bf16
// (fp8 converts exactly), S = Q K^T with mma.sync m16n8k16 (bf16 in, fp32 accumulate),
// the causal mask and an online softmax in fp32 registers, then O += P V with P split
// into a bf16 high and low part (two MMAs) so that P keeps ~16 bits, as fp32 would.
// Each warp owns 16 rows; fragments follow the PTX m16n8k16 layouts (g = lane / 4,
// c = lane % 4: A rows g, g+8 / cols 2c.., 2c+8..; B col g / rows 2c.., 2c+8..; C rows g, g+8 / cols 2c, 2c+1).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cmath>
#include <cstdint>

#include "kernels/cuda/paged_attention_internal.cuh"

namespace troupe::kernels::cuda::detail {

namespace {
using bf16 = __nv_bfloat16;
constexpr int tile_rows = 64; // (token, head) rows per block, 16 per warp
constexpr int tile_keys = 64; // positions per K/V tile
constexpr int tile_threads = 128;

__device__ __forceinline__ void mma_bf16(float (&c)[4], const std::uint32_t (&a)[4], std::uint32_t b0,
                                         std::uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
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

__device__ __forceinline__ std::uint32_t bits(__nv_bfloat162 v) {
  return *reinterpret_cast<const std::uint32_t*>(&v);
}
// (x, y) -> bf16 pairs hi + lo with hi + lo = (x, y) to ~2^-17 relative.
__device__ __forceinline__ void split_pair(float x, float y, std::uint32_t& hi, std::uint32_t& lo) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(x, y);
  const float2 hf = __bfloat1622float2(h);
  hi = bits(h);
  lo = bits(__floats2bfloat162_rn(x - hf.x, y - hf.y));
}

// 16 cache bytes -> the bf16 words stored to shared memory (bf16: as is; fp8: 16 exact conversions).
template <class C>
struct tile_chunk;
template <>
struct tile_chunk<bf16> {
  static constexpr int elems = 8;
  __device__ static void store(bf16* dst, uint4 w) { *reinterpret_cast<uint4*>(dst) = w; }
};
template <>
struct tile_chunk<__nv_fp8_e4m3> {
  static constexpr int elems = 16;
  __device__ static std::uint32_t widen(unsigned pair) {
    const float2 f =
        __half22float2(__half2(__nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(pair), __NV_E4M3)));
    return bits(__floats2bfloat162_rn(f.x, f.y));
  }
  __device__ static void store(bf16* dst, uint4 w) {
    const unsigned u[4] = {w.x, w.y, w.z, w.w};
    std::uint32_t o[8];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      o[2 * i] = widen(u[i] & 0xffffu);
      o[2 * i + 1] = widen(u[i] >> 16);
    }
    reinterpret_cast<uint4*>(dst)[0] = make_uint4(o[0], o[1], o[2], o[3]);
    reinterpret_cast<uint4*>(dst)[1] = make_uint4(o[4], o[5], o[6], o[7]);
  }
};

// grid: (an upper bound of the row tiles, kv_heads); block: tile_threads.
template <class C, int HD>
__global__ void __launch_bounds__(tile_threads)
    prefill_tile_kernel(paged_attention_params<bf16, C> p, attention_plan plan) {
  constexpr int ld = HD + 8; // shared row stride in bf16: 16 bytes of padding make ldmatrix conflict-free
  __shared__ __align__(16) bf16 k_s[tile_keys * ld];
  __shared__ __align__(16) bf16 v_s[tile_keys * ld];
  __shared__ int row_pos_s[tile_rows];
  __shared__ int seq_s, tile_s, kv_end_s;

  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int gid = lane / 4, tig = lane % 4;
  const int group = p.heads / p.kv_heads, g = blockIdx.y;

  // Which (sequence, row tile) this block is: tiles are numbered through the sequences with
  // more than tile_min_q tokens, in order; warp 0 scans the sequences 32 at a time.
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
      const unsigned hit = __ballot_sync(0xffffffffu, before + incl > static_cast<int>(blockIdx.x));
      const int first_of_lane = before + incl - n;
      if (hit != 0u) {
        const int src = __ffs(hit) - 1;
        seq = base + src;
        tile = static_cast<int>(blockIdx.x) - __shfl_sync(0xffffffffu, first_of_lane, src);
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
  const std::int32_t* table = p.block_tables + static_cast<std::size_t>(seq) * p.max_blocks_per_seq;
  const int mi = lane / 8, mr = lane % 8; // ldmatrix: matrix and row this lane addresses

  constexpr int E = tile_chunk<C>::elems;
  constexpr int per_row = HD / E;                           // 16-byte loads per K (or V) row
  constexpr int loads = tile_keys * per_row / tile_threads; // per thread and tile, for K and for V
  constexpr int batch = loads < 4 ? loads : 4;              // loads in flight at once
  static_assert(loads % batch == 0, "tile loads split into equal batches");

  for (int kv0 = 0; kv0 < kv_end; kv0 += tile_keys) {
    __syncthreads(); // every warp is done with the previous tile
#pragma unroll
    for (int b0 = 0; b0 < loads; b0 += batch) {
      uint4 kw[batch], vw[batch];
#pragma unroll
      for (int b = 0; b < batch; ++b) {
        const int i = threadIdx.x + (b0 + b) * tile_threads;
        const int pos = kv0 + i / per_row;
        kw[b] = vw[b] = make_uint4(0u, 0u, 0u, 0u); // past the context: zeros (masked, and 0 * V stays finite)
        if (pos < kv_end) {
          int blk, off;
          if (plan.block_shift >= 0) {
            blk = pos >> plan.block_shift;
            off = pos & (p.block_size - 1);
          } else {
            blk = pos / p.block_size;
            off = pos - blk * p.block_size;
          }
          const std::size_t src =
              ((static_cast<std::size_t>(table[blk]) * p.kv_heads + g) * p.block_size + off) * HD + (i % per_row) * E;
          kw[b] = __ldg(reinterpret_cast<const uint4*>(p.k_cache + src));
          vw[b] = __ldg(reinterpret_cast<const uint4*>(p.v_cache + src));
        }
      }
#pragma unroll
      for (int b = 0; b < batch; ++b) {
        const int i = threadIdx.x + (b0 + b) * tile_threads;
        const int dst = (i / per_row) * ld + (i % per_row) * E;
        tile_chunk<C>::store(k_s + dst, kw[b]);
        tile_chunk<C>::store(v_s + dst, vw[b]);
      }
    }
    __syncthreads();
    if (kv0 > warp_max_pos)
      continue; // causal: all of this warp's rows come before the tile

    // S = Q K^T for this warp's 16 rows and the tile's 64 positions.
    float s[tile_keys / 8][4];
#pragma unroll
    for (int nt = 0; nt < tile_keys / 8; ++nt)
      s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
#pragma unroll
    for (int ks = 0; ks < HD / 16; ++ks)
#pragma unroll
      for (int np = 0; np < tile_keys / 16; ++np) {
        std::uint32_t b[4]; // B of n-tiles 2np (b[0], b[1]) and 2np+1 (b[2], b[3])
        load_matrix_x4(b, k_s + (np * 16 + (mi >> 1) * 8 + mr) * ld + ks * 16 + (mi & 1) * 8);
        mma_bf16(s[2 * np], qf[ks], b[0], b[1]);
        mma_bf16(s[2 * np + 1], qf[ks], b[2], b[3]);
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
#pragma unroll
    for (int kk = 0; kk < tile_keys / 16; ++kk) {
      std::uint32_t ph[4], pl[4];
      split_pair(s[2 * kk][0], s[2 * kk][1], ph[0], pl[0]);
      split_pair(s[2 * kk][2], s[2 * kk][3], ph[1], pl[1]);
      split_pair(s[2 * kk + 1][0], s[2 * kk + 1][1], ph[2], pl[2]);
      split_pair(s[2 * kk + 1][2], s[2 * kk + 1][3], ph[3], pl[3]);
#pragma unroll
      for (int dp = 0; dp < HD / 16; ++dp) {
        std::uint32_t b[4]; // B of d n-tiles 2dp (b[0], b[1]) and 2dp+1 (b[2], b[3])
        load_matrix_x4_trans(b, v_s + (kk * 16 + (mi & 1) * 8 + mr) * ld + dp * 16 + (mi >> 1) * 8);
        mma_bf16(o[2 * dp], ph, b[0], b[1]);
        mma_bf16(o[2 * dp], pl, b[0], b[1]);
        mma_bf16(o[2 * dp + 1], ph, b[2], b[3]);
        mma_bf16(o[2 * dp + 1], pl, b[2], b[3]);
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
  const dim3 grid(static_cast<unsigned>(bound), p.kv_heads);
  if (p.head_dim == 64)
    prefill_tile_kernel<C, 64><<<grid, tile_threads, 0, stream>>>(p, plan);
  else if (p.head_dim == 128)
    prefill_tile_kernel<C, 128><<<grid, tile_threads, 0, stream>>>(p, plan);
  else
    return cudaErrorInvalidValue;
  return cudaGetLastError();
}

template cudaError_t launch_prefill_tiles<bf16>(const paged_attention_params<bf16, bf16>&, const attention_plan&,
                                                cudaStream_t);
template cudaError_t launch_prefill_tiles<__nv_fp8_e4m3>(const paged_attention_params<bf16, __nv_fp8_e4m3>&,
                                                         const attention_plan&, cudaStream_t);

} // namespace troupe::kernels::cuda::detail
