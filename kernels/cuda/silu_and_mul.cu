// SwiGLU and GeGLU: an element-wise grid over [rows, inter] in packs of V elements (16 bytes of bf16
// or fp32 where inter and the pointers allow; element_pack.cuh); blockIdx.y is the row so
// that no thread divides. silu(g) = g / (1 + e^-g), in fp32 with the accurate expf; GELU's tanh
// form with the accurate tanhf.
// One element a thread read 2-byte words: 45 us for 1000 x 13824 bf16 on the H200 (43 % of
// the copy ceiling; bench/results/2026-12-01-h200-prefill-small-kernels).
#include <cuda_bf16.h>

#include "kernels/cuda/element_pack.cuh"
#include "kernels/cuda/numeric.cuh"
#include "kernels/cuda/silu_and_mul.hpp"

namespace troupe::kernels::cuda {

namespace {
constexpr int threads = 256;

struct silu {
  __device__ float operator()(float g) const { return g / (1.0f + expf(-g)); }
};
struct gelu_tanh {
  __device__ float operator()(float g) const {
    constexpr float k = 0.7978845608028654f; // sqrt(2 / pi)
    return 0.5f * g * (1.0f + tanhf(k * (g + 0.044715f * g * g * g)));
  }
};

template <class Act, class T, int V>
__global__ void gated_kernel(const T* __restrict__ gate_up, T* __restrict__ out, int inter) {
  const int i = (blockIdx.x * blockDim.x + threadIdx.x) * V;
  if (i >= inter)
    return;
  const std::size_t row = blockIdx.y;
  const auto gate = detail::load_pack<V>(gate_up + row * 2 * inter + i);
  const auto up = detail::load_pack<V>(gate_up + row * 2 * inter + inter + i);
  detail::element_pack<T, V> y;
#pragma unroll
  for (int v = 0; v < V; ++v) {
    y.e[v] = detail::from_float<T>(Act{}(detail::to_float(gate.e[v])) * detail::to_float(up.e[v]));
  }
  detail::store_pack(out + row * inter + i, y);
}

template <class Act, class T, int V>
cudaError_t launch(const T* gate_up, T* out, int rows, int inter, cudaStream_t stream) {
  // gridDim.y is limited to 65535: larger batches go in slices of rows.
  const int packs = inter / V;
  for (int first = 0; first < rows; first += 65535) {
    const int n = rows - first < 65535 ? rows - first : 65535;
    const dim3 grid((packs + threads - 1) / threads, n);
    gated_kernel<Act, T, V><<<grid, threads, 0, stream>>>(gate_up + static_cast<std::size_t>(first) * 2 * inter,
                                                          out + static_cast<std::size_t>(first) * inter, inter);
    if (auto err = cudaGetLastError(); err != cudaSuccess)
      return err;
  }
  return cudaSuccess;
}

template <class Act, class T>
cudaError_t gated(const T* gate_up, T* out, int rows, int inter, cudaStream_t stream) {
  if (rows <= 0 || inter <= 0)
    return cudaSuccess;
  // Rows start at multiples of inter elements, so a pack width must divide inter.
  return detail::with_pack_width(
      detail::widest_pack(inter, 16 / static_cast<int>(sizeof(T)), sizeof(T), gate_up, out),
      [&](auto v) { return launch<Act, T, decltype(v)::value>(gate_up, out, rows, inter, stream); });
}
} // namespace

template <class T>
cudaError_t silu_and_mul(const T* gate_up, T* out, int rows, int inter, cudaStream_t stream) {
  return gated<silu>(gate_up, out, rows, inter, stream);
}

template <class T>
cudaError_t gelu_tanh_and_mul(const T* gate_up, T* out, int rows, int inter, cudaStream_t stream) {
  return gated<gelu_tanh>(gate_up, out, rows, inter, stream);
}

#define TROUPE_INSTANTIATE(T)                                                 \
  template cudaError_t silu_and_mul<T>(const T*, T*, int, int, cudaStream_t); \
  template cudaError_t gelu_tanh_and_mul<T>(const T*, T*, int, int, cudaStream_t);
TROUPE_INSTANTIATE(float)
TROUPE_INSTANTIATE(__nv_bfloat16)
TROUPE_INSTANTIATE(__half)
#undef TROUPE_INSTANTIATE

} // namespace troupe::kernels::cuda
