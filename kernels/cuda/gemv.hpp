// The linear layers of a small decode batch: y[m, n] = x[m, k] · w[n, k]ᵀ for a few rows m,
// in bf16 with fp32 accumulation (launcher; the kernel is in gemv.cu).
//
// At batch 1 a 13B decode step is 25.7 GB of weights read once: the step is a weight stream,
// and cuBLASLt's kernels for m = 1 reach ~3.6 of the 4.28 TB/s copy ceiling. This kernel is a
// plain stream instead: one warp per output row, 16-byte weight loads kept out of L1, x read
// through L1 where it stays, and it is launched as a programmatic dependent of the kernel
// before it, so its first weight loads are in flight while that kernel finishes.
//
// It wins only on wide layers at m = 1 (H200, bench_kernels_gpu, 13B shapes): gate/up
// 27648 x 5120 71.6 us against cuBLASLt's 83.1; qkv 15360 x 5120 45.2 against 47.9; but o
// 5120 x 5120 23.2 against 22.9 and down 5120 x 13824 48.1 against 46.0, and at m = 2 it
// loses or ties everywhere. In the whole batch-1 step (CUDA graph, one runner), the GEMV on
// gate/up alone took 7.91 -> 7.82 ms; on every layer, 8.27 ms. gemv_preferred is that rule.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace troupe::kernels::cuda {

// The most rows m the GEMV serves (tested up to here); gemv_preferred picks only m = 1.
inline constexpr int gemv_max_rows = 4;

// Whether a linear layer of this shape should take the GEMV rather than cuBLASLt: one row,
// and an output at least 4x wider than the input (gate/up, the LM head), by the figures above.
bool gemv_preferred(int m, int n, int k) noexcept;

// Whether gemv() can take this shape: 1 <= m <= gemv_max_rows, k a multiple of 8, and x and w
// 16-byte aligned (every load is a 16-byte vector). Otherwise use cublaslt_gemm.
bool gemv_applies(const void* x, const void* w, int m, int n, int k) noexcept;

// y[m, n] = x[m, k] · w[n, k]ᵀ, all row-major and dense; x, w bf16, y bf16 or float
// (the LM head's logits). The sum is fp32 in an order of its own (per lane, then a butterfly
// across the warp), so it agrees with cuBLASLt to rounding, not bit for bit.
// Precondition: gemv_applies(x, w, m, n, k).
template <class Out>
cudaError_t gemv(const __nv_bfloat16* x, const __nv_bfloat16* w, Out* y, int m, int n, int k, cudaStream_t stream);

} // namespace troupe::kernels::cuda
