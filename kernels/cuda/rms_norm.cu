// RMSNorm: one block per row. Each thread owns a strided set of the row's
// elements in both passes (so out may alias the inputs), a block reduction forms
// the sum of squares in fp32, and 1/sqrt is correctly rounded so that fp32 output
// follows the CPU reference closely.
#include <cuda_bf16.h>

#include "kernels/cuda/numeric.cuh"
#include "kernels/cuda/rms_norm.hpp"

namespace troupe::kernels::cuda {

namespace {
using detail::from_float;
using detail::to_float;

int threads_for(int dim) {
  return dim <= 256 ? 64 : dim <= 2048 ? 256 : 512;
}

template <class T, bool add_residual>
__global__ void rms_norm_kernel(T* residual, const T* x, const T* __restrict__ weight, T* out, int dim, float eps) {
  __shared__ float scratch[32];
  const std::size_t base = static_cast<std::size_t>(blockIdx.x) * dim;
  float sum_sq = 0.0f;
  for (int i = threadIdx.x; i < dim; i += blockDim.x) {
    float v = to_float(x[base + i]);
    if constexpr (add_residual) {
      T stored = from_float<T>(to_float(residual[base + i]) + v);
      residual[base + i] = stored;
      v = to_float(stored);
    }
    sum_sq += v * v;
  }
  sum_sq = detail::block_sum(sum_sq, scratch);
  const float inv_rms = 1.0f / sqrtf(sum_sq / static_cast<float>(dim) + eps);
  const T* src = add_residual ? residual : x;
  for (int i = threadIdx.x; i < dim; i += blockDim.x)
    out[base + i] = from_float<T>(to_float(src[base + i]) * inv_rms * to_float(weight[i]));
}
} // namespace

template <class T>
cudaError_t rms_norm(const T* x, const T* weight, T* out, int rows, int dim, float eps, cudaStream_t stream) {
  if (rows <= 0 || dim <= 0)
    return cudaSuccess;
  rms_norm_kernel<T, false><<<rows, threads_for(dim), 0, stream>>>(nullptr, x, weight, out, dim, eps);
  return cudaGetLastError();
}

template <class T>
cudaError_t add_rms_norm(T* residual, const T* x, const T* weight, T* out, int rows, int dim, float eps,
                         cudaStream_t stream) {
  if (rows <= 0 || dim <= 0)
    return cudaSuccess;
  rms_norm_kernel<T, true><<<rows, threads_for(dim), 0, stream>>>(residual, x, weight, out, dim, eps);
  return cudaGetLastError();
}

#define TROUPE_INSTANTIATE(T)                                                              \
  template cudaError_t rms_norm<T>(const T*, const T*, T*, int, int, float, cudaStream_t); \
  template cudaError_t add_rms_norm<T>(T*, const T*, const T*, T*, int, int, float, cudaStream_t);
TROUPE_INSTANTIATE(float)
TROUPE_INSTANTIATE(__nv_bfloat16)
#undef TROUPE_INSTANTIATE

} // namespace troupe::kernels::cuda
