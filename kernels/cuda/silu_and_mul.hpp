// The MLP's gated activations on the GPU, SwiGLU and GeGLU (launchers; the kernel is in silu_and_mul.cu).
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

// out[r, i] = gelu_tanh(gate_up[r, i]) * gate_up[r, inter + i], computed in fp32, with GELU's tanh
// approximation 0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3))) (Gemma's gelu_pytorch_tanh). As silu_and_mul.
template <class T>
cudaError_t gelu_tanh_and_mul(const T* gate_up, T* out, int rows, int inter, cudaStream_t stream);

} // namespace troupe::kernels::cuda
