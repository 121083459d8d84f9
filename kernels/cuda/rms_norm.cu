// RMSNorm: one block per row. Each thread owns a strided set of the row's
// elements in both passes (so out may alias the inputs), a block reduction forms
// the sum of squares in fp32, and 1/sqrt is correctly rounded so that fp32 output
// follows the CPU reference closely.
//
// Rows of up to 1024 16-byte vectors (bf16 rows up to 8192 wide) take the vector kernel:
// each thread loads one vector of the row, its residual and its weights at once and keeps
// them in registers across the reduction, so a row costs one round trip to memory instead
// of three; at decode sizes (12 rows of 5120) the strided kernel took 11.5 us, all latency.
#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/cuda/dependent_launch.cuh"
#include "kernels/cuda/gemv.hpp"
#include "kernels/cuda/numeric.cuh"
#include "kernels/cuda/rms_norm.hpp"

namespace troupe::kernels::cuda {

namespace {
using detail::from_float;
using detail::norm_scale;
using detail::to_float;

int threads_for(int dim) {
  return dim <= 256 ? 64 : dim <= 2048 ? 256 : 512;
}

template <class T, bool add_residual>
__global__ void rms_norm_kernel(T* residual, const T* x, const T* __restrict__ weight, T* out, int dim, float eps,
                                float weight_offset, bool early_dependents) {
  __shared__ float scratch[32];
  if (early_dependents) // a GEMV next (small batches only) may start streaming its weights now
    detail::allow_dependent_launch();
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
    out[base + i] = from_float<T>(to_float(src[base + i]) * inv_rms * norm_scale(weight[i], weight_offset));
}
template <class T, bool add_residual>
__global__ void rms_norm_vector_kernel(T* residual, const T* x, const T* __restrict__ weight, T* out, int dim,
                                       float eps, float weight_offset, bool early_dependents) {
  constexpr int per_vector = 16 / sizeof(T);
  __shared__ float scratch[32];
  if (early_dependents) // a GEMV next (small batches only) may start streaming its weights now
    detail::allow_dependent_launch();
  const std::size_t base = static_cast<std::size_t>(blockIdx.x) * dim;
  const int i = threadIdx.x;
  const bool mine = i < dim / per_vector;
  float v[per_vector];
  uint4 w_bits{};
  float sum_sq = 0.0f;
  if (mine) {
    w_bits = reinterpret_cast<const uint4*>(weight)[i];
    const uint4 x_bits = reinterpret_cast<const uint4*>(x + base)[i];
    const T* xs = reinterpret_cast<const T*>(&x_bits);
    if constexpr (add_residual) {
      uint4 r_bits = reinterpret_cast<const uint4*>(residual + base)[i];
      T* rs = reinterpret_cast<T*>(&r_bits);
#pragma unroll
      for (int k = 0; k < per_vector; ++k) {
        rs[k] = from_float<T>(to_float(rs[k]) + to_float(xs[k]));
        v[k] = to_float(rs[k]);
      }
      reinterpret_cast<uint4*>(residual + base)[i] = r_bits;
    } else {
#pragma unroll
      for (int k = 0; k < per_vector; ++k)
        v[k] = to_float(xs[k]);
    }
#pragma unroll
    for (int k = 0; k < per_vector; ++k)
      sum_sq += v[k] * v[k];
  }
  sum_sq = detail::block_sum(sum_sq, scratch);
  const float inv_rms = 1.0f / sqrtf(sum_sq / static_cast<float>(dim) + eps);
  if (mine) {
    uint4 o_bits;
    T* os = reinterpret_cast<T*>(&o_bits);
    const T* ws = reinterpret_cast<const T*>(&w_bits);
#pragma unroll
    for (int k = 0; k < per_vector; ++k)
      os[k] = from_float<T>(v[k] * inv_rms * norm_scale(ws[k], weight_offset));
    reinterpret_cast<uint4*>(out + base)[i] = o_bits;
  }
}

bool aligned16(const void* p) {
  return reinterpret_cast<std::uintptr_t>(p) % 16 == 0;
}

// Threads for the vector kernel (one per 16-byte vector, a whole number of warps), or 0 if
// the row does not suit it.
template <class T>
int vector_threads(const T* residual, const T* x, const T* weight, const T* out, int dim) {
  constexpr int per_vector = 16 / sizeof(T);
  if (dim % per_vector != 0 || dim / per_vector > 1024 || !aligned16(x) || !aligned16(weight) || !aligned16(out) ||
      (residual != nullptr && !aligned16(residual)))
    return 0;
  return (dim / per_vector + 31) / 32 * 32;
}

template <class T, bool add_residual>
cudaError_t launch(T* residual, const T* x, const T* weight, T* out, int rows, int dim, float eps, float offset,
                   cudaStream_t stream) {
  if (rows <= 0 || dim <= 0)
    return cudaSuccess;
  const bool early = rows <= gemv_max_rows;
  if (const int threads = vector_threads(residual, x, weight, out, dim); threads > 0)
    rms_norm_vector_kernel<T, add_residual>
        <<<rows, threads, 0, stream>>>(residual, x, weight, out, dim, eps, offset, early);
  else
    rms_norm_kernel<T, add_residual>
        <<<rows, threads_for(dim), 0, stream>>>(residual, x, weight, out, dim, eps, offset, early);
  return cudaGetLastError();
}
} // namespace

template <class T>
cudaError_t rms_norm(const T* x, const T* weight, T* out, int rows, int dim, float eps, cudaStream_t stream,
                     float weight_offset) {
  return launch<T, false>(nullptr, x, weight, out, rows, dim, eps, weight_offset, stream);
}

template <class T>
cudaError_t add_rms_norm(T* residual, const T* x, const T* weight, T* out, int rows, int dim, float eps,
                         cudaStream_t stream, float weight_offset) {
  return launch<T, true>(residual, x, weight, out, rows, dim, eps, weight_offset, stream);
}

#define TROUPE_INSTANTIATE(T)                                                                     \
  template cudaError_t rms_norm<T>(const T*, const T*, T*, int, int, float, cudaStream_t, float); \
  template cudaError_t add_rms_norm<T>(T*, const T*, const T*, T*, int, int, float, cudaStream_t, float);
TROUPE_INSTANTIATE(float)
TROUPE_INSTANTIATE(__nv_bfloat16)
TROUPE_INSTANTIATE(__half)
#undef TROUPE_INSTANTIATE

} // namespace troupe::kernels::cuda
