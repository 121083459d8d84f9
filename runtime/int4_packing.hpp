// A linear layer's INT4 codes in the CUDA runner's device layout (kernels/cuda/int4_linear.hpp),
// recovered from the fp32 values an AWQ checkpoint was dequantized to at load: each value is
// (code - zero) * scale, so code = value / scale + zero, checked to reproduce the value exactly.
#pragma once

#include "runtime/model_weights.hpp"

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace troupe::runtime {

// The layout (kernels::cuda::int4_weight_view, which says why): rows in tiles of 16, columns in
// vectors of 64, each padded with code 0; in tile T and vector v, 32 lanes of 4 words, word s of
// lane (g, t) holding the 8 codes of rows 16T + {g, g + 8} and columns 16 (4v + s) + {2t, 2t + 1,
// 2t + 8, 2t + 9}.
inline constexpr std::size_t int4_tile_rows = 16, int4_vector_columns = 64;

// Where the code at (row, column) of a matrix of `columns` columns lives: its word and the bit
// its nibble starts at.
struct int4_code_place {
  std::size_t word;
  int bit;
};
int4_code_place int4_place(std::size_t columns, std::size_t row, std::size_t column) noexcept;

struct int4_packed {
  std::size_t group = 0;
  std::vector<std::uint32_t> codes; // [rows / 16 rounded up][columns / 64 rounded up][32][4], see int4_place
  std::vector<float> groups;        // [rows, columns / group] pairs {scale, zero}
};

// `values` [rows, columns] as codes and group pairs. Throws std::invalid_argument when columns is
// not a multiple of 16, the groups do not match the matrix (group a multiple of 16 dividing
// columns, one scale and zero per row and group), a zero is not an integer in [0, 15], or a value
// is not (code - zero) * scale for a code in [0, 15] (naming its row and column).
int4_packed pack_int4(std::span<const float> values, std::size_t columns, const int4_groups& groups);

// The code at (row, column) of a packed matrix with `columns` columns.
int int4_code(const int4_packed& packed, std::size_t columns, std::size_t row, std::size_t column);

} // namespace troupe::runtime
