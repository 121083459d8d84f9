// Linear layers with 4-bit integer weights (AWQ checkpoints: a scale and a zero point per row and
// group of columns) and bf16 / fp16 activations (launchers; the kernels are in int4_linear.cu).
// A small decode batch streams the codes through a GEMV that dequantizes them in registers: a
// quarter of a bf16 weight's bytes (plus one 8-byte record per group), so up to ~3.5x the
// bf16 GEMV's speed on a step that is a weight stream. More rows dequantize the weight once into
// a scratch buffer of E and run cuBLASLt on it, as the FP8 path does.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace troupe::kernels::cuda {

// A linear layer's weight as 4-bit codes [n, k] with a {scale, zero} pair per row and group:
//   w[i][j] = (code[i][j] - groups[i * (k / group) + j / group].y) * groups[...].x
// Codes are packed eight a 32-bit word, row-major: word w of row i holds columns 8w .. 8w + 7,
// column 8w + c in the nibble at bits 4 * int4_slot(c). The slots pair column c with c + 1 in the
// two 16-bit halves of the word, so one mask takes out two neighbouring columns at once
// (runtime/int4_packing.hpp writes this order from a checkpoint's codes).
struct int4_weight_view {
  const std::uint32_t* codes = nullptr; // [n, k / 8]
  const float2* groups = nullptr;       // [n, k / group]: {scale, zero}, zero an integer in [0, 15]
  int group = 0;
};

// The nibble of a word that holds column c (0..7) of its eight: even columns in slots 0..3, odd
// columns in slots 4..7.
constexpr int int4_slot(int c) noexcept { return c % 2 == 0 ? c / 2 : 4 + c / 2; }

// The most rows m of x that int4_gemv serves (one kernel instantiation each).
inline constexpr int int4_gemv_max_rows = 8;

// How many warps share an output row with k columns: the most, up to 8, that leave each lane at
// least two 16-byte vectors of codes (32 columns each). 13B: 2 at k = 5120, 4 at k = 13824.
int int4_gemv_split(int k) noexcept;

// Whether int4_gemv can take this shape: 1 <= m <= int4_gemv_max_rows, n >= 1, k >= 32,
// k % 32 == 0, group >= 32, group % 32 == 0, k % group == 0, x and w.codes 16-byte aligned,
// w.groups 8-byte aligned and not null.
bool int4_gemv_applies(const void* x, const int4_weight_view& w, int m, int n, int k) noexcept;

// y[m, n] = x[m, k] · w[n, k]ᵀ (+ bias[n] added to the fp32 sum before y is rounded; bias may be null):
// x and bias of E (bf16 or fp16), y of E or float. Codes minus their zero are exact in fp16 and
// widen to fp32; each 32-column vector's sum is fp32, times its group's scale, so the result
// agrees with a dequantize + GEMM to rounding, not bit for bit. Launched as a programmatic
// dependent of the kernel before it (like gemv). cudaErrorInvalidValue unless int4_gemv_applies.
template <class Out, class E>
cudaError_t int4_gemv(const E* x, const int4_weight_view& w, const E* bias, Out* y, int m, int n, int k,
                      cudaStream_t stream);

// out[n, k] = w dequantized, each element (code - zero) * scale in fp32 rounded once to E (float,
// bf16 or fp16): the path for more rows than the GEMV serves. k % 8 == 0 and a group that divides k
// into multiples of 8 columns; cudaErrorInvalidValue otherwise, for n < 1 or null pointers.
template <class E>
cudaError_t dequantize_int4(const int4_weight_view& w, E* out, int n, int k, cudaStream_t stream);

} // namespace troupe::kernels::cuda
