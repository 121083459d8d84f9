// RMSNorm: one block per row; each thread accumulates a strided partial sum of
// squares, a shared-memory tree reduces it, then every thread scales its elements.
#include <cuda_runtime.h>

#include "kernels/cuda/rms_norm.hpp"

namespace troupe::kernels::cuda {

namespace {
constexpr int threads_per_row = 256;

__global__ void rms_norm_kernel(const float* __restrict__ x, const float* __restrict__ weight,
                                float* __restrict__ out, int dim, float eps) {
  __shared__ float partial[threads_per_row];
  const float* xr = x + static_cast<size_t>(blockIdx.x) * dim;
  float* yr = out + static_cast<size_t>(blockIdx.x) * dim;
  float sum = 0.0f;
  for (int i = threadIdx.x; i < dim; i += blockDim.x)
    sum += xr[i] * xr[i];
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride)
      partial[threadIdx.x] += partial[threadIdx.x + stride];
    __syncthreads();
  }
  float inv_rms = rsqrtf(partial[0] / static_cast<float>(dim) + eps);
  for (int i = threadIdx.x; i < dim; i += blockDim.x)
    yr[i] = xr[i] * inv_rms * weight[i];
}
}  // namespace

void rms_norm_f32(const float* x, const float* weight, float* out, int rows, int dim, float eps, void* stream) {
  if (rows <= 0)
    return;
  rms_norm_kernel<<<rows, threads_per_row, 0, static_cast<cudaStream_t>(stream)>>>(x, weight, out, dim, eps);
}

}  // namespace troupe::kernels::cuda
