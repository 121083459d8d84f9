// The FP8-weight GEMV matches a double-precision CPU reference built from the decoded e4m3 codes
// times their scales (runtime::fp8_e4m3_to_f32, every finite code), for every row count it serves
// (1..8), odd n, k from one 16-column vector to 5,120, scales per row (group == k), per 128 and per
// 16 columns, with and without a bias, bf16 and fp16 activations to their own type and to fp32; it
// reads x only after the kernel that wrote it, also replayed in a CUDA graph; and it and the
// dequantize kernel decline what they cannot take. The dequantized weight is bit-equal to the host's
// e4m3(code) * scale in fp32 rounded once to float, bf16 or fp16.
// GEMV tolerance: |d| <= u |y| (one rounding of the output: u = 2^-8 for bf16, 2^-11 for fp16; 1e-6
// |y| for fp32 output) + 1e-5 * max over rows of sum_k |x w| (fp32 accumulation in another order).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/cuda/cuda_graph.hpp"
#include "kernels/cuda/cuda_stream.hpp"
#include "kernels/cuda/fp8_linear.hpp"
#include "kernels/cuda/random_fill.hpp"
#include "runtime/model_weights.hpp"
#include "tests/gpu/gpu_test_support.hpp"

using namespace troupe::testing::gpu;
namespace kcu = troupe::kernels::cuda;
using bf16 = __nv_bfloat16;
using troupe::runtime::fp8_e4m3_to_f32;

namespace {

// An FP8 weight [n, k] with a scale per row and group of columns: codes uniform over every finite
// e4m3 value (0x7f and 0xff are the NaNs), scales uniform in [0.5e-2, 1.5e-2].
struct fp8_weight {
  int n = 0, k = 0, group = 0;
  std::vector<std::uint8_t> codes;
  std::vector<float> scales;
  float scale(int row, int col) const { return scales[std::size_t(row) * (k / group) + col / group]; }
};
fp8_weight random_fp8_weight(int n, int k, int group, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> code(0, 253); // 254 finite codes: skip 0x7f and 0xff
  std::uniform_real_distribution<float> scale(0.5e-2f, 1.5e-2f);
  fp8_weight w{n, k, group, std::vector<std::uint8_t>(std::size_t(n) * k),
               std::vector<float>(std::size_t(n) * (k / group))};
  for (auto& c : w.codes) {
    const int v = code(rng);
    c = static_cast<std::uint8_t>(v < 0x7f ? v : v + 1); // 0..0x7e, 0x80..0xfe
  }
  for (auto& s : w.scales)
    s = scale(rng);
  return w;
}

// y[m, n] = x[m, k] · wᵀ in double, w[i][j] = e4m3(code) * scale exactly; per row of x the largest
// sum_k |x w| over its outputs.
struct fp8_reference {
  std::vector<double> y;
  std::vector<double> abs_sum;
};
fp8_reference reference(const std::vector<float>& x, const fp8_weight& w, int m) {
  const int n = w.n, k = w.k;
  std::vector<double> row(k);
  fp8_reference r{std::vector<double>(std::size_t(m) * n), std::vector<double>(m, 0.0)};
  for (int j = 0; j < n; ++j) {
    for (int c = 0; c < k; ++c)
      row[c] = static_cast<double>(fp8_e4m3_to_f32(w.codes[std::size_t(j) * k + c])) * w.scale(j, c);
    for (int i = 0; i < m; ++i) {
      double sum = 0.0, abs_sum = 0.0;
      for (int c = 0; c < k; ++c) {
        const double p = static_cast<double>(x[std::size_t(i) * k + c]) * row[c];
        sum += p;
        abs_sum += std::abs(p);
      }
      r.y[std::size_t(i) * n + j] = sum;
      r.abs_sum[i] = std::max(r.abs_sum[i], abs_sum);
    }
  }
  return r;
}

kcu::fp8_weight_view view_of(const device_buffer<std::uint8_t>& codes, const device_buffer<float>& scales, int group) {
  return {codes.data(), scales.data(), group};
}

// The groups a weight of k columns is tested with: one scale a row, then 128 and 16 columns where
// they divide k and differ from it.
std::vector<int> groups_for(int k) {
  std::vector<int> groups{k};
  for (int g : {128, 16})
    if (k % g == 0 && g != k)
      groups.push_back(g);
  return groups;
}

} // namespace

TEST_CASE_TEMPLATE("cuda fp8 gemv matches the CPU reference", IO, bf16_to_bf16, bf16_to_float, half_to_half,
                   half_to_float) {
  using E = typename IO::in;
  using Out = typename IO::out;
  const float rtol = std::is_same_v<Out, float> ? 1e-6f : unit_roundoff<Out>();
  constexpr int max_m = kcu::fp8_gemv_max_rows;
  // n = 1: a single row (the second warp of every block idle); 7, 509, 1027: odd, a block's last
  // row outside the output. k = 16: one vector; 48: three, fewer than a warp; 5,120: 13B's width.
  for (int n : {1, 7, 509, 1027})
    for (int k : {16, 48, 1024, 5120})
      for (int group : groups_for(k)) {
        CAPTURE(n);
        CAPTURE(k);
        CAPTURE(group);
        const fp8_weight w = random_fp8_weight(n, k, group, static_cast<unsigned>(n * 131 + k * 7 + group));
        std::mt19937 rng(static_cast<unsigned>(n + k + group));
        auto x = random_values(std::size_t(max_m) * k, rng); // the first m rows serve each m
        auto bias = random_values(n, rng);
        round_through<E>(x);
        round_through<E>(bias);
        const fp8_reference ref = reference(x, w, max_m);
        auto d_codes = to_device_raw(w.codes);
        auto d_scales = to_device_raw(w.scales);
        auto d_x = to_device<E>(x);
        auto d_bias = to_device<E>(bias);
        const auto view = view_of(d_codes, d_scales, group);
        for (int m = 1; m <= max_m; ++m) {
          REQUIRE(kcu::fp8_gemv_applies(d_x.data(), view, m, n, k));
          double abs_sum = 0.0;
          for (int i = 0; i < m; ++i)
            abs_sum = std::max(abs_sum, ref.abs_sum[i]);
          for (bool with_bias : {false, true}) {
            CAPTURE(m);
            CAPTURE(with_bias);
            std::vector<float> expected(std::size_t(m) * n);
            for (int i = 0; i < m; ++i)
              for (int j = 0; j < n; ++j)
                expected[std::size_t(i) * n + j] =
                    static_cast<float>(ref.y[std::size_t(i) * n + j] + (with_bias ? bias[j] : 0.0));
            auto d_y = poisoned<Out>(expected.size());
            REQUIRE(kcu::fp8_gemv<Out>(d_x.data(), view, with_bias ? d_bias.data() : nullptr, d_y.data(), m, n, k,
                                       nullptr) == cudaSuccess);
            sync_or_fail();
            check_close(from_device(d_y), expected, {static_cast<float>(1e-5 * abs_sum), rtol},
                        std::string("fp8 gemv of ") + dtype_name<E>() + " to " + dtype_name<Out>());
          }
        }
      }
}

TEST_CASE_TEMPLATE("cuda dequantize_fp8 rounds e4m3 times its scale once", E, float, bf16, __half) {
  for (int n : {7, 509})
    // k = 172 (stories260k's down_proj): not vectors of 16, one element a thread; groups of 4 too.
    for (int k : {48, 5120, 172})
      for (int group : k == 172 ? std::vector<int>{172, 4} : groups_for(k))
        for (int offset : {0, 1}) { // 1: codes not 16-byte aligned (byte loads)
          CAPTURE(n);
          CAPTURE(k);
          CAPTURE(group);
          CAPTURE(offset);
          const fp8_weight w = random_fp8_weight(n, k, group, static_cast<unsigned>(n + k * 3 + group));
          std::vector<std::uint8_t> padded(w.codes.size() + 16, 0);
          std::copy(w.codes.begin(), w.codes.end(), padded.begin() + offset);
          auto d_codes = to_device_raw(padded);
          auto d_scales = to_device_raw(w.scales);
          auto d_out = poisoned<E>(std::size_t(n) * k);
          const kcu::fp8_weight_view view{d_codes.data() + offset, d_scales.data(), group};
          REQUIRE(kcu::dequantize_fp8(view, d_out.data(), n, k, nullptr) == cudaSuccess);
          sync_or_fail();
          const std::vector<E> got = download_raw(d_out);
          std::size_t bad = 0, first_bad = 0;
          for (int i = 0; i < n; ++i)
            for (int j = 0; j < k; ++j) {
              const std::size_t at = std::size_t(i) * k + j;
              const E want = encode<E>(fp8_e4m3_to_f32(w.codes[at]) * w.scale(i, j));
              if (std::memcmp(&want, &got[at], sizeof(E)) != 0 && bad++ == 0)
                first_bad = at;
            }
          INFO(bad << " of " << got.size() << " elements differ; first at " << first_bad << ": got "
                   << decode(got[first_bad]) << ", code " << int(w.codes[first_bad]));
          CHECK(bad == 0);
        }
}

TEST_CASE("cuda fp8 gemv reads x only after the kernel that wrote it, also replayed in a CUDA graph") {
  const int m = 4, n = 4096, k = 5120, group = 128;
  kcu::cuda_stream stream;
  const fp8_weight w = random_fp8_weight(n, k, group, 3);
  auto d_codes = to_device_raw(w.codes);
  auto d_scales = to_device_raw(w.scales);
  const auto view = view_of(d_codes, d_scales, group);
  kcu::device_buffer<bf16> d_x(std::size_t(m) * k);
  auto check = [&](const device_buffer<bf16>& y) {
    const fp8_reference ref = reference(from_device(d_x), w, m);
    const double abs_sum = *std::max_element(ref.abs_sum.begin(), ref.abs_sum.end());
    const std::vector<float> expected(ref.y.begin(), ref.y.end());
    check_close(from_device(y), expected, {static_cast<float>(1e-5 * abs_sum), unit_roundoff<bf16>()},
                "fp8 gemv after the kernel writing x");
  };
  SUBCASE("stream order") {
    for (std::uint64_t seed = 1; seed <= 3; ++seed) {
      d_x.fill_bytes(0xff); // NaN: read before the fill wrote it, it would show
      auto d_y = poisoned<bf16>(std::size_t(m) * n);
      sync_or_fail(); // the poison (default stream) lands before the run (its own stream) starts
      REQUIRE(kcu::random_fill(d_x.data(), d_x.size(), seed, 0.0f, 1.0f, stream.get()) == cudaSuccess);
      REQUIRE(kcu::fp8_gemv<bf16, bf16>(d_x.data(), view, nullptr, d_y.data(), m, n, k, stream.get()) == cudaSuccess);
      sync_or_fail();
      check(d_y);
    }
  }
  SUBCASE("captured once in a CUDA graph, replayed twice") {
    auto d_y = poisoned<bf16>(std::size_t(m) * n);
    d_x.fill_bytes(0xff);
    sync_or_fail();
    REQUIRE(cudaStreamBeginCapture(stream.get(), cudaStreamCaptureModeThreadLocal) == cudaSuccess);
    const cudaError_t fill = kcu::random_fill(d_x.data(), d_x.size(), 11, 0.0f, 1.0f, stream.get());
    const cudaError_t gemv = kcu::fp8_gemv<bf16, bf16>(d_x.data(), view, nullptr, d_y.data(), m, n, k, stream.get());
    cudaGraph_t graph = nullptr;
    REQUIRE(cudaStreamEndCapture(stream.get(), &graph) == cudaSuccess);
    REQUIRE(fill == cudaSuccess);
    REQUIRE(gemv == cudaSuccess);
    kcu::cuda_graph exec(graph);
    REQUIRE(exec.launch(stream.get()) == cudaSuccess);
    sync_or_fail();
    check(d_y);
    const auto first = download_raw(d_y);
    d_x.fill_bytes(0xff);
    d_y.fill_bytes(0xff);
    sync_or_fail();
    REQUIRE(exec.launch(stream.get()) == cudaSuccess);
    sync_or_fail();
    const auto second = download_raw(d_y);
    CHECK(std::memcmp(first.data(), second.data(), first.size() * sizeof(bf16)) == 0);
  }
}

TEST_CASE("cuda fp8 gemv and dequantize_fp8 decline shapes and pointers they cannot take") {
  kcu::device_buffer<bf16> x(kcu::fp8_gemv_max_rows * 64 + 8), bias(4);
  kcu::device_buffer<std::uint8_t> codes(4 * 64);
  kcu::device_buffer<float> scales(4 * 4), y(kcu::fp8_gemv_max_rows * 4);
  x.fill_bytes(0); // defined inputs for the launches that run
  bias.fill_bytes(0);
  codes.fill_bytes(0);
  scales.fill_bytes(0);
  const kcu::fp8_weight_view ok{codes.data(), scales.data(), 16};
  CHECK(kcu::fp8_gemv_applies(x.data(), ok, 1, 4, 64));
  CHECK(kcu::fp8_gemv_applies(x.data(), ok, kcu::fp8_gemv_max_rows, 4, 64));
  CHECK(kcu::fp8_gemv_applies(x.data(), {codes.data(), scales.data(), 64}, 1, 4, 64));
  struct refusal {
    const char* why;
    const bf16* x;
    kcu::fp8_weight_view w;
    int m, k;
  };
  for (const auto& [why, rx, w, m, k] : {
           refusal{"m = 0", x.data(), ok, 0, 64},
           refusal{"m = 9", x.data(), ok, kcu::fp8_gemv_max_rows + 1, 64},
           refusal{"k = 24", x.data(), {codes.data(), scales.data(), 24}, 1, 24},
           refusal{"k = 0", x.data(), ok, 1, 0},
           refusal{"group 24", x.data(), {codes.data(), scales.data(), 24}, 1, 48},
           refusal{"group 32 does not divide k = 48", x.data(), {codes.data(), scales.data(), 32}, 1, 48},
           refusal{"group 0", x.data(), {codes.data(), scales.data(), 0}, 1, 64},
           refusal{"group 128 > k = 64", x.data(), {codes.data(), scales.data(), 128}, 1, 64},
           refusal{"x not 16-byte aligned", x.data() + 1, ok, 1, 64},
           refusal{"codes not 16-byte aligned", x.data(), {codes.data() + 1, scales.data(), 16}, 1, 64},
           refusal{"no scales", x.data(), {codes.data(), nullptr, 16}, 1, 64},
       }) {
    CAPTURE(why);
    CHECK_FALSE(kcu::fp8_gemv_applies(rx, w, m, 4, k));
    CHECK(kcu::fp8_gemv<float>(rx, w, bias.data(), y.data(), m, 4, k, nullptr) == cudaErrorInvalidValue);
    CHECK(kcu::fp8_gemv<bf16, bf16>(rx, w, nullptr, reinterpret_cast<bf16*>(y.data()), m, 4, k, nullptr) ==
          cudaErrorInvalidValue);
  }
  CHECK_FALSE(kcu::fp8_gemv_applies(x.data(), ok, 1, 0, 64)); // n = 0
  kcu::device_buffer<float> out(4 * 64);
  for (int group : {0, 32, 20, -16}) { // not a positive divisor of k = 48
    CAPTURE(group);
    CHECK(kcu::dequantize_fp8({codes.data(), scales.data(), group}, out.data(), 4, 48, nullptr) ==
          cudaErrorInvalidValue);
  }
  CHECK(kcu::dequantize_fp8(ok, out.data(), 4, 24, nullptr) == cudaErrorInvalidValue); // k = 24: not groups of 16
  CHECK(kcu::dequantize_fp8(ok, out.data(), 4, 48, nullptr) == cudaSuccess);
  CHECK(kcu::fp8_gemv<float>(x.data(), ok, bias.data(), y.data(), kcu::fp8_gemv_max_rows, 4, 64, nullptr) ==
        cudaSuccess);
  sync_or_fail();
}

TEST_CASE("cuda fp8 gemv shares a row among as many warps as keep 4 vectors of codes a lane") {
  CHECK(kcu::fp8_gemv_split(5120) == 2);  // 13B qkv, o, gate/up: 320 vectors, 5 a lane
  CHECK(kcu::fp8_gemv_split(13824) == 4); // 13B down: 864 vectors, 6.75 a lane
  CHECK(kcu::fp8_gemv_split(4096) == 2);
  CHECK(kcu::fp8_gemv_split(4080) == 1); // 255 vectors: two warps would leave a lane 3.98
  CHECK(kcu::fp8_gemv_split(1 << 20) == 8);
  CHECK(kcu::fp8_gemv_split(16) == 1);
}
