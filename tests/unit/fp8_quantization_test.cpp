// FP8 e4m3 weights on the host: rounding to e4m3fn (every finite code round-trips, halfway
// values go to the even code, beyond ±448 saturates), per-row quantization (the row's largest
// value lands on ±448, every value becomes a code times its row's scale, within half a step of
// where it was), the codes the CUDA runner uploads (value / scale: exact for such values, with
// groups of columns too) and model.quantization=fp8 over every linear layer of a model.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <vector>

#include "runtime/fp8_quantization.hpp"
#include "runtime/model_weights.hpp"

using namespace troupe::runtime;

namespace {

bool is_nan_code(int c) {
  return (c & 0x7f) == 0x7f;
}

std::vector<float> normal_values(std::size_t n, unsigned seed, float spread) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, spread);
  std::vector<float> v(n);
  for (auto& x : v)
    x = dist(rng);
  return v;
}

} // namespace

TEST_CASE("f32_to_fp8_e4m3: every finite code round-trips through its value") {
  for (int c = 0; c < 256; ++c) {
    if (is_nan_code(c))
      continue;
    CAPTURE(c);
    CHECK(f32_to_fp8_e4m3(fp8_e4m3_to_f32(static_cast<std::uint8_t>(c))) == c);
  }
}

TEST_CASE("f32_to_fp8_e4m3: halfway between two codes goes to the even one, nearer goes to the nearer") {
  int checked = 0;
  for (int c = 0; c < 0x7e; ++c) { // positive codes and their next one, both finite
    const float lo = fp8_e4m3_to_f32(static_cast<std::uint8_t>(c));
    const float hi = fp8_e4m3_to_f32(static_cast<std::uint8_t>(c + 1));
    const float mid = (lo + hi) / 2; // exact: the values have 4 significant bits
    CAPTURE(c);
    CHECK(f32_to_fp8_e4m3(mid) == (c % 2 == 0 ? c : c + 1));
    CHECK(f32_to_fp8_e4m3(-mid) == ((c % 2 == 0 ? c : c + 1) | 0x80));
    CHECK(f32_to_fp8_e4m3(std::nextafter(mid, lo)) == c);
    CHECK(f32_to_fp8_e4m3(std::nextafter(mid, hi)) == c + 1);
    ++checked;
  }
  CHECK(checked == 126);
}

TEST_CASE("f32_to_fp8_e4m3 saturates beyond ±448 and keeps NaN a NaN") {
  CHECK(f32_to_fp8_e4m3(448.0f) == 0x7e);
  CHECK(f32_to_fp8_e4m3(464.0f) == 0x7e);
  CHECK(f32_to_fp8_e4m3(1e30f) == 0x7e);
  CHECK(f32_to_fp8_e4m3(INFINITY) == 0x7e);
  CHECK(f32_to_fp8_e4m3(-1e9f) == 0xfe);
  CHECK(is_nan_code(f32_to_fp8_e4m3(NAN)));
  CHECK(f32_to_fp8_e4m3(0x1p-12f) == 0x00); // far below the smallest subnormal, 2^-9
  CHECK(f32_to_fp8_e4m3(-0.0f) == 0x80);
}

TEST_CASE("quantize_fp8_rows: each row's largest value becomes ±448 x scale, every value a code times the scale") {
  const std::size_t rows = 9, columns = 40;
  std::vector<float> m = normal_values(rows * columns, 3, 0.02f);
  for (std::size_t c = 0; c < columns; ++c)
    m[4 * columns + c] = 0.0f; // a row of zeros: scale 1, codes 0
  m[7 * columns + 5] = -3.0f;    // an outlier: its row's scale follows it
  const std::vector<float> before = m;
  const fp8_scales s = quantize_fp8_rows(m, columns);
  REQUIRE(s.group == columns);
  REQUIRE(s.values.size() == rows);
  CHECK(s.values[4] == 1.0f);
  CHECK(s.values[7] == doctest::Approx(3.0f / 448.0f));
  for (std::size_t r = 0; r < rows; ++r) {
    float amax = 0.0f;
    for (std::size_t c = 0; c < columns; ++c)
      amax = std::max(amax, std::fabs(before[r * columns + c]));
    for (std::size_t c = 0; c < columns; ++c) {
      const float v = m[r * columns + c], was = before[r * columns + c];
      const float code = v / s.values[r];
      CHECK(fp8_e4m3_to_f32(f32_to_fp8_e4m3(code)) * s.values[r] == v);
      // Within half a step: e4m3 keeps 3 mantissa bits (relative 2^-4 at most) above 2^-6, steps
      // of 2^-9 below.
      CHECK(std::fabs(v - was) <= std::max(std::fabs(was) * 0x1p-4f, 0x1p-10f * s.values[r]) * 1.0001f);
      if (std::fabs(was) == amax && amax > 0)
        CHECK(std::fabs(v) == doctest::Approx(amax).epsilon(1e-6));
    }
  }
  std::vector<float> ragged(10);
  CHECK_THROWS_AS(quantize_fp8_rows(ragged, 3), std::invalid_argument);
}

TEST_CASE("fp8_codes gives back the codes of quantized values, one scale a row or per group of columns") {
  const std::size_t rows = 5, columns = 48;
  SUBCASE("a scale a row") {
    std::vector<float> m = normal_values(rows * columns, 7, 0.5f);
    const fp8_scales s = quantize_fp8_rows(m, columns);
    const auto codes = fp8_codes(m, columns, s);
    for (std::size_t i = 0; i < m.size(); ++i)
      CHECK(fp8_e4m3_to_f32(codes[i]) * s.values[i / columns] == m[i]);
  }
  SUBCASE("groups of 16 columns, as a block-wise checkpoint's") {
    fp8_scales s;
    s.group = 16;
    std::mt19937 rng(11);
    std::uniform_real_distribution<float> scale(1e-4f, 1e-1f);
    for (std::size_t i = 0; i < rows * columns / 16; ++i)
      s.values.push_back(scale(rng));
    std::vector<std::uint8_t> want(rows * columns);
    std::vector<float> m(rows * columns);
    for (std::size_t i = 0; i < m.size(); ++i) {
      auto c = static_cast<std::uint8_t>(rng() % 256);
      if (is_nan_code(c))
        c = 0x7e;
      want[i] = c;
      m[i] = fp8_e4m3_to_f32(c) * s.values[(i / columns) * (columns / 16) + (i % columns) / 16];
    }
    CHECK(fp8_codes(m, columns, s) == want);
  }
  fp8_scales wrong;
  wrong.group = 16;
  wrong.values.assign(3, 1.0f);
  std::vector<float> m(rows * columns);
  CHECK_THROWS_AS(fp8_codes(m, columns, wrong), std::invalid_argument);
}

TEST_CASE("quantize_linears_fp8 quantizes every linear layer a row at a time, and leaves FP8 ones as they are") {
  const std::size_t hidden = 32, q_width = 16, inter = 24;
  model_weights w;
  w.embed_tokens = normal_values(64 * hidden, 1, 0.02f);
  w.layers.resize(2);
  for (auto& l : w.layers) {
    l.q_proj = normal_values(q_width * hidden, 2, 0.02f);
    l.k_proj = normal_values(8 * hidden, 3, 0.02f);
    l.v_proj = normal_values(8 * hidden, 4, 0.02f);
    l.o_proj = normal_values(hidden * q_width, 5, 0.02f);
    l.gate_proj = normal_values(inter * hidden, 6, 0.02f);
    l.up_proj = normal_values(inter * hidden, 7, 0.02f);
    l.down_proj = normal_values(hidden * inter, 8, 0.02f);
  }
  // Layer 1's down_proj is FP8 already (a checkpoint's scales): kept.
  auto& kept = w.layers[1];
  kept.down_proj_fp8 = quantize_fp8_rows(kept.down_proj, inter);
  const auto kept_values = kept.down_proj;
  const auto embed = w.embed_tokens;
  quantize_linears_fp8(w, hidden);
  CHECK(w.embed_tokens == embed); // never quantized
  CHECK(kept.down_proj == kept_values);
  for (const auto& l : w.layers) {
    const std::pair<const std::vector<float>*, const fp8_scales*> linears[] = {
        {&l.q_proj, &l.q_proj_fp8},   {&l.k_proj, &l.k_proj_fp8},       {&l.v_proj, &l.v_proj_fp8},
        {&l.o_proj, &l.o_proj_fp8},   {&l.gate_proj, &l.gate_proj_fp8}, {&l.up_proj, &l.up_proj_fp8},
        {&l.down_proj, &l.down_proj_fp8}};
    for (const auto& [values, scales] : linears) {
      REQUIRE_FALSE(scales->empty());
      const std::size_t columns = scales->group;
      CHECK(values->size() == scales->values.size() * columns); // a scale per output row
      const auto codes = fp8_codes(*values, columns, *scales);
      for (std::size_t i = 0; i < values->size(); ++i)
        CHECK(fp8_e4m3_to_f32(codes[i]) * scales->values[i / columns] == (*values)[i]);
    }
    CHECK(l.o_proj_fp8.group == q_width);
    CHECK(l.down_proj_fp8.group == inter);
    CHECK(l.q_proj_fp8.group == hidden);
  }
}
