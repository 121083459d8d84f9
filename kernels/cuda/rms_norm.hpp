// RMSNorm on the GPU, plain and fused with the residual add (launchers; kernels in rms_norm.cu).
// T = float, __nv_bfloat16 or __half; the sum of squares and the scaling are fp32 whatever T is.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

namespace troupe::kernels::cuda {

// out[r] = x[r] / rms(x[r]) * (weight_offset + weight), the scale in fp32 (Gemma: offset 1).
// x, out: device [rows, dim] T (out may alias x); weight: device [dim] T.
template <class T>
cudaError_t rms_norm(const T* x, const T* weight, T* out, int rows, int dim, float eps, cudaStream_t stream,
                     float weight_offset = 0.0f);

// residual[r] += x[r] (stored as T), then out[r] = rms_norm(residual[r]) * (weight_offset + weight), the
// norm taken over the stored (rounded) residual so that fused == add then rms_norm.
// residual: device [rows, dim] T, read and written; x, out: device [rows, dim] T (out may alias x);
// weight: device [dim] T.
template <class T>
cudaError_t add_rms_norm(T* residual, const T* x, const T* weight, T* out, int rows, int dim, float eps,
                         cudaStream_t stream, float weight_offset = 0.0f);

} // namespace troupe::kernels::cuda
