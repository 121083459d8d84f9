// One thread block walking a row of fp32 values with several loads in flight per thread: each
// thread loads `batch` float4s (16 values) before it looks at any of them. A plain strided loop
// over a 128k-token row waits on one load at a time per thread, ~250 waits in a row: 0.25-0.7 ms
// per row for the sampler's and the log-probabilities' passes (bench_kernels_gpu --sampling).
// The visiting order differs from the strided loop's; every caller's result is order-free.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace troupe::kernels::cuda {

// f(value, index) for every element of row[0, n), each by one thread of the block. row may be
// global or shared memory; a row not 16-byte aligned is walked one value at a time.
template <class F>
__device__ __forceinline__ void scan_row(const float* row, int n, F&& f) {
  constexpr int batch = 4;
  int done = 0;
  if ((reinterpret_cast<std::uintptr_t>(row) & 15) == 0) {
    const auto* quads = reinterpret_cast<const float4*>(row);
    const int n4 = n / 4;
    const int stride = static_cast<int>(blockDim.x) * batch;
    for (int base = threadIdx.x; base < n4; base += stride) {
      float4 q[batch];
#pragma unroll
      for (int b = 0; b < batch; ++b) {
        const int j = base + b * static_cast<int>(blockDim.x);
        if (j < n4)
          q[b] = quads[j];
      }
#pragma unroll
      for (int b = 0; b < batch; ++b) {
        const int j = base + b * static_cast<int>(blockDim.x);
        if (j < n4) {
          f(q[b].x, 4 * j);
          f(q[b].y, 4 * j + 1);
          f(q[b].z, 4 * j + 2);
          f(q[b].w, 4 * j + 3);
        }
      }
    }
    done = n4 * 4;
  }
  for (int i = done + static_cast<int>(threadIdx.x); i < n; i += static_cast<int>(blockDim.x))
    f(row[i], i);
}

} // namespace troupe::kernels::cuda
