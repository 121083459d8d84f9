// Soft-capping of logits on the GPU (launcher; the kernel is in logit_softcap.cu).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

namespace troupe::kernels::cuda {

// x[i] = tanh(x[i] / cap) * cap, in place, in fp32 with the accurate tanhf (Gemma 2's
// final_logit_softcapping, in transformers' order); cap > 0. x: device [n] fp32.
cudaError_t logit_softcap(float* x, std::size_t n, float cap, cudaStream_t stream);

} // namespace troupe::kernels::cuda
