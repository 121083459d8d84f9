// Deterministic random fill of a device tensor (launcher; the kernel is in random_fill.cu):
// model.load-format=dummy builds a model of the real shapes on the GPU without a file.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace troupe::kernels::cuda {

// out[i] = mean + std * z(seed, i), where z is an approximately standard-normal value
// computed from a counter-based hash of (seed, i): the same (seed, i) gives the same
// value on every device and launch configuration. std = 0 writes the constant mean.
// out: device [n] T, T = float, __nv_bfloat16, __half or __nv_fp8_e4m3 (rounded to nearest,
// saturated at ±448: dummy FP8 weight codes). Returns the launch's error.
template <class T>
cudaError_t random_fill(T* out, std::size_t n, std::uint64_t seed, float mean, float std, cudaStream_t stream);

} // namespace troupe::kernels::cuda
