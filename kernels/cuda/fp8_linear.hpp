// Linear layers with FP8 (e4m3fn) weights and bf16 / fp16 activations (launchers; the kernels are
// in fp8_linear.cu). A small decode batch streams the codes through a GEMV that dequantizes them in
// registers: half the bytes of a bf16 weight, so up to twice the speed of the bf16 GEMV on a
// step that is a weight stream. More rows dequantize the weight once into a scratch buffer of E
// and run cuBLASLt on it.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace troupe::kernels::cuda {

// A linear layer's weight as FP8 e4m3fn codes [n, k], row-major, with an fp32 scale per row
// and group of `group` columns: w[i][j] = e4m3(codes[i * k + j]) * scales[i * (k / group) + j / group].
// Per-tensor and per-channel checkpoints are group == k (one scale a row); block-wise [128, 128] is group 128.
struct fp8_weight_view {
  const std::uint8_t* codes = nullptr;
  const float* scales = nullptr;
  int group = 0;
};

// The most rows m of x that fp8_gemv serves (one kernel instantiation each).
inline constexpr int fp8_gemv_max_rows = 8;

// How many warps share an output row of an FP8 weight with k columns: gemv_split's rule on the
// row's 16-byte vectors of codes (k / 16 of them): the most, up to 8, that leave each lane at
// least 4 vectors. 13B: 2 at k = 5120, 4 at k = 13824.
int fp8_gemv_split(int k) noexcept;

// Whether fp8_gemv can take this shape: 1 <= m <= fp8_gemv_max_rows, n >= 1, k >= 16, k % 16 == 0,
// group >= 16, group % 16 == 0, k % group == 0, x and w.codes 16-byte aligned, w.scales not null.
bool fp8_gemv_applies(const void* x, const fp8_weight_view& w, int m, int n, int k) noexcept;

// y[m, n] = x[m, k] · w[n, k]ᵀ (+ bias[n] added to the fp32 sum before y is rounded, bias may be null):
// x and bias of E (bf16 or fp16), y of E or float. The weights are dequantized in registers, never in
// memory; the sum is fp32 (per 16-column vector times its group's scale, or per row times its one
// scale where group == k), so it agrees with a dequantize + GEMM to rounding, not bit for bit.
// Launched as a programmatic dependent of the kernel before it (like gemv).
// cudaErrorInvalidValue unless fp8_gemv_applies.
template <class Out, class E>
cudaError_t fp8_gemv(const E* x, const fp8_weight_view& w, const E* bias, Out* y, int m, int n, int k,
                     cudaStream_t stream);

// out[n, k] = w dequantized, each element e4m3(code) * scale in fp32 rounded once to E (float, bf16 or
// fp16): the path for more rows than the GEMV serves (the caller then runs cuBLASLt on `out`).
// Any k and any positive group that divides it (16-byte vectors where k and the group are multiples
// of 16, one element a thread otherwise); cudaErrorInvalidValue for another group, n < 1 or null pointers.
template <class E>
cudaError_t dequantize_fp8(const fp8_weight_view& w, E* out, int n, int k, cudaStream_t stream);

} // namespace troupe::kernels::cuda
