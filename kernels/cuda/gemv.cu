// The small-batch GEMV: `split` warps per output row n (gemv_split). Each lane walks its
// 16-byte weight vectors in rounds of `unroll`, with every load of a round issued before any is
// used; the m rows of x are read at the same offsets (through L1, which keeps them: x is at
// most 4 x 28 KB and every warp of the SM reads all of it). Weight loads skip L1 (each byte is
// read once). A warp's fp32 partial sums meet in a butterfly, a row's warps in shared memory.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "kernels/cuda/dependent_launch.cuh"
#include "kernels/cuda/weight_stream.cuh"
#include "kernels/cuda/gemv.hpp"
#include "kernels/cuda/numeric.cuh"

namespace troupe::kernels::cuda {

namespace {
// A block is at least two warps, so that at one row a warp 5,120 rows (o, down) spread 20 : 19
// blocks over 132 SMs rather than 5 : 4 at 8 warps (H200: down 49.4 -> 48.1 us).
constexpr int min_block_warps = 2;
constexpr int max_block_warps = gemv_max_split;


// The dot product of two pairs of E (bf16 or fp16) packed in 32-bit words, added to acc in fp32.
// A bf16 is the upper half of an fp32, so widening is a shift or a mask; an fp16 pair widens in
// one conversion each.
template <class E>
__device__ __forceinline__ float dot2(std::uint32_t a, std::uint32_t b, float acc) {
  if constexpr (std::is_same_v<E, __nv_bfloat16>) {
    acc = fmaf(__uint_as_float(a << 16), __uint_as_float(b << 16), acc);
    return fmaf(__uint_as_float(a & 0xffff0000u), __uint_as_float(b & 0xffff0000u), acc);
  } else {
    static_assert(std::is_same_v<E, __half>, "the GEMV takes bf16 or fp16");
    const float2 fa = __half22float2(*reinterpret_cast<const __half2*>(&a));
    const float2 fb = __half22float2(*reinterpret_cast<const __half2*>(&b));
    return fmaf(fa.y, fb.y, fmaf(fa.x, fb.x, acc));
  }
}

template <class E>
__device__ __forceinline__ float dot8(const uint4& a, const uint4& b, float acc) {
  acc = dot2<E>(a.x, b.x, acc);
  acc = dot2<E>(a.y, b.y, acc);
  acc = dot2<E>(a.z, b.z, acc);
  return dot2<E>(a.w, b.w, acc);
}

template <class Out>
__device__ __forceinline__ void store(Out* y, float v) {
  *y = detail::from_float<Out>(v);
}

// M rows of x; `unroll` 16-byte weight loads in flight per lane. `split` warps share an output
// row (a power of two up to max_block_warps): warp part p of a row takes the row's 512-byte
// chunks p, p + split, p + 2 split, ..., so together they read it front to back; their sums
// meet in shared memory. A block holds max(split, min_block_warps) warps.
template <int M, int unroll, class E, class Out>
__global__ void __launch_bounds__(max_block_warps * 32)
    gemv_kernel(const uint4* __restrict__ x, const uint4* __restrict__ w, const E* __restrict__ bias,
                Out* __restrict__ y, int n, int k, int split) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int rows_per_block = (blockDim.x >> 5) / split;
  const int row = blockIdx.x * rows_per_block + warp / split, part = warp % split;
  const int vectors = k / 8; // 16-byte vectors in a row of x or w
  const int first = 32 * part + lane, stride = 32 * split; // this lane's vectors: first + stride * i
  const uint4* w_row = w + static_cast<std::size_t>(row < n ? row : n - 1) * vectors;
  const bool stores = row < n && part == 0 && lane == 0;

  // The first round of weights is requested before waiting on the kernel that wrote x:
  // nothing writes weights during a step.
  uint4 wv[unroll];
#pragma unroll
  for (int u = 0; u < unroll; ++u) {
    const int v = first + stride * u;
    wv[u] = v < vectors ? detail::load_streaming(w_row + v) : make_uint4(0, 0, 0, 0);
  }
  // The bias too (a weight), now: read after the sum, it would add a memory round trip to every
  // block's life, which at one round of weight loads a block is ~20 % more time (H200, measured
  // on an epilogue read of y in bench/results/2026-12-02-h200-norms-in-gemv).
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
        wv[u] = v < vectors ? detail::load_streaming(w_row + v) : make_uint4(0, 0, 0, 0);
      }
    }
#pragma unroll
    for (int u = 0; u < unroll; ++u) {
      const int v = base + stride * u;
      if (v < vectors) {
#pragma unroll
        for (int m = 0; m < M; ++m)
          acc[m] = dot8<E>(wv[u], x[static_cast<std::size_t>(m) * vectors + v], acc[m]);
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
      store(y + static_cast<std::size_t>(m) * n + row, acc[m] + b);
  }
}

template <int M, class E, class Out>
cudaError_t launch(const E* x, const E* w, const E* bias, Out* y, int n, int k, int split, cudaStream_t stream) {
  // 8 loads of 16 bytes in flight per lane at one row of x; fewer as the rows of x add registers.
  constexpr int unroll = M <= 2 ? 8 : 4;
  const int block_warps = split > min_block_warps ? split : min_block_warps;
  const int rows_per_block = block_warps / split;
  return detail::launch_dependent(gemv_kernel<M, unroll, E, Out>,
                                  static_cast<unsigned>((n + rows_per_block - 1) / rows_per_block),
                                  static_cast<unsigned>(block_warps * 32), stream, reinterpret_cast<const uint4*>(x),
                                  reinterpret_cast<const uint4*>(w), bias, y, n, k, split);
}

template <class E, class Out>
cudaError_t dispatch(const E* x, const E* w, const E* bias, Out* y, int m, int n, int k, cudaStream_t stream,
                     int split) {
  if (!gemv_applies(x, w, m, n, k) || split < 1 || split > gemv_max_split || (split & (split - 1)) != 0)
    return cudaErrorInvalidValue;
  static_assert(gemv_max_rows == 4, "one instantiation per row count");
  switch (m) {
    case 1:
      return launch<1>(x, w, bias, y, n, k, split, stream);
    case 2:
      return launch<2>(x, w, bias, y, n, k, split, stream);
    case 3:
      return launch<3>(x, w, bias, y, n, k, split, stream);
    default:
      return launch<4>(x, w, bias, y, n, k, split, stream);
  }
}
} // namespace

bool gemv_preferred(int m, int, int) noexcept {
  return m == 1;
}

int gemv_split(int k) noexcept {
  const int vectors = k / 8;
  int split = 1;
  while (split < gemv_max_split && vectors >= 2 * split * 32 * 4)
    split *= 2;
  return split;
}

bool gemv_applies(const void* x, const void* w, int m, int n, int k) noexcept {
  const auto address = [](const void* p) { return reinterpret_cast<std::uintptr_t>(p); };
  return m >= 1 && m <= gemv_max_rows && n >= 1 && k >= 8 && k % 8 == 0 && (address(x) | address(w)) % 16 == 0;
}

template <class Out, class E>
cudaError_t gemv(const E* x, const E* w, Out* y, int m, int n, int k, cudaStream_t stream, int split) {
  return dispatch(x, w, static_cast<const E*>(nullptr), y, m, n, k, stream, split);
}

template <class Out, class E>
cudaError_t gemv(const E* x, const E* w, Out* y, int m, int n, int k, cudaStream_t stream) {
  return dispatch(x, w, static_cast<const E*>(nullptr), y, m, n, k, stream, gemv_split(k));
}

template <class Out, class E>
cudaError_t gemv(const E* x, const E* w, const E* bias, Out* y, int m, int n, int k, cudaStream_t stream) {
  return dispatch(x, w, bias, y, m, n, k, stream, gemv_split(k));
}

#define TROUPE_INSTANTIATE(E, Out)                                                               \
  template cudaError_t gemv<Out, E>(const E*, const E*, Out*, int, int, int, cudaStream_t);      \
  template cudaError_t gemv<Out, E>(const E*, const E*, Out*, int, int, int, cudaStream_t, int); \
  template cudaError_t gemv<Out, E>(const E*, const E*, const E*, Out*, int, int, int, cudaStream_t);
TROUPE_INSTANTIATE(__nv_bfloat16, __nv_bfloat16)
TROUPE_INSTANTIATE(__nv_bfloat16, float)
TROUPE_INSTANTIATE(__half, __half)
TROUPE_INSTANTIATE(__half, float)
#undef TROUPE_INSTANTIATE

} // namespace troupe::kernels::cuda
