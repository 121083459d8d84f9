// The INT4-weight GEMV matches a double-precision CPU reference built from (code - zero) * scale,
// for every row count it serves (1..16), odd n, k from one 32-column vector to 13,824, groups of
// 32, 64 and 128 columns, with and without a bias, bf16 and fp16 activations to their own type and
// to fp32; it reads x only after the kernel that wrote it, also replayed in a CUDA graph; and it and
// the dequantize kernel decline what they cannot take. The dequantized weight is bit-equal to the
// host's (code - zero) * scale in fp32 rounded once to float, bf16 or fp16. The codes are packed by
// runtime::pack_int4 (what the runner uploads), so these tests also hold the host's packing order to
// the kernels'.
// GEMV tolerance: |d| <= u |y| (one rounding of the output: u = 2^-8 for bf16, 2^-11 for fp16; 1e-6
// |y| for fp32 output) + 1e-5 * max over rows of sum_k |x w| (fp32 accumulation in another order).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cuda/cuda_graph.hpp"
#include "kernels/cuda/cuda_stream.hpp"
#include "kernels/cuda/int4_linear.hpp"
#include "kernels/cuda/random_fill.hpp"
#include "runtime/int4_packing.hpp"
#include "runtime/model_weights.hpp"
#include "tests/gpu/gpu_test_support.hpp"

using namespace troupe::testing::gpu;
namespace kcu = troupe::kernels::cuda;
namespace rt = troupe::runtime;
using bf16 = __nv_bfloat16;

namespace {

// An INT4 weight [n, k]: codes and zeros uniform over [0, 15], scales fp16 values in [0.5e-2,
// 1.5e-2] (AWQ stores fp16 scales); `values` the exact fp32 (code - zero) * scale.
struct int4_weight {
  int n = 0, k = 0, group = 0;
  std::vector<int> codes;
  rt::int4_groups groups;
  std::vector<float> values;
  rt::int4_packed packed;
};
int4_weight random_int4_weight(int n, int k, int group, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> code(0, 15);
  std::uniform_real_distribution<float> scale(0.5e-2f, 1.5e-2f);
  const std::size_t per_row = static_cast<std::size_t>(k / group);
  int4_weight w{n, k, group, std::vector<int>(std::size_t(n) * k),
                {static_cast<std::size_t>(group), std::vector<float>(n * per_row), std::vector<float>(n * per_row)},
                std::vector<float>(std::size_t(n) * k), {}};
  for (std::size_t i = 0; i < w.groups.scales.size(); ++i) {
    w.groups.scales[i] = rt::f16_to_f32(rt::f32_to_f16(scale(rng)));
    w.groups.zeros[i] = static_cast<float>(code(rng));
  }
  for (std::size_t i = 0; i < w.codes.size(); ++i) {
    const std::size_t g = (i / k) * per_row + (i % k) / group;
    w.codes[i] = code(rng);
    w.values[i] = static_cast<float>(w.codes[i] - static_cast<int>(w.groups.zeros[g])) * w.groups.scales[g];
  }
  w.packed = rt::pack_int4(w.values, static_cast<std::size_t>(k), w.groups);
  return w;
}

struct device_int4 {
  device_buffer<std::uint32_t> codes;
  device_buffer<float> groups;
  int group;
  kcu::int4_weight_view view() const {
    return {codes.data(), reinterpret_cast<const float2*>(groups.data()), group};
  }
};
device_int4 upload(const int4_weight& w) {
  return {to_device_raw(w.packed.codes), to_device_raw(w.packed.groups), w.group};
}

} // namespace

TEST_CASE_TEMPLATE("cuda int4 gemv matches the CPU reference", IO, bf16_to_bf16, bf16_to_float, half_to_half,
                   half_to_float) {
  using E = typename IO::in;
  using Out = typename IO::out;
  const float rtol = std::is_same_v<Out, float> ? 1e-6f : unit_roundoff<Out>();
  constexpr int max_m = kcu::int4_gemv_max_rows;
  // n = 1, 7: one tile, mostly padding; 509, 1027: odd, the last tile partly outside the output.
  // k = 32 and 96: the last 64-column vector half padding; 1,024; 5,120 and 13,824: 13B's widths.
  // Splits from 1 to 8 warps a tile (int4_gemv_split).
  for (int n : {1, 7, 509, 1027})
    for (int k : {32, 96, 1024, 5120, 13824})
      for (int group : {32, 64, 128}) {
        if (k % group != 0)
          continue;
        CAPTURE(n);
        CAPTURE(k);
        CAPTURE(group);
        const int4_weight w = random_int4_weight(n, k, group, static_cast<unsigned>(n * 131 + k * 7 + group));
        std::mt19937 rng(static_cast<unsigned>(n + k + group));
        auto x = random_values(std::size_t(max_m) * k, rng); // the first m rows serve each m
        auto bias = random_values(n, rng);
        round_through<E>(x);
        round_through<E>(bias);
        const linear_reference ref = linear_layer_reference(x, w.values, max_m, n, k);
        const device_int4 d_w = upload(w);
        auto d_x = to_device<E>(x);
        auto d_bias = to_device<E>(bias);
        for (int m = 1; m <= max_m; ++m) {
          REQUIRE(kcu::int4_gemv_applies(d_x.data(), d_w.view(), m, n, k));
          for (bool with_bias : {false, true}) {
            CAPTURE(m);
            CAPTURE(with_bias);
            std::vector<float> expected(ref.y.begin(), ref.y.begin() + std::size_t(m) * n);
            if (with_bias)
              for (int i = 0; i < m; ++i)
                for (int j = 0; j < n; ++j)
                  expected[std::size_t(i) * n + j] += bias[j];
            auto d_y = poisoned<Out>(expected.size());
            REQUIRE(kcu::int4_gemv<Out>(d_x.data(), d_w.view(), with_bias ? d_bias.data() : nullptr, d_y.data(), m,
                                        n, k, nullptr) == cudaSuccess);
            sync_or_fail();
            check_close(from_device(d_y), expected, {static_cast<float>(1e-5 * ref.largest_abs_sum), rtol},
                        std::string("int4 gemv of ") + dtype_name<E>() + " to " + dtype_name<Out>());
          }
        }
      }
}

TEST_CASE_TEMPLATE("cuda dequantize_int4 rounds (code - zero) times its scale once", E, float, bf16, __half) {
  for (int n : {7, 509})
    for (int k : {16, 48, 5120, 13824})
      for (int group : {16, 32, 128}) {
        if (k % group != 0)
          continue;
        for (int offset : {0, 1}) { // 1: out not aligned to a pair
          CAPTURE(n);
          CAPTURE(k);
          CAPTURE(group);
          CAPTURE(offset);
          const int4_weight w = random_int4_weight(n, k, group, static_cast<unsigned>(n + k * 3 + group));
          const device_int4 d_w = upload(w);
          auto d_out = poisoned<E>(std::size_t(n) * k + 8);
          REQUIRE(kcu::dequantize_int4(d_w.view(), d_out.data() + offset, n, k, nullptr) == cudaSuccess);
          sync_or_fail();
          const std::vector<E> got = download_raw(d_out);
          std::size_t bad = 0, first_bad = 0;
          for (std::size_t at = 0; at < w.values.size(); ++at) {
            const E want = encode<E>(w.values[at]);
            if (std::memcmp(&want, &got[at + offset], sizeof(E)) != 0 && bad++ == 0)
              first_bad = at;
          }
          INFO(bad << " of " << w.values.size() << " elements differ; first at " << first_bad << ": got "
                   << decode(got[first_bad + offset]) << ", want " << w.values[first_bad]);
          CHECK(bad == 0);
        }
      }
}

TEST_CASE("cuda int4 gemv reads x only after the kernel that wrote it, also replayed in a CUDA graph") {
  const int m = 4, n = 4096, k = 5120, group = 128;
  kcu::cuda_stream stream;
  const int4_weight w = random_int4_weight(n, k, group, 3);
  const device_int4 d_w = upload(w);
  kcu::device_buffer<bf16> d_x(std::size_t(m) * k);
  auto check = [&](const device_buffer<bf16>& y) {
    const linear_reference ref = linear_layer_reference(from_device(d_x), w.values, m, n, k);
    check_close(from_device(y), ref.y, {static_cast<float>(1e-5 * ref.largest_abs_sum), unit_roundoff<bf16>()},
                "int4 gemv after the kernel writing x");
  };
  SUBCASE("stream order") {
    for (std::uint64_t seed = 1; seed <= 3; ++seed) {
      d_x.fill_bytes(0xff); // NaN: read before the fill wrote it, it would show
      auto d_y = poisoned<bf16>(std::size_t(m) * n);
      sync_or_fail(); // the poison (default stream) lands before the run (its own stream) starts
      REQUIRE(kcu::random_fill(d_x.data(), d_x.size(), seed, 0.0f, 1.0f, stream.get()) == cudaSuccess);
      REQUIRE(kcu::int4_gemv<bf16, bf16>(d_x.data(), d_w.view(), nullptr, d_y.data(), m, n, k, stream.get()) ==
              cudaSuccess);
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
    const cudaError_t gemv =
        kcu::int4_gemv<bf16, bf16>(d_x.data(), d_w.view(), nullptr, d_y.data(), m, n, k, stream.get());
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

TEST_CASE("cuda int4 gemv and dequantize_int4 decline shapes and pointers they cannot take") {
  kcu::device_buffer<bf16> x(kcu::int4_gemv_max_rows * 128 + 8), bias(4);
  kcu::device_buffer<std::uint32_t> codes(16 * 128 / 8 + 4); // n = 4 padded to a tile of 16 rows
  kcu::device_buffer<float> groups(2 * 4 * 4 + 2), y(kcu::int4_gemv_max_rows * 4);
  x.fill_bytes(0); // defined inputs for the launches that run
  bias.fill_bytes(0);
  codes.fill_bytes(0);
  groups.fill_bytes(0);
  const auto* g = reinterpret_cast<const float2*>(groups.data());
  const kcu::int4_weight_view ok{codes.data(), g, 32};
  CHECK(kcu::int4_gemv_applies(x.data(), ok, 1, 4, 128));
  CHECK(kcu::int4_gemv_applies(x.data(), ok, kcu::int4_gemv_max_rows, 4, 128));
  CHECK(kcu::int4_gemv_applies(x.data(), {codes.data(), g, 128}, 1, 4, 128));
  struct refusal {
    const char* why;
    const bf16* x;
    kcu::int4_weight_view w;
    int m, k;
  };
  for (const auto& [why, rx, w, m, k] : {
           refusal{"m = 0", x.data(), ok, 0, 128},
           refusal{"m = 17", x.data(), ok, kcu::int4_gemv_max_rows + 1, 128},
           refusal{"k = 48", x.data(), {codes.data(), g, 48}, 1, 48},
           refusal{"k = 0", x.data(), ok, 1, 0},
           refusal{"group 16", x.data(), {codes.data(), g, 16}, 1, 128},
           refusal{"group 48", x.data(), {codes.data(), g, 48}, 1, 96},
           refusal{"group 64 does not divide k = 96", x.data(), {codes.data(), g, 64}, 1, 96},
           refusal{"group 0", x.data(), {codes.data(), g, 0}, 1, 128},
           refusal{"group 256 > k = 128", x.data(), {codes.data(), g, 256}, 1, 128},
           refusal{"x not 16-byte aligned", x.data() + 1, ok, 1, 128},
           refusal{"codes not 16-byte aligned", x.data(), {codes.data() + 1, g, 32}, 1, 128},
           refusal{"groups not 8-byte aligned", x.data(),
                   {codes.data(), reinterpret_cast<const float2*>(groups.data() + 1), 32}, 1, 128},
           refusal{"no groups", x.data(), {codes.data(), nullptr, 32}, 1, 128},
           refusal{"no codes", x.data(), {nullptr, g, 32}, 1, 128},
       }) {
    CAPTURE(why);
    CHECK_FALSE(kcu::int4_gemv_applies(rx, w, m, 4, k));
    CHECK(kcu::int4_gemv<float>(rx, w, bias.data(), y.data(), m, 4, k, nullptr) == cudaErrorInvalidValue);
    CHECK(kcu::int4_gemv<bf16, bf16>(rx, w, nullptr, reinterpret_cast<bf16*>(y.data()), m, 4, k, nullptr) ==
          cudaErrorInvalidValue);
  }
  CHECK_FALSE(kcu::int4_gemv_applies(x.data(), ok, 1, 0, 128)); // n = 0
  kcu::device_buffer<float> out(4 * 128);
  for (int group : {0, 8, 24, -16, 256}) { // not a positive multiple of 16 dividing k = 128
    CAPTURE(group);
    CHECK(kcu::dequantize_int4({codes.data(), g, group}, out.data(), 4, 128, nullptr) == cudaErrorInvalidValue);
  }
  CHECK(kcu::dequantize_int4(ok, out.data(), 4, 24, nullptr) == cudaErrorInvalidValue); // k = 24: not k-steps of 16
  CHECK(kcu::dequantize_int4(ok, out.data(), 0, 128, nullptr) == cudaErrorInvalidValue); // n = 0
  CHECK(kcu::dequantize_int4({nullptr, g, 32}, out.data(), 4, 128, nullptr) == cudaErrorInvalidValue);
  CHECK(kcu::dequantize_int4(ok, out.data(), 4, 128, nullptr) == cudaSuccess);
  CHECK(kcu::int4_gemv<float>(x.data(), ok, bias.data(), y.data(), kcu::int4_gemv_max_rows, 4, 128, nullptr) ==
        cudaSuccess);
  sync_or_fail();
}
