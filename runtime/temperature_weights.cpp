// bound_weight_sum: each weight is approximated in float, four tokens at a time, as 2^y with y = (logit - max) *
// (log2 e / T) = k + f, |f| <= 1/2, and 2^f by its Taylor series to f^6. Against the float the sampler computes,
// the approximation a is off by at most a (2^-20.8 + |y| 2^-22.9):
//  - y's three float roundings (logit - max, log2 e / T, their product) put it off by at most 3 2^-24 |y|, and so
//    2^y by |y| 2^-22.9;
//  - the series' remainder is under 2^-22 of 2^f, rounding its coefficients and Horner's steps in float under
//    4 2^-24, and the sampler's own rounding of its weight to float (with std::exp's error) 2^-24 more.
// Over 2e7 random tokens the error reached 0.89 of that. The bounds take 2^-19 and 2^-22, plus n 2^-51 of the
// sum for the rounding of a double sum of n terms in any order; weights under 2^-100 count as anything in
// [0, 2^-99].
#include "runtime/temperature_weights.hpp"

#include <bit>
#include <cstdint>
#include <cstring>
#include <numbers>

namespace troupe::runtime {

namespace {
// GCC/Clang vector extensions: SSE2 on any x86-64, NEON on arm64, no target flags. Locals only: passing such
// vectors to a function that is not inlined would depend on the target's ABI.
using f32x4 = float __attribute__((vector_size(16)));
using i32x4 = std::int32_t __attribute__((vector_size(16)));
using f64x2 = double __attribute__((vector_size(16)));
using f64x4 = double __attribute__((vector_size(32)));

constexpr float tiny_y = -100.0f;          // below 2^-100 a weight is not worth approximating
constexpr float shifter = 0x1.8p23f;       // y + shifter rounds y to an integer held in the low mantissa bits
constexpr double relative_error = 0x1p-19; // 3.6 times the constant term above
constexpr double error_per_bit = 0x1p-22;  // 1.9 times the |y| term

// (ln 2)^n / n!: 2^f = e^(f ln 2).
constexpr double ln2 = std::numbers::ln2;
constexpr float c1 = static_cast<float>(ln2);
constexpr float c2 = static_cast<float>(ln2 * ln2 / 2);
constexpr float c3 = static_cast<float>(ln2 * ln2 * ln2 / 6);
constexpr float c4 = static_cast<float>(ln2 * ln2 * ln2 * ln2 / 24);
constexpr float c5 = static_cast<float>(ln2 * ln2 * ln2 * ln2 * ln2 / 120);
constexpr float c6 = static_cast<float>(ln2 * ln2 * ln2 * ln2 * ln2 * ln2 / 720);
} // namespace

weight_sum_bounds bound_weight_sum(std::span<const float> logits, float max_logit, double inv_t) {
  const float scale = static_cast<float>(inv_t * std::numbers::log2e);
  f64x2 sum_low = {}, sum_high = {}; // the approximations a, lanes 0-1 and 2-3
  f32x4 sum_a_y = {};                // the sum of a |y|, for the error bound
  i32x4 tiny = {};
  const std::size_t n = logits.size();
  std::size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    f32x4 l;
    std::memcpy(&l, logits.data() + i, sizeof l);
    f32x4 y = (l - max_logit) * scale;
    const i32x4 is_tiny = y < tiny_y;
    y = is_tiny ? tiny_y : y;
    const f32x4 shifted = y + shifter;
    const f32x4 f = y - (shifted - shifter);
    const f32x4 two_to_f = 1.0f + f * (c1 + f * (c2 + f * (c3 + f * (c4 + f * (c5 + f * c6)))));
    const i32x4 k = std::bit_cast<i32x4>(shifted) - std::bit_cast<std::int32_t>(shifter);
    // 2^k 2^f: k added to the exponent field (the result stays a normal float: k >= -100).
    const f32x4 a = std::bit_cast<f32x4>((std::bit_cast<i32x4>(two_to_f) + (k << 23)) & ~is_tiny);
    // Through a 4-lane double: GCC then converts with two cvtps2pd and keeps the sums in registers.
    const f64x4 wide = __builtin_convertvector(a, f64x4);
    sum_low += __builtin_shufflevector(wide, wide, 0, 1);
    sum_high += __builtin_shufflevector(wide, wide, 2, 3);
    sum_a_y -= a * y; // y <= 0
    tiny -= is_tiny;  // a true lane is -1
  }
  double total = (sum_low[0] + sum_low[1]) + (sum_high[0] + sum_high[1]);
  // Each lane's float sum of m terms is within m 2^-24 of the exact one, relatively: widen by that.
  const double float_sum_slack = 1.0 + static_cast<double>(n) * 0x1p-24;
  double error = relative_error * total +
                 error_per_bit * float_sum_slack * ((sum_a_y[0] + sum_a_y[1]) + (sum_a_y[2] + sum_a_y[3]));
  const double unknown = 0x1p-99 * static_cast<double>(tiny[0] + tiny[1] + tiny[2] + tiny[3]);
  for (; i < n; ++i) // the last few exactly
    total += temperature_weight(logits[i], max_logit, inv_t);
  // Any double sum of the true weights, and `total` itself, is within n 2^-53 of the exact sum.
  error += total * static_cast<double>(n) * 0x1p-51;
  return {total - error, total + error + unknown};
}

} // namespace troupe::runtime
