// Recovering and packing INT4 codes (runtime/int4_packing.hpp).
#include "runtime/int4_packing.hpp"

#include <cmath>
#include <stdexcept>
#include <string>

namespace troupe::runtime {

namespace {
[[noreturn]] void refuse(const std::string& what) { throw std::invalid_argument("pack_int4: " + what); }
} // namespace

int4_packed pack_int4(std::span<const float> values, std::size_t columns, const int4_groups& groups) {
  const std::size_t group = groups.group;
  if (columns == 0 || columns % 16 != 0)
    refuse(std::to_string(columns) + " columns: not a positive multiple of 16");
  if (group == 0 || group % 16 != 0 || columns % group != 0)
    refuse("a group of " + std::to_string(group) + " columns does not divide " + std::to_string(columns) +
           " columns into multiples of 16");
  if (values.size() % columns != 0)
    refuse(std::to_string(values.size()) + " values are not rows of " + std::to_string(columns));
  const std::size_t rows = values.size() / columns, per_row = columns / group;
  if (groups.scales.size() != rows * per_row || groups.zeros.size() != rows * per_row)
    refuse(std::to_string(groups.scales.size()) + " scales and " + std::to_string(groups.zeros.size()) +
           " zeros for " + std::to_string(rows) + " rows of " + std::to_string(per_row) + " groups");

  int4_packed out;
  out.group = group;
  const auto round_up = [](std::size_t v, std::size_t to) { return (v + to - 1) / to * to; };
  out.codes.assign(round_up(rows, int4_tile_rows) * round_up(columns, int4_vector_columns) / 8, 0u);
  out.groups.resize(2 * rows * per_row);
  for (std::size_t r = 0; r < rows; ++r) {
    for (std::size_t g = 0; g < per_row; ++g) {
      const float scale = groups.scales[r * per_row + g], zero_value = groups.zeros[r * per_row + g];
      if (!(zero_value >= 0.0f && zero_value <= 15.0f) || std::floor(zero_value) != zero_value)
        refuse("row " + std::to_string(r) + " group " + std::to_string(g) + ": zero " + std::to_string(zero_value) +
               " is not an integer in [0, 15]");
      const int zero = static_cast<int>(zero_value);
      out.groups[2 * (r * per_row + g)] = scale;
      out.groups[2 * (r * per_row + g) + 1] = zero_value;
      for (std::size_t c = g * group; c < (g + 1) * group; ++c) {
        const float value = values[r * columns + c];
        // The loader computed value as float(code - zero) * scale: the nearest code must give it back.
        const float steps = scale != 0.0f ? value / scale : 0.0f; // code - zero, before rounding
        const int code = std::fabs(steps) <= 16.0f ? zero + static_cast<int>(std::nearbyint(steps)) : -1;
        if (code < 0 || code > 15 || static_cast<float>(code - zero) * scale != value)
          refuse("row " + std::to_string(r) + " column " + std::to_string(c) + ": " + std::to_string(value) +
                 " is not (code - " + std::to_string(zero) + ") * " + std::to_string(scale) + " for a code in [0, 15]");
        const int4_code_place at = int4_place(columns, r, c);
        out.codes[at.word] |= static_cast<std::uint32_t>(code) << at.bit;
      }
    }
  }
  return out;
}

int4_code_place int4_place(std::size_t columns, std::size_t row, std::size_t column) noexcept {
  const std::size_t vectors = (columns + int4_vector_columns - 1) / int4_vector_columns;
  const std::size_t tile = row / int4_tile_rows, in_tile = row % int4_tile_rows;
  const std::size_t kstep = column / 16, in_step = column % 16;
  const std::size_t g = in_tile % 8, t = (in_step % 8) / 2;
  const int row_hi = static_cast<int>(in_tile / 8), column_hi = static_cast<int>(in_step / 8);
  const int odd = static_cast<int>(in_step % 2);
  const std::size_t lane = 4 * g + t;
  return {((tile * vectors + kstep / 4) * 32 + lane) * 4 + kstep % 4, 4 * (row_hi + 2 * column_hi) + 16 * odd};
}

int int4_code(const int4_packed& packed, std::size_t columns, std::size_t row, std::size_t column) {
  const int4_code_place at = int4_place(columns, row, column);
  return static_cast<int>((packed.codes.at(at.word) >> at.bit) & 0xfu);
}

} // namespace troupe::runtime
