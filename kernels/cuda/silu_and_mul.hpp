// SwiGLU activation on the GPU (launcher; the kernel is in silu_and_mul.cu).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

namespace troupe::kernels::cuda {

// out[r, i] = silu(gate_up[r, i]) * gate_up[r, inter + i], computed in fp32.
// gate_up: device [rows, 2 * inter] T (the fused gate/up GEMM's output); out: device [rows, inter] T.
// T = float, __nv_bfloat16 or __half.
template <class T>
cudaError_t silu_and_mul(const T* gate_up, T* out, int rows, int inter, cudaStream_t stream);

} // namespace troupe::kernels::cuda
