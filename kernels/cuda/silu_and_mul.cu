// SwiGLU: an element-wise grid over [rows, inter] in packs of V elements (16 bytes of bf16
// or fp32 where inter and the pointers allow; element_pack.cuh); blockIdx.y is the row so
// that no thread divides. silu(g) = g / (1 + e^-g), in fp32 with the accurate expf.
// One element a thread read 2-byte words: 45 us for 1000 x 13824 bf16 on the H200 (43 % of
// the copy ceiling; bench/results/2026-12-01-h200-prefill-small-kernels).
#include <cuda_bf16.h>

#include "kernels/cuda/element_pack.cuh"
#include "kernels/cuda/numeric.cuh"
#include "kernels/cuda/silu_and_mul.hpp"

namespace troupe::kernels::cuda {

namespace {
constexpr int threads = 256;

template <class T, int V>
__global__ void silu_and_mul_kernel(const T* __restrict__ gate_up, T* __restrict__ out, int inter) {
  const int i = (blockIdx.x * blockDim.x + threadIdx.x) * V;
  if (i >= inter)
    return;
  const std::size_t row = blockIdx.y;
  const auto gate = detail::load_pack<V>(gate_up + row * 2 * inter + i);
  const auto up = detail::load_pack<V>(gate_up + row * 2 * inter + inter + i);
  detail::element_pack<T, V> y;
#pragma unroll
  for (int v = 0; v < V; ++v) {
    const float g = detail::to_float(gate.e[v]);
    y.e[v] = detail::from_float<T>(g / (1.0f + expf(-g)) * detail::to_float(up.e[v]));
  }
  detail::store_pack(out + row * inter + i, y);
}

template <class T, int V>
cudaError_t launch(const T* gate_up, T* out, int rows, int inter, cudaStream_t stream) {
  // gridDim.y is limited to 65535: larger batches go in slices of rows.
  const int packs = inter / V;
  for (int first = 0; first < rows; first += 65535) {
    const int n = rows - first < 65535 ? rows - first : 65535;
    const dim3 grid((packs + threads - 1) / threads, n);
    silu_and_mul_kernel<T, V><<<grid, threads, 0, stream>>>(gate_up + static_cast<std::size_t>(first) * 2 * inter,
                                                            out + static_cast<std::size_t>(first) * inter, inter);
    if (auto err = cudaGetLastError(); err != cudaSuccess)
      return err;
  }
  return cudaSuccess;
}
} // namespace

template <class T>
cudaError_t silu_and_mul(const T* gate_up, T* out, int rows, int inter, cudaStream_t stream) {
  if (rows <= 0 || inter <= 0)
    return cudaSuccess;
  // Rows start at multiples of inter elements, so a pack width must divide inter.
  return detail::with_pack_width(
      detail::widest_pack(inter, 16 / static_cast<int>(sizeof(T)), sizeof(T), gate_up, out),
      [&](auto v) { return launch<T, decltype(v)::value>(gate_up, out, rows, inter, stream); });
}

template cudaError_t silu_and_mul<float>(const float*, float*, int, int, cudaStream_t);
template cudaError_t silu_and_mul<__nv_bfloat16>(const __nv_bfloat16*, __nv_bfloat16*, int, int, cudaStream_t);
template cudaError_t silu_and_mul<__half>(const __half*, __half*, int, int, cudaStream_t);

} // namespace troupe::kernels::cuda
