// Linear layers with 4-bit integer weights (AWQ checkpoints: a scale and a zero point per row and
// group of columns) and bf16 / fp16 activations (launchers; the kernels are in int4_linear.cu).
// A decode batch of up to 16 rows streams the codes through a GEMV that dequantizes them in
// registers and multiplies on the tensor cores: a quarter of a bf16 weight's bytes (plus one
// 8-byte record per row and group), so up to ~3.5x the bf16 GEMV's speed on a step that is a
// weight stream. More rows dequantize the weight once into a scratch buffer of E and run cuBLASLt
// on it, as the FP8 path does.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace troupe::kernels::cuda {

// A linear layer's weight as 4-bit codes [n, k] with a {scale, zero} pair per row and group:
//   w[i][j] = (code[i][j] - groups[i * (k / group) + j / group].y) * groups[...].x
// The codes are laid out for the tensor cores' m16n8k16 A fragments (runtime/int4_packing.hpp
// writes this order): rows in tiles of 16 (n rounded up), columns in vectors of 64 (k rounded
// up; padding codes are 0 and never read as weights). Tile T, vector v, lane l (g = l / 4,
// t = l % 4) own 16 bytes at codes[(T * (k64 / 64) + v) * 32 + l]: word s (0..3) holds k-step
// 4v + s, columns c = 16 (4v + s) + {2t, 2t + 1, 2t + 8, 2t + 9} of rows 16T + {g, g + 8}, the
// nibble at bits 4 * (row_hi + 2 * col_hi) + 16 * (c odd) for the pair (row g + 8 row_hi,
// column 2t + 8 col_hi + odd): one mask of the word (shifted by 0, 4, 8, 12) gives each A register.
struct int4_weight_view {
  const std::uint32_t* codes = nullptr; // [n16 / 16][k64 / 64][32 lanes][4 words]
  const float2* groups = nullptr;       // [n, k / group]: {scale, zero}, zero an integer in [0, 15]
  int group = 0;
};

inline constexpr int int4_tile_rows = 16;      // output rows an A fragment covers
inline constexpr int int4_vector_columns = 64; // columns a lane's 16-byte load covers (4 k-steps of 16)

// The most rows m of x that int4_gemv serves: two m16n8k16 column tiles (batch rows 0-7, 8-15).
inline constexpr int int4_gemv_max_rows = 16;

// How many warps split the columns of a tile of 16 output rows, up to 8: doubled while the tiles
// times the split give fewer than 2,112 warps (16 on each of an H100's 132 SMs) and each warp
// still streams at least 4 vectors. 13B: qkv 4, o 8, gate_up 2, down 8.
int int4_gemv_split(int n, int k) noexcept;

// Whether int4_gemv can take this shape: 1 <= m <= int4_gemv_max_rows, n >= 1, k >= 32, k % 32 == 0,
// group >= 32, group % 32 == 0, k % group == 0, x and w.codes 16-byte aligned, w.groups 8-byte
// aligned and not null.
bool int4_gemv_applies(const void* x, const int4_weight_view& w, int m, int n, int k) noexcept;

// y[m, n] = x[m, k] · w[n, k]ᵀ (+ bias[n] added to the fp32 sum before y is rounded; bias may be null):
// x and bias of E (bf16 or fp16), y of E or float. Each tile of 16 output rows is a warp's (or,
// split over its columns, several warps'): codes minus their zero are exact in E and go through
// the tensor cores (m16n8k16, fp32 accumulate) against x, each group's sum times its scale in
// fp32; so the result agrees with a dequantize + GEMM to rounding, not bit for bit. Launched as a
// programmatic dependent of the kernel before it (like gemv). cudaErrorInvalidValue unless
// int4_gemv_applies.
template <class Out, class E>
cudaError_t int4_gemv(const E* x, const int4_weight_view& w, const E* bias, Out* y, int m, int n, int k,
                      cudaStream_t stream);

// out[n, k] = w dequantized, each element (code - zero) * scale in fp32 rounded once to E (float,
// bf16 or fp16): the path for more rows than the GEMV serves. k % 16 == 0 and a group that divides
// k into multiples of 16 columns; cudaErrorInvalidValue otherwise, for n < 1 or null pointers.
template <class E>
cudaError_t dequantize_int4(const int4_weight_view& w, E* out, int n, int k, cudaStream_t stream);

} // namespace troupe::kernels::cuda
