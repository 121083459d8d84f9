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

// The nibble of a 32-bit word that holds column c (0..7) of the eight it packs: even columns in
// slots 0..3, odd ones in 4..7, so columns c and c + 1 share a nibble position in the word's two
// 16-bit halves (the GEMV widens them together). kernels::cuda::int4_slot is the same rule.
constexpr int int4_nibble_slot(int c) noexcept { return c % 2 == 0 ? c / 2 : 4 + c / 2; }

struct int4_packed {
  std::size_t group = 0;
  std::vector<std::uint32_t> codes; // [rows, columns / 8], column 8w + c of word w at bits 4 * int4_nibble_slot(c)
  std::vector<float> groups;        // [rows, columns / group] pairs {scale, zero}
};

// `values` [rows, columns] as codes and group pairs. Throws std::invalid_argument when columns is
// not a multiple of 8, the groups do not match the matrix (group a multiple of 8 dividing
// columns, one scale and zero per row and group), a zero is not an integer in [0, 15], or a value
// is not (code - zero) * scale for a code in [0, 15] (naming its row and column).
int4_packed pack_int4(std::span<const float> values, std::size_t columns, const int4_groups& groups);

// The code at (row, column) of a packed matrix with `columns` columns.
int int4_code(const int4_packed& packed, std::size_t columns, std::size_t row, std::size_t column);

} // namespace troupe::runtime
