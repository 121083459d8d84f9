// The small-batch GEMV: one warp per output row n. Each lane walks the row's 16-byte weight
// vectors lane, lane + 32, ... in rounds of `unroll`, with every load of a round issued before
// any is used; the m rows of x are read at the same offsets (through L1, which keeps them:
// x is at most 4 x 27 KB and every warp of the SM reads all of it). Weight loads skip L1
// (each byte is read once). The lanes' fp32 partial sums meet in a butterfly.
#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/cuda/dependent_launch.cuh"
#include "kernels/cuda/gemv.hpp"
#include "kernels/cuda/numeric.cuh"

namespace troupe::kernels::cuda {

namespace {
// Two warps a block, so that 5,120 rows (o, down) spread 20 : 19 blocks over 132 SMs rather
// than 5 : 4 at 8 warps. Measured (H200): down 49.4 -> 48.1 us, o and gate/up unchanged.
constexpr int warps_per_block = 2;

// 16 bytes of weights straight to registers, not kept in L1.
__device__ __forceinline__ uint4 load_streaming(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// The dot product of two pairs of bf16 packed in 32-bit words, added to acc in fp32.
// A bf16 is the upper half of an fp32, so widening is a shift or a mask.
__device__ __forceinline__ float dot2(std::uint32_t a, std::uint32_t b, float acc) {
  acc = fmaf(__uint_as_float(a << 16), __uint_as_float(b << 16), acc);
  return fmaf(__uint_as_float(a & 0xffff0000u), __uint_as_float(b & 0xffff0000u), acc);
}

__device__ __forceinline__ float dot8(const uint4& a, const uint4& b, float acc) {
  acc = dot2(a.x, b.x, acc);
  acc = dot2(a.y, b.y, acc);
  acc = dot2(a.z, b.z, acc);
  return dot2(a.w, b.w, acc);
}

template <class Out>
__device__ __forceinline__ void store(Out* y, float v) {
  *y = detail::from_float<Out>(v);
}

// M rows of x; `unroll` 16-byte weight loads in flight per lane.
template <int M, int unroll, class Out>
__global__ void __launch_bounds__(warps_per_block * 32)
    gemv_kernel(const uint4* __restrict__ x, const uint4* __restrict__ w, Out* __restrict__ y, int n, int k) {
  const int lane = threadIdx.x & 31;
  const int row = blockIdx.x * warps_per_block + (threadIdx.x >> 5);
  const int vectors = k / 8; // 16-byte vectors in a row of x or w
  const uint4* w_row = w + static_cast<std::size_t>(row < n ? row : n - 1) * vectors;

  // The first round of weights is requested before waiting on the kernel that wrote x:
  // nothing writes weights during a step.
  uint4 wv[unroll];
#pragma unroll
  for (int u = 0; u < unroll; ++u) {
    const int v = lane + 32 * u;
    wv[u] = v < vectors ? load_streaming(w_row + v) : make_uint4(0, 0, 0, 0);
  }
  detail::wait_for_previous_kernels();
  if (row >= n)
    return;

  float acc[M];
#pragma unroll
  for (int m = 0; m < M; ++m)
    acc[m] = 0.0f;
  for (int base = 0; base < vectors; base += 32 * unroll) {
    if (base > 0) {
#pragma unroll
      for (int u = 0; u < unroll; ++u) {
        const int v = base + lane + 32 * u;
        wv[u] = v < vectors ? load_streaming(w_row + v) : make_uint4(0, 0, 0, 0);
      }
    }
#pragma unroll
    for (int u = 0; u < unroll; ++u) {
      const int v = base + lane + 32 * u;
      if (v < vectors) {
#pragma unroll
        for (int m = 0; m < M; ++m)
          acc[m] = dot8(wv[u], x[static_cast<std::size_t>(m) * vectors + v], acc[m]);
      }
    }
  }
#pragma unroll
  for (int m = 0; m < M; ++m)
    acc[m] = detail::warp_sum(acc[m]);
  if (lane == 0) {
#pragma unroll
    for (int m = 0; m < M; ++m)
      store(y + static_cast<std::size_t>(m) * n + row, acc[m]);
  }
}

template <int M, class Out>
cudaError_t launch(const __nv_bfloat16* x, const __nv_bfloat16* w, Out* y, int n, int k, cudaStream_t stream) {
  // 8 loads of 16 bytes in flight per lane at one row of x; fewer as the rows of x add registers.
  constexpr int unroll = M <= 2 ? 8 : 4;
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(static_cast<unsigned>((n + warps_per_block - 1) / warps_per_block));
  config.blockDim = dim3(warps_per_block * 32);
  config.stream = stream;
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  config.attrs = &attribute;
  config.numAttrs = 1;
  return cudaLaunchKernelEx(&config, gemv_kernel<M, unroll, Out>, reinterpret_cast<const uint4*>(x),
                            reinterpret_cast<const uint4*>(w), y, n, k);
}
} // namespace

bool gemv_preferred(int m, int n, int k) noexcept {
  return m == 1 && n >= 4 * k;
}

bool gemv_applies(const void* x, const void* w, int m, int n, int k) noexcept {
  const auto address = [](const void* p) { return reinterpret_cast<std::uintptr_t>(p); };
  return m >= 1 && m <= gemv_max_rows && n >= 1 && k >= 8 && k % 8 == 0 && (address(x) | address(w)) % 16 == 0;
}

template <class Out>
cudaError_t gemv(const __nv_bfloat16* x, const __nv_bfloat16* w, Out* y, int m, int n, int k, cudaStream_t stream) {
  if (!gemv_applies(x, w, m, n, k))
    return cudaErrorInvalidValue;
  static_assert(gemv_max_rows == 4, "one instantiation per row count");
  switch (m) {
    case 1:
      return launch<1>(x, w, y, n, k, stream);
    case 2:
      return launch<2>(x, w, y, n, k, stream);
    case 3:
      return launch<3>(x, w, y, n, k, stream);
    default:
      return launch<4>(x, w, y, n, k, stream);
  }
}

template cudaError_t gemv<__nv_bfloat16>(const __nv_bfloat16*, const __nv_bfloat16*, __nv_bfloat16*, int, int, int,
                                         cudaStream_t);
template cudaError_t gemv<float>(const __nv_bfloat16*, const __nv_bfloat16*, float*, int, int, int, cudaStream_t);

} // namespace troupe::kernels::cuda
