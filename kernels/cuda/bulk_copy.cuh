// Bulk copies from global to shared memory through the Tensor Memory Accelerator (sm_90), with
// the mbarrier that counts their bytes in. One thread asks for a contiguous run of bytes; the
// copy lands in shared memory without passing through registers or the L1 staging that a
// thread's own loads (or cp.async) use, and the threads that read it wait on the barrier.
// Only .cu files include this.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace troupe::kernels::cuda::detail {

__device__ __forceinline__ std::uint32_t shared_address(const void* p) {
  return static_cast<std::uint32_t>(__cvta_generic_to_shared(p));
}

// A barrier that completes a phase when one thread has arrived (barrier_expect) and the bytes
// it announced have landed. Make the initialisation visible (barrier_init_fence and a sync of
// the threads that use it) before the first copy.
__device__ __forceinline__ void barrier_init(std::uint64_t* bar) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(shared_address(bar)) : "memory");
}
__device__ __forceinline__ void barrier_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

// The calling thread's arrival for this phase, announcing `bytes` of copies to come.
__device__ __forceinline__ void barrier_expect(std::uint64_t* bar, int bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(shared_address(bar)), "r"(bytes)
               : "memory");
}

// `bytes` (a multiple of 16, both addresses 16-byte aligned) from src to dst; completes on bar.
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, int bytes, std::uint64_t* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                   shared_address(dst)),
               "l"(src), "r"(bytes), "r"(shared_address(bar))
               : "memory");
}

// Waits for the phase of the given parity (0 for the first, then 1, 0, ...) to complete.
__device__ __forceinline__ void barrier_wait(std::uint64_t* bar, std::uint32_t parity) {
  std::uint32_t done = 0;
  do {
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(shared_address(bar)), "r"(parity)
        : "memory");
  } while (done == 0);
}

// Orders earlier ordinary accesses to shared memory before this thread's later bulk copies into
// it. For a buffer read by a warp and then refilled by one lane: __syncwarp() first (the other
// lanes' reads happen before it), then this fence, then the copy.
__device__ __forceinline__ void fence_before_bulk_copy() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

} // namespace troupe::kernels::cuda::detail
