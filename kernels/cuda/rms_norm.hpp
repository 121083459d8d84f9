// Fused RMSNorm on the GPU (launcher; the kernel is in rms_norm.cu).
#pragma once

#include <cstdint>

namespace troupe::kernels::cuda {

// out[r] = x[r] / rms(x[r]) * weight, fp32 statistics.
// x, out: device [rows, dim] fp32; weight: device [dim] fp32; stream: a cudaStream_t (nullptr = default).
void rms_norm_f32(const float* x, const float* weight, float* out, int rows, int dim, float eps, void* stream);

} // namespace troupe::kernels::cuda
