// The FP8-weight GEMV and the dequantize kernel. The GEMV is gemv.cu's stream with a lane's unit
// one 16-byte vector of codes (16 weights of one row, inside one scale group since group is a
// multiple of 16) against two 16-byte vectors of each row of x: `split` warps a row, every load of a
// round issued before any is used, codes kept out of L1, x and the scales read through it. Pairs
// of codes widen through the hardware e4m3x2 -> f16x2 conversion (exact), then to fp32.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <type_traits>

#include "kernels/cuda/dependent_launch.cuh"
#include "kernels/cuda/weight_stream.cuh"
#include "kernels/cuda/fp8_linear.hpp"
#include "kernels/cuda/numeric.cuh"

namespace troupe::kernels::cuda {

namespace {
constexpr int max_split = 8;
// As gemv.cu: a block is at least two warps, so that a launch of one warp a row spreads evenly.
constexpr int min_block_warps = 2;
constexpr int max_block_warps = max_split;


// Two e4m3 codes (the low byte first) as fp32, exactly: e4m3 -> fp16 is exact and one instruction.
__device__ __forceinline__ float2 e4m3x2_to_float2(std::uint32_t pair) {
  const __half2_raw raw = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(pair & 0xffffu), __NV_E4M3);
  return __half22float2(__half2(raw));
}

// The 16 codes of a vector as fp32, in column order.
__device__ __forceinline__ void decode16(const uint4& c, float (&w)[16]) {
  const std::uint32_t words[4] = {c.x, c.y, c.z, c.w};
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const float2 lo = e4m3x2_to_float2(words[q]), hi = e4m3x2_to_float2(words[q] >> 16);
    w[4 * q] = lo.x;
    w[4 * q + 1] = lo.y;
    w[4 * q + 2] = hi.x;
    w[4 * q + 3] = hi.y;
  }
}

// A pair of E (bf16 or fp16) packed in a 32-bit word as fp32: a bf16 is the upper half of an fp32.
template <class E>
__device__ __forceinline__ float2 widen2(std::uint32_t a) {
  if constexpr (std::is_same_v<E, __nv_bfloat16>) {
    return make_float2(__uint_as_float(a << 16), __uint_as_float(a & 0xffff0000u));
  } else {
    static_assert(std::is_same_v<E, __half>, "the FP8 GEMV takes bf16 or fp16 activations");
    return __half22float2(*reinterpret_cast<const __half2*>(&a));
  }
}

// acc + the dot product of 16 weights with 16 values of x (two 16-byte vectors, a then b).
template <class E>
__device__ __forceinline__ float dot16(const float (&w)[16], const uint4& a, const uint4& b, float acc) {
  const std::uint32_t words[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
  for (int q = 0; q < 8; ++q) {
    const float2 v = widen2<E>(words[q]);
    acc = fmaf(w[2 * q + 1], v.y, fmaf(w[2 * q], v.x, acc));
  }
  return acc;
}

// M rows of x; `unroll` 16-byte code loads in flight per lane. `row_scale`: group == k, the row's
// sum is scaled once at the end; otherwise each vector's 16-term sum is scaled by its group's
// scale before it joins the row's. `split` warps share an output row (a power of two up to
// max_block_warps): warp part p takes the row's 512-byte chunks p, p + split, ...; their sums
// meet in shared memory. A block holds max(split, min_block_warps) warps.
template <int M, int unroll, bool row_scale, class E, class Out>
__global__ void __launch_bounds__(max_block_warps * 32)
    fp8_gemv_kernel(const uint4* __restrict__ x, const uint4* __restrict__ codes, const float* __restrict__ scales,
                    int group, const E* __restrict__ bias, Out* __restrict__ y, int n, int k, int split) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int rows_per_block = (blockDim.x >> 5) / split;
  const int row = blockIdx.x * rows_per_block + warp / split, part = warp % split;
  const int vectors = k / 16, x_vectors = k / 8; // 16-byte vectors in a row of codes, of x
  const int group_vectors = group / 16;          // vectors of codes a scale covers
  const int first = 32 * part + lane, stride = 32 * split;
  const std::size_t clamped = static_cast<std::size_t>(row < n ? row : n - 1);
  const uint4* w_row = codes + clamped * vectors;
  const float* row_scales = scales + clamped * (k / group);
  const bool stores = row < n && part == 0 && lane == 0;

  // The first round of codes and scales is requested before waiting on the kernel that wrote x:
  // nothing writes weights during a step. The bias and a row's one scale too (see gemv.cu).
  uint4 wv[unroll];
  float sv[unroll];
#pragma unroll
  for (int u = 0; u < unroll; ++u) {
    const int v = first + stride * u;
    wv[u] = v < vectors ? detail::load_streaming(w_row + v) : make_uint4(0, 0, 0, 0);
    if constexpr (!row_scale)
      sv[u] = v < vectors ? row_scales[v / group_vectors] : 0.0f;
  }
  const float b = bias != nullptr && stores ? detail::to_float(bias[row]) : 0.0f;
  const float s = row_scale && stores ? row_scales[0] : 1.0f;
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
        wv[u] = v < vectors ? detail::load_streaming(w_row + v) : make_uint4(0, 0, 0, 0);
        if constexpr (!row_scale)
          sv[u] = v < vectors ? row_scales[v / group_vectors] : 0.0f;
      }
    }
#pragma unroll
    for (int u = 0; u < unroll; ++u) {
      const int v = base + stride * u;
      if (v < vectors) {
        float w[16];
        decode16(wv[u], w);
#pragma unroll
        for (int m = 0; m < M; ++m) {
          const uint4* xm = x + static_cast<std::size_t>(m) * x_vectors + 2 * v;
          if constexpr (row_scale)
            acc[m] = dot16<E>(w, xm[0], xm[1], acc[m]);
          else
            acc[m] = fmaf(dot16<E>(w, xm[0], xm[1], 0.0f), sv[u], acc[m]);
        }
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
      y[static_cast<std::size_t>(m) * n + row] = detail::from_float<Out>(fmaf(acc[m], s, b));
  }
}

template <int M, bool row_scale, class E, class Out>
cudaError_t launch(const E* x, const fp8_weight_view& w, const E* bias, Out* y, int n, int k, cudaStream_t stream) {
  // 8 loads of 16 bytes in flight per lane at one or two rows of x; fewer as the rows of x (and
  // their fp32 sums) take registers.
  constexpr int unroll = M <= 2 ? 8 : M <= 4 ? 4 : 2;
  const int split = fp8_gemv_split(k);
  const int block_warps = split > min_block_warps ? split : min_block_warps;
  const int rows_per_block = block_warps / split;
  return detail::launch_dependent(fp8_gemv_kernel<M, unroll, row_scale, E, Out>,
                                  static_cast<unsigned>((n + rows_per_block - 1) / rows_per_block),
                                  static_cast<unsigned>(block_warps * 32), stream, reinterpret_cast<const uint4*>(x),
                                  reinterpret_cast<const uint4*>(w.codes), w.scales, w.group, bias, y, n, k, split);
}

template <int M, class E, class Out>
cudaError_t launch_rows(const E* x, const fp8_weight_view& w, const E* bias, Out* y, int n, int k,
                        cudaStream_t stream) {
  return w.group == k ? launch<M, true>(x, w, bias, y, n, k, stream) : launch<M, false>(x, w, bias, y, n, k, stream);
}

// 16 values rounded to E, stored to 16-byte aligned memory in 16-byte vectors.
__device__ __forceinline__ void store16(const float (&v)[16], float* out) {
#pragma unroll
  for (int q = 0; q < 4; ++q)
    reinterpret_cast<float4*>(out)[q] = make_float4(v[4 * q], v[4 * q + 1], v[4 * q + 2], v[4 * q + 3]);
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
template <class E>
__device__ __forceinline__ void store16(const float (&v)[16], E* out) {
#pragma unroll
  for (int q = 0; q < 2; ++q)
    reinterpret_cast<uint4*>(out)[q] =
        make_uint4(pack2<E>(v[8 * q], v[8 * q + 1]), pack2<E>(v[8 * q + 2], v[8 * q + 3]),
                   pack2<E>(v[8 * q + 4], v[8 * q + 5]), pack2<E>(v[8 * q + 6], v[8 * q + 7]));
}

// out[n, k] = the dequantized weight; each thread 16 codes (one 16-byte vector where `vectorized`:
// codes and out 16-byte aligned) an iteration, grid-stride.
template <bool vectorized, class E>
__global__ void dequantize_kernel(const std::uint8_t* __restrict__ codes, const float* __restrict__ scales, int group,
                                  E* __restrict__ out, std::size_t units, int k) {
  const int units_a_row = k / 16, group_units = group / 16, groups_a_row = k / group;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < units;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const std::size_t row = i / units_a_row;
    const int unit = static_cast<int>(i - row * units_a_row);
    const float s = scales[row * groups_a_row + unit / group_units];
    float w[16];
    if constexpr (vectorized) {
      decode16(reinterpret_cast<const uint4*>(codes)[i], w);
    } else {
#pragma unroll
      for (int j = 0; j < 16; j += 2) {
        const float2 pair =
            e4m3x2_to_float2(codes[16 * i + j] | static_cast<std::uint32_t>(codes[16 * i + j + 1]) << 8);
        w[j] = pair.x;
        w[j + 1] = pair.y;
      }
    }
#pragma unroll
    for (int j = 0; j < 16; ++j)
      w[j] *= s;
    if constexpr (vectorized) {
      store16(w, out + 16 * i);
    } else {
#pragma unroll
      for (int j = 0; j < 16; ++j)
        out[16 * i + j] = detail::from_float<E>(w[j]);
    }
  }
}

// Any k and any group that divides it (a layer whose width is not vectors of 16, as stories260k's
// down_proj with k = 172): one element a thread, the same value as the kernel above gives.
template <class E>
__global__ void dequantize_elements_kernel(const std::uint8_t* __restrict__ codes, const float* __restrict__ scales,
                                           int group, E* __restrict__ out, std::size_t count, int k) {
  const int groups_a_row = k / group;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const std::size_t row = i / k;
    const int column = static_cast<int>(i - row * k);
    const float w = e4m3x2_to_float2(codes[i]).x;
    out[i] = detail::from_float<E>(w * scales[row * groups_a_row + column / group]);
  }
}

bool group_fits(int group, int k) noexcept {
  return k >= 16 && k % 16 == 0 && group >= 16 && group % 16 == 0 && k % group == 0;
}
} // namespace

int fp8_gemv_split(int k) noexcept {
  const int vectors = k / 16;
  int split = 1;
  while (split < max_split && vectors >= 2 * split * 32 * 4)
    split *= 2;
  return split;
}

bool fp8_gemv_applies(const void* x, const fp8_weight_view& w, int m, int n, int k) noexcept {
  const auto address = [](const void* p) { return reinterpret_cast<std::uintptr_t>(p); };
  return m >= 1 && m <= fp8_gemv_max_rows && n >= 1 && group_fits(w.group, k) && w.scales != nullptr &&
         (address(x) | address(w.codes)) % 16 == 0;
}

template <class Out, class E>
cudaError_t fp8_gemv(const E* x, const fp8_weight_view& w, const E* bias, Out* y, int m, int n, int k,
                     cudaStream_t stream) {
  if (!fp8_gemv_applies(x, w, m, n, k))
    return cudaErrorInvalidValue;
  static_assert(fp8_gemv_max_rows == 8, "one instantiation per row count");
  switch (m) {
    case 1:
      return launch_rows<1>(x, w, bias, y, n, k, stream);
    case 2:
      return launch_rows<2>(x, w, bias, y, n, k, stream);
    case 3:
      return launch_rows<3>(x, w, bias, y, n, k, stream);
    case 4:
      return launch_rows<4>(x, w, bias, y, n, k, stream);
    case 5:
      return launch_rows<5>(x, w, bias, y, n, k, stream);
    case 6:
      return launch_rows<6>(x, w, bias, y, n, k, stream);
    case 7:
      return launch_rows<7>(x, w, bias, y, n, k, stream);
    default:
      return launch_rows<8>(x, w, bias, y, n, k, stream);
  }
}

template <class E>
cudaError_t dequantize_fp8(const fp8_weight_view& w, E* out, int n, int k, cudaStream_t stream) {
  if (k < 1 || w.group < 1 || k % w.group != 0 || n < 1 || w.codes == nullptr || w.scales == nullptr ||
      out == nullptr)
    return cudaErrorInvalidValue;
  constexpr int threads = 256;
  if (!group_fits(w.group, k)) {
    const std::size_t count = static_cast<std::size_t>(n) * k;
    const std::size_t blocks = (count + threads - 1) / threads;
    dequantize_elements_kernel<<<static_cast<unsigned>(blocks < 65536 ? blocks : 65536), threads, 0, stream>>>(
        w.codes, w.scales, w.group, out, count, k);
    return cudaGetLastError();
  }
  const auto address = [](const void* p) { return reinterpret_cast<std::uintptr_t>(p); };
  const bool vectorized = (address(w.codes) | address(out)) % 16 == 0;
  const std::size_t units = static_cast<std::size_t>(n) * (k / 16);
  // Enough blocks to fill the GPU several times over; the grid-stride loop takes the rest.
  const std::size_t blocks = (units + threads - 1) / threads;
  const unsigned grid = static_cast<unsigned>(blocks < 65536 ? blocks : 65536);
  if (vectorized)
    dequantize_kernel<true><<<grid, threads, 0, stream>>>(w.codes, w.scales, w.group, out, units, k);
  else
    dequantize_kernel<false><<<grid, threads, 0, stream>>>(w.codes, w.scales, w.group, out, units, k);
  return cudaGetLastError();
}

template cudaError_t fp8_gemv<__nv_bfloat16, __nv_bfloat16>(const __nv_bfloat16*, const fp8_weight_view&,
                                                            const __nv_bfloat16*, __nv_bfloat16*, int, int, int,
                                                            cudaStream_t);
template cudaError_t fp8_gemv<float, __nv_bfloat16>(const __nv_bfloat16*, const fp8_weight_view&, const __nv_bfloat16*,
                                                    float*, int, int, int, cudaStream_t);
template cudaError_t fp8_gemv<__half, __half>(const __half*, const fp8_weight_view&, const __half*, __half*, int, int,
                                              int, cudaStream_t);
template cudaError_t fp8_gemv<float, __half>(const __half*, const fp8_weight_view&, const __half*, float*, int, int,
                                             int, cudaStream_t);
template cudaError_t dequantize_fp8<float>(const fp8_weight_view&, float*, int, int, cudaStream_t);
template cudaError_t dequantize_fp8<__nv_bfloat16>(const fp8_weight_view&, __nv_bfloat16*, int, int, cudaStream_t);
template cudaError_t dequantize_fp8<__half>(const fp8_weight_view&, __half*, int, int, cudaStream_t);

} // namespace troupe::kernels::cuda
