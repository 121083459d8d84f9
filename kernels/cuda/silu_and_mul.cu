// SwiGLU: an element-wise grid over [rows, inter]; blockIdx.y is the row so
// that no thread divides. silu(g) = g / (1 + e^-g), in fp32 with the accurate expf.
#include <cuda_bf16.h>

#include "kernels/cuda/numeric.cuh"
#include "kernels/cuda/silu_and_mul.hpp"

namespace troupe::kernels::cuda {

namespace {
constexpr int threads = 256;

template <class T>
__global__ void silu_and_mul_kernel(const T* __restrict__ gate_up, T* __restrict__ out, int inter) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= inter)
    return;
  const std::size_t row = blockIdx.y;
  const float gate = detail::to_float(gate_up[row * 2 * inter + i]);
  const float up = detail::to_float(gate_up[row * 2 * inter + inter + i]);
  out[row * inter + i] = detail::from_float<T>(gate / (1.0f + expf(-gate)) * up);
}
} // namespace

template <class T>
cudaError_t silu_and_mul(const T* gate_up, T* out, int rows, int inter, cudaStream_t stream) {
  if (rows <= 0 || inter <= 0)
    return cudaSuccess;
  // gridDim.y is limited to 65535: larger batches go in slices of rows.
  for (int first = 0; first < rows; first += 65535) {
    const int n = rows - first < 65535 ? rows - first : 65535;
    const dim3 grid((inter + threads - 1) / threads, n);
    silu_and_mul_kernel<T><<<grid, threads, 0, stream>>>(gate_up + static_cast<std::size_t>(first) * 2 * inter,
                                                         out + static_cast<std::size_t>(first) * inter, inter);
    if (auto err = cudaGetLastError(); err != cudaSuccess)
      return err;
  }
  return cudaSuccess;
}

template cudaError_t silu_and_mul<float>(const float*, float*, int, int, cudaStream_t);
template cudaError_t silu_and_mul<__nv_bfloat16>(const __nv_bfloat16*, __nv_bfloat16*, int, int, cudaStream_t);

} // namespace troupe::kernels::cuda
