// The INT4-weight GEMV and the dequantize kernel. The GEMV is fp8_linear.cu's stream with a lane's
// unit one 16-byte vector of codes (32 weights of one row, inside one group since the group is a
// multiple of 32) against four 16-byte vectors of each row of x: `split` warps a row, every load
// of a round issued before any is used, codes kept out of L1, x and the group records read
// through it. Two codes at a time become fp16 by or-ing them into the mantissa of 1024 (exact),
// lose 1024 + zero in one fp16 subtraction (exact: the difference is an integer in [-15, 15]) and
// widen to fp32, where the products are summed.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "kernels/cuda/dependent_launch.cuh"
#include "kernels/cuda/int4_linear.hpp"
#include "kernels/cuda/numeric.cuh"

namespace troupe::kernels::cuda {

namespace {
constexpr int max_split = 8;
// As gemv.cu: a block is at least two warps, so that a launch of one warp a row spreads evenly.
constexpr int min_block_warps = 2;
constexpr int max_block_warps = max_split;

// 16 bytes of codes straight to registers, not kept in L1 (each byte is read once).
__device__ __forceinline__ uint4 load_streaming(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// The fp16 pair {1024 + zero, 1024 + zero}, which turns 1024 + code into code - zero.
__device__ __forceinline__ __half2 zero_offset(float zero) { return __float2half2_rn(1024.0f + zero); }

// Columns 2q and 2q + 1 of a word (int4_slot: their nibbles sit at bits 4q and 16 + 4q) minus the
// zero, as fp32.
template <int q>
__device__ __forceinline__ float2 pair_minus_zero(std::uint32_t word, __half2 offset) {
  const std::uint32_t biased = ((word >> (4 * q)) & 0x000f000fu) | 0x64006400u; // fp16 1024 + code, twice
  return __half22float2(__hsub2(*reinterpret_cast<const __half2*>(&biased), offset));
}

// The 8 columns of a word minus the zero, as fp32, in column order.
__device__ __forceinline__ void decode8(std::uint32_t word, __half2 offset, float* w) {
  const float2 a = pair_minus_zero<0>(word, offset), b = pair_minus_zero<1>(word, offset),
               c = pair_minus_zero<2>(word, offset), d = pair_minus_zero<3>(word, offset);
  w[0] = a.x, w[1] = a.y, w[2] = b.x, w[3] = b.y, w[4] = c.x, w[5] = c.y, w[6] = d.x, w[7] = d.y;
}

// A pair of E (bf16 or fp16) packed in a 32-bit word as fp32: a bf16 is the upper half of an fp32.
template <class E>
__device__ __forceinline__ float2 widen2(std::uint32_t a) {
  if constexpr (std::is_same_v<E, __nv_bfloat16>) {
    return make_float2(__uint_as_float(a << 16), __uint_as_float(a & 0xffff0000u));
  } else {
    static_assert(std::is_same_v<E, __half>, "the INT4 GEMV takes bf16 or fp16 activations");
    return __half22float2(*reinterpret_cast<const __half2*>(&a));
  }
}

// The dot product of 32 weights with 32 values of x (four 16-byte vectors).
template <class E>
__device__ __forceinline__ float dot32(const float (&w)[32], const uint4* x) {
  float acc = 0.0f;
#pragma unroll
  for (int v = 0; v < 4; ++v) {
    const uint4 xv = x[v];
    const std::uint32_t words[4] = {xv.x, xv.y, xv.z, xv.w};
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const float2 p = widen2<E>(words[q]);
      acc = fmaf(w[8 * v + 2 * q + 1], p.y, fmaf(w[8 * v + 2 * q], p.x, acc));
    }
  }
  return acc;
}

// M rows of x; `unroll` 16-byte code loads in flight per lane. `split` warps share an output row
// (a power of two up to max_block_warps): warp part p takes the row's 512-byte chunks p, p + split,
// ...; their sums meet in shared memory. A block holds max(split, min_block_warps) warps.
template <int M, int unroll, class E, class Out>
__global__ void __launch_bounds__(max_block_warps * 32)
    int4_gemv_kernel(const uint4* __restrict__ x, const uint4* __restrict__ codes, const float2* __restrict__ groups,
                     int group, const E* __restrict__ bias, Out* __restrict__ y, int n, int k, int split) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int rows_per_block = (blockDim.x >> 5) / split;
  const int row = blockIdx.x * rows_per_block + warp / split, part = warp % split;
  const int vectors = k / 32, x_vectors = k / 8; // 16-byte vectors in a row of codes, of x
  const int group_vectors = group / 32;          // vectors of codes a group covers
  const int first = 32 * part + lane, stride = 32 * split;
  const std::size_t clamped = static_cast<std::size_t>(row < n ? row : n - 1);
  const uint4* w_row = codes + clamped * vectors;
  const float2* row_groups = groups + clamped * (k / group);
  const bool stores = row < n && part == 0 && lane == 0;

  // The first round of codes and group records is requested before waiting on the kernel that
  // wrote x: nothing writes weights during a step. The bias too (see gemv.cu).
  uint4 wv[unroll];
  float2 gv[unroll];
#pragma unroll
  for (int u = 0; u < unroll; ++u) {
    const int v = first + stride * u;
    wv[u] = v < vectors ? load_streaming(w_row + v) : make_uint4(0, 0, 0, 0);
    gv[u] = v < vectors ? row_groups[v / group_vectors] : make_float2(0.0f, 0.0f);
  }
  const float b = bias != nullptr && stores ? detail::to_float(bias[row]) : 0.0f;
  detail::wait_for_previous_kernels();

  float acc[M];
#pragma unroll
  for (int m = 0; m < M; ++m)
    acc[m] = 0.0f;
  for (int base = first; base < vectors; base += stride * unroll) {
    if (base > first) {
#pragma unroll
      for (int u = 0; u < unroll; ++u) {
        const int v = base + stride * u;
        wv[u] = v < vectors ? load_streaming(w_row + v) : make_uint4(0, 0, 0, 0);
        gv[u] = v < vectors ? row_groups[v / group_vectors] : make_float2(0.0f, 0.0f);
      }
    }
#pragma unroll
    for (int u = 0; u < unroll; ++u) {
      const int v = base + stride * u;
      if (v < vectors) {
        const __half2 offset = zero_offset(gv[u].y);
        float w[32];
        decode8(wv[u].x, offset, w);
        decode8(wv[u].y, offset, w + 8);
        decode8(wv[u].z, offset, w + 16);
        decode8(wv[u].w, offset, w + 24);
#pragma unroll
        for (int m = 0; m < M; ++m)
          acc[m] = fmaf(dot32<E>(w, x + static_cast<std::size_t>(m) * x_vectors + 4 * v), gv[u].x, acc[m]);
      }
    }
  }
#pragma unroll
  for (int m = 0; m < M; ++m)
    acc[m] = detail::warp_sum(acc[m]);

  if (split > 1) { // the same for the whole block
    __shared__ float parts[max_block_warps][M];
    if (lane == 0) {
#pragma unroll
      for (int m = 0; m < M; ++m)
        parts[warp][m] = acc[m];
    }
    __syncthreads();
    if (part == 0 && lane == 0) {
      for (int p = 1; p < split; ++p) {
#pragma unroll
        for (int m = 0; m < M; ++m)
          acc[m] += parts[warp + p][m];
      }
    }
  }
  if (stores) {
#pragma unroll
    for (int m = 0; m < M; ++m)
      y[static_cast<std::size_t>(m) * n + row] = detail::from_float<Out>(acc[m] + b);
  }
}

template <int M, class E, class Out>
cudaError_t launch(const E* x, const int4_weight_view& w, const E* bias, Out* y, int n, int k, cudaStream_t stream) {
  // 8 loads of 16 bytes in flight per lane at one or two rows of x; fewer as the rows of x (and
  // their fp32 sums) take registers.
  constexpr int unroll = M <= 2 ? 8 : M <= 4 ? 4 : 2;
  const int split = int4_gemv_split(k);
  const int block_warps = split > min_block_warps ? split : min_block_warps;
  const int rows_per_block = block_warps / split;
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(static_cast<unsigned>((n + rows_per_block - 1) / rows_per_block));
  config.blockDim = dim3(static_cast<unsigned>(block_warps * 32));
  config.stream = stream;
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  config.attrs = &attribute;
  config.numAttrs = 1;
  return cudaLaunchKernelEx(&config, int4_gemv_kernel<M, unroll, E, Out>, reinterpret_cast<const uint4*>(x),
                            reinterpret_cast<const uint4*>(w.codes), w.groups, w.group, bias, y, n, k, split);
}

template <class E>
__device__ __forceinline__ std::uint32_t pack2(float lo, float hi) {
  if constexpr (std::is_same_v<E, __nv_bfloat16>)
    return __bfloat16_as_ushort(__float2bfloat16_rn(lo)) |
           static_cast<std::uint32_t>(__bfloat16_as_ushort(__float2bfloat16_rn(hi))) << 16;
  else
    return __half_as_ushort(__float2half_rn(lo)) | static_cast<std::uint32_t>(__half_as_ushort(__float2half_rn(hi)))
                                                       << 16;
}

// 8 values rounded to E, stored to 16-byte aligned memory.
template <class E>
__device__ __forceinline__ void store8(const float (&v)[8], E* out) {
  if constexpr (std::is_same_v<E, float>) {
    reinterpret_cast<float4*>(out)[0] = make_float4(v[0], v[1], v[2], v[3]);
    reinterpret_cast<float4*>(out)[1] = make_float4(v[4], v[5], v[6], v[7]);
  } else {
    *reinterpret_cast<uint4*>(out) =
        make_uint4(pack2<E>(v[0], v[1]), pack2<E>(v[2], v[3]), pack2<E>(v[4], v[5]), pack2<E>(v[6], v[7]));
  }
}

// out[n, k] = the dequantized weight; each thread one word (8 columns) an iteration, grid-stride;
// 16-byte stores where `vectorized` (out 16-byte aligned).
template <bool vectorized, class E>
__global__ void dequantize_kernel(const std::uint32_t* __restrict__ codes, const float2* __restrict__ groups,
                                  int group, E* __restrict__ out, std::size_t words, int k) {
  const int words_a_row = k / 8, groups_a_row = k / group;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < words;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const std::size_t row = i / words_a_row;
    const int word = static_cast<int>(i - row * words_a_row);
    const float2 g = groups[row * groups_a_row + 8 * word / group];
    float w[8];
    decode8(codes[i], zero_offset(g.y), w);
#pragma unroll
    for (int j = 0; j < 8; ++j)
      w[j] *= g.x;
    if constexpr (vectorized) {
      store8(w, out + 8 * i);
    } else {
#pragma unroll
      for (int j = 0; j < 8; ++j)
        out[8 * i + j] = detail::from_float<E>(w[j]);
    }
  }
}
} // namespace

int int4_gemv_split(int k) noexcept {
  const int vectors = k / 32;
  int split = 1;
  while (split < max_split && vectors >= 2 * split * 32 * 2)
    split *= 2;
  return split;
}

bool int4_gemv_applies(const void* x, const int4_weight_view& w, int m, int n, int k) noexcept {
  const auto address = [](const void* p) { return reinterpret_cast<std::uintptr_t>(p); };
  return m >= 1 && m <= int4_gemv_max_rows && n >= 1 && k >= 32 && k % 32 == 0 && w.group >= 32 &&
         w.group % 32 == 0 && k % w.group == 0 && w.groups != nullptr && w.codes != nullptr &&
         (address(x) | address(w.codes)) % 16 == 0 && address(w.groups) % 8 == 0;
}

template <class Out, class E>
cudaError_t int4_gemv(const E* x, const int4_weight_view& w, const E* bias, Out* y, int m, int n, int k,
                      cudaStream_t stream) {
  if (!int4_gemv_applies(x, w, m, n, k))
    return cudaErrorInvalidValue;
  static_assert(int4_gemv_max_rows == 8, "one instantiation per row count");
  switch (m) {
    case 1:
      return launch<1>(x, w, bias, y, n, k, stream);
    case 2:
      return launch<2>(x, w, bias, y, n, k, stream);
    case 3:
      return launch<3>(x, w, bias, y, n, k, stream);
    case 4:
      return launch<4>(x, w, bias, y, n, k, stream);
    case 5:
      return launch<5>(x, w, bias, y, n, k, stream);
    case 6:
      return launch<6>(x, w, bias, y, n, k, stream);
    case 7:
      return launch<7>(x, w, bias, y, n, k, stream);
    default:
      return launch<8>(x, w, bias, y, n, k, stream);
  }
}

template <class E>
cudaError_t dequantize_int4(const int4_weight_view& w, E* out, int n, int k, cudaStream_t stream) {
  if (k < 8 || k % 8 != 0 || w.group < 8 || w.group % 8 != 0 || k % w.group != 0 || n < 1 || w.codes == nullptr ||
      w.groups == nullptr || out == nullptr)
    return cudaErrorInvalidValue;
  constexpr int threads = 256;
  const bool vectorized = reinterpret_cast<std::uintptr_t>(out) % 16 == 0;
  const std::size_t words = static_cast<std::size_t>(n) * (k / 8);
  // Enough blocks to fill the GPU several times over; the grid-stride loop takes the rest.
  const std::size_t blocks = (words + threads - 1) / threads;
  const unsigned grid = static_cast<unsigned>(blocks < 65536 ? blocks : 65536);
  if (vectorized)
    dequantize_kernel<true><<<grid, threads, 0, stream>>>(w.codes, w.groups, w.group, out, words, k);
  else
    dequantize_kernel<false><<<grid, threads, 0, stream>>>(w.codes, w.groups, w.group, out, words, k);
  return cudaGetLastError();
}

template cudaError_t int4_gemv<__nv_bfloat16, __nv_bfloat16>(const __nv_bfloat16*, const int4_weight_view&,
                                                             const __nv_bfloat16*, __nv_bfloat16*, int, int, int,
                                                             cudaStream_t);
template cudaError_t int4_gemv<float, __nv_bfloat16>(const __nv_bfloat16*, const int4_weight_view&,
                                                     const __nv_bfloat16*, float*, int, int, int, cudaStream_t);
template cudaError_t int4_gemv<__half, __half>(const __half*, const int4_weight_view&, const __half*, __half*, int,
                                               int, int, cudaStream_t);
template cudaError_t int4_gemv<float, __half>(const __half*, const int4_weight_view&, const __half*, float*, int, int,
                                              int, cudaStream_t);
template cudaError_t dequantize_int4<float>(const int4_weight_view&, float*, int, int, cudaStream_t);
template cudaError_t dequantize_int4<__nv_bfloat16>(const int4_weight_view&, __nv_bfloat16*, int, int, cudaStream_t);
template cudaError_t dequantize_int4<__half>(const int4_weight_view&, __half*, int, int, cudaStream_t);

} // namespace troupe::kernels::cuda
