// Programmatic dependent launch (sm_90): a kernel launched with the programmatic
// stream-serialization attribute may start before the kernel ahead of it in the stream has
// finished, and must wait for it before touching anything that kernel writes. The decode
// GEMV uses this to request weights, which no kernel writes, while the RMSNorm before it is
// still running. Only .cu files include this.
#pragma once

#include <cuda_runtime.h>

namespace troupe::kernels::cuda::detail {

// Blocks until every kernel this one depends on has completed and its writes are visible.
// A no-op when the kernel was launched without the attribute (ordinary stream order).
__device__ __forceinline__ void wait_for_previous_kernels() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Lets a dependent kernel launched with the attribute start now, while this one still runs;
// it still waits for this kernel's completion before reading what this kernel writes. Called
// at the start of a short kernel so the next one's blocks can be scheduled beside its own.
// A no-op when nothing dependent was launched that way.
__device__ __forceinline__ void allow_dependent_launch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

} // namespace troupe::kernels::cuda::detail
