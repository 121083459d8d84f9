// What the weight-streaming GEMVs (gemv.cu, fp8_linear.cu, int4_linear.cu) share: a 16-byte load
// that bypasses L1 (each weight byte is read once per step), and their launch as a programmatic
// dependent of the kernel before them, so that each requests its first weights while that kernel
// still runs (dependent_launch.cuh). Only .cu files include this.
#pragma once

#include <cuda_runtime.h>

namespace troupe::kernels::cuda::detail {

// 16 bytes of weights straight to registers, not kept in L1.
__device__ __forceinline__ uint4 load_streaming(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// kernel<<<grid, block, 0, stream>>>(args...) with programmatic stream serialization allowed.
template <class... Params, class... Args>
cudaError_t launch_dependent(void (*kernel)(Params...), unsigned grid, unsigned block, cudaStream_t stream,
                             Args... args) {
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(grid);
  config.blockDim = dim3(block);
  config.stream = stream;
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  config.attrs = &attribute;
  config.numAttrs = 1;
  return cudaLaunchKernelEx(&config, kernel, static_cast<Params>(args)...);
}

} // namespace troupe::kernels::cuda::detail
