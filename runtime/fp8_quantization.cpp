// Rounding to e4m3fn and per-row FP8 quantization (runtime/fp8_quantization.hpp).
#include "runtime/fp8_quantization.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace troupe::runtime {

std::uint8_t f32_to_fp8_e4m3(float x) noexcept {
  if (std::isnan(x))
    return 0x7f;
  const std::uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  const float a = std::fabs(x);
  if (a >= fp8_e4m3_max)
    return sign | 0x7e;
  // Below 2^-6 the values are subnormal: multiples of 2^-9, the code is the multiple (8 is 2^-6,
  // the first normal, whose code is 8 as well).
  if (a < 0x1p-6f)
    return sign | static_cast<std::uint8_t>(std::nearbyint(a * 0x1p9f));
  int e = 0;
  const float m = std::frexp(a, &e); // a = m 2^e, m in [0.5, 1): the value is 2^(e-1) (1 + f)
  int exponent = e - 1;
  auto fraction = static_cast<int>(std::nearbyint((2.0f * m - 1.0f) * 8.0f)); // ties to even
  if (fraction == 8) {
    fraction = 0;
    ++exponent;
  }
  // exponent <= 8 here: a < 448 rounds to at most 448 (2^8 x 1.75).
  return sign | static_cast<std::uint8_t>(((exponent + 7) << 3) | fraction);
}

fp8_scales quantize_fp8_rows(std::vector<float>& matrix, std::size_t columns) {
  fp8_scales out;
  out.group = columns;
  if (columns == 0 || matrix.size() % columns != 0)
    throw std::invalid_argument("quantize_fp8_rows: " + std::to_string(matrix.size()) +
                                " values are not rows of " + std::to_string(columns));
  const std::size_t rows = matrix.size() / columns;
  out.values.resize(rows);
  for (std::size_t r = 0; r < rows; ++r) {
    float* row = matrix.data() + r * columns;
    float amax = 0.0f;
    for (std::size_t c = 0; c < columns; ++c)
      amax = std::max(amax, std::fabs(row[c]));
    const float scale = amax > 0.0f ? amax / fp8_e4m3_max : 1.0f;
    out.values[r] = scale;
    for (std::size_t c = 0; c < columns; ++c)
      row[c] = fp8_e4m3_to_f32(f32_to_fp8_e4m3(row[c] / scale)) * scale;
  }
  return out;
}

void quantize_linears_fp8(model_weights& weights, std::size_t hidden) {
  auto quantize = [](std::vector<float>& m, fp8_scales& scales, std::size_t columns) {
    if (scales.empty() && !m.empty())
      scales = quantize_fp8_rows(m, columns);
  };
  for (layer_weights& l : weights.layers) {
    quantize(l.q_proj, l.q_proj_fp8, hidden);
    quantize(l.k_proj, l.k_proj_fp8, hidden);
    quantize(l.v_proj, l.v_proj_fp8, hidden);
    quantize(l.o_proj, l.o_proj_fp8, l.o_proj.size() / hidden);
    quantize(l.gate_proj, l.gate_proj_fp8, hidden);
    quantize(l.up_proj, l.up_proj_fp8, hidden);
    quantize(l.down_proj, l.down_proj_fp8, l.down_proj.size() / hidden);
  }
}

std::vector<std::uint8_t> fp8_codes(std::span<const float> matrix, std::size_t columns, const fp8_scales& scales) {
  const std::size_t rows = columns == 0 ? 0 : matrix.size() / columns;
  if (columns == 0 || scales.group == 0 || columns % scales.group != 0 ||
      scales.values.size() != rows * (columns / scales.group))
    throw std::invalid_argument("fp8_codes: " + std::to_string(scales.values.size()) + " scales of groups of " +
                                std::to_string(scales.group) + " do not cover a [" + std::to_string(rows) + ", " +
                                std::to_string(columns) + "] matrix");
  const std::size_t groups = columns / scales.group;
  std::vector<std::uint8_t> codes(matrix.size());
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t c = 0; c < columns; ++c)
      codes[r * columns + c] =
          f32_to_fp8_e4m3(matrix[r * columns + c] / scales.values[r * groups + c / scales.group]);
  return codes;
}

} // namespace troupe::runtime
