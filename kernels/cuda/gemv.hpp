// The linear layers of a small decode batch: y[m, n] = x[m, k] · w[n, k]ᵀ for a few rows m,
// in bf16 or fp16 with fp32 accumulation (launcher; the kernel is in gemv.cu).
//
// At batch 1 a 13B decode step is 25.7 GB of weights read once: the step is a weight stream.
// This kernel is a plain stream: a few warps per output row, 16-byte weight loads kept out of
// L1, x read through L1 where it stays, and it is launched as a programmatic dependent of the
// kernel before it, so its first weight loads are in flight while that kernel finishes.
//
// H200, 13B shapes at m = 1, per launch back to back in a CUDA graph (bench_kernels_gpu --gemv;
// bench/results/2026-12-01-h200-gemv-split): qkv 38.5 us against cuBLASLt's 39.1, o 15.8
// against 15.7, gate/up 65.7 against 75.8, down 35.9 against 39.9, LM head 75.5 against 82.1.
// The batch-1 step (CUDA graph) went 7.76 -> 7.35 ms with it on every layer. At m = 2 cuBLASLt
// is as fast or faster on every layer but the 8B LM head (239.5 against 247.3 us).
// gemv_preferred is that rule.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

namespace troupe::kernels::cuda {

// The most rows m the GEMV serves (tested up to here); gemv_preferred picks only m = 1.
inline constexpr int gemv_max_rows = 4;

// The most warps that share one output row (a power of two: 1, 2, 4 or 8).
inline constexpr int gemv_max_split = 8;

// How many warps share an output row of a weight with k columns: the most (up to
// gemv_max_split) that leave each lane at least 4 of the row's 16-byte vectors. A lane's share
// of a row then takes one or two rounds of loads, and a launch of short work units keeps its
// last wave short. H200 (bench/results/2026-12-01-h200-gemv-split, in a CUDA graph): 13B down
// 48.5 us at one warp a row, 35.9 at 8; 13B o 20.2 at 1, 15.8 at 4; but 8 warps at k = 5120
// (2.5 vectors a lane) were 50 % slower than 4.
int gemv_split(int k) noexcept;

// Whether a linear layer of this shape should take the GEMV rather than cuBLASLt: every layer
// of one row, by the figures above (n and k do not matter on the shapes measured).
bool gemv_preferred(int m, int n, int k) noexcept;

// Whether gemv() can take this shape: 1 <= m <= gemv_max_rows, k a multiple of 8, and x and w
// 16-byte aligned (every load is a 16-byte vector). Otherwise use cublaslt_gemm.
bool gemv_applies(const void* x, const void* w, int m, int n, int k) noexcept;

// y[m, n] = x[m, k] · w[n, k]ᵀ, all row-major and dense; x, w of E (bf16 or fp16), y of E or
// float (the LM head's logits). The sum is fp32 in an order of its own (per lane, then a butterfly
// across the warp, then the row's warps in order), so it agrees with cuBLASLt to rounding, not
// bit for bit.
// Precondition: gemv_applies(x, w, m, n, k).
template <class Out, class E>
cudaError_t gemv(const E* x, const E* w, Out* y, int m, int n, int k, cudaStream_t stream);

// The same with the warps a row chosen by the caller (tests, benchmarks); a split that is not a
// power of two in 1..gemv_max_split is refused with cudaErrorInvalidValue.
template <class Out, class E>
cudaError_t gemv(const E* x, const E* w, Out* y, int m, int n, int k, cudaStream_t stream, int split);

// y[m, n] = x[m, k] · w[n, k]ᵀ + bias[n] (bias: E, may be null), the bias added to the fp32
// sum before y is rounded: once, as cuBLASLt's bias epilogue does (cublaslt_gemm::linear).
template <class Out, class E>
cudaError_t gemv(const E* x, const E* w, const E* bias, Out* y, int m, int n, int k, cudaStream_t stream);

} // namespace troupe::kernels::cuda
