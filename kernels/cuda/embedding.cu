// Embedding gather: one block per token copies its table row, 16 bytes at a
// time when rows are 16-byte multiples (they are for every real model), else element-wise.
#include <cuda_bf16.h>

#include "kernels/cuda/embedding.hpp"
#include "kernels/cuda/numeric.cuh"

namespace troupe::kernels::cuda {

namespace {
constexpr int threads = 128;

template <class T>
__global__ void embedding_kernel(const std::int32_t* __restrict__ ids, const T* __restrict__ table, T* __restrict__ out,
                                 int dim, bool vector_copy, float scale) {
  const std::size_t row = static_cast<std::size_t>(ids[blockIdx.x]);
  const T* src = table + row * dim;
  T* dst = out + static_cast<std::size_t>(blockIdx.x) * dim;
  if (scale != 1.0f) {
    for (int i = threadIdx.x; i < dim; i += blockDim.x)
      dst[i] = detail::from_float<T>(detail::to_float(src[i]) * scale);
  } else if (vector_copy) {
    const int n = dim * static_cast<int>(sizeof(T)) / 16;
    for (int i = threadIdx.x; i < n; i += blockDim.x)
      reinterpret_cast<uint4*>(dst)[i] = reinterpret_cast<const uint4*>(src)[i];
  } else {
    for (int i = threadIdx.x; i < dim; i += blockDim.x)
      dst[i] = src[i];
  }
}
} // namespace

template <class T>
cudaError_t embedding(const std::int32_t* ids, const T* table, T* out, int tokens, int dim, cudaStream_t stream,
                      float scale) {
  if (tokens <= 0 || dim <= 0)
    return cudaSuccess;
  const bool vector_copy = (dim * sizeof(T)) % 16 == 0 && reinterpret_cast<std::uintptr_t>(table) % 16 == 0 &&
                           reinterpret_cast<std::uintptr_t>(out) % 16 == 0;
  embedding_kernel<T><<<tokens, threads, 0, stream>>>(ids, table, out, dim, vector_copy, scale);
  return cudaGetLastError();
}

template cudaError_t embedding<float>(const std::int32_t*, const float*, float*, int, int, cudaStream_t, float);
template cudaError_t embedding<__nv_bfloat16>(const std::int32_t*, const __nv_bfloat16*, __nv_bfloat16*, int, int,
                                              cudaStream_t, float);
template cudaError_t embedding<__half>(const std::int32_t*, const __half*, __half*, int, int, cudaStream_t, float);

} // namespace troupe::kernels::cuda
