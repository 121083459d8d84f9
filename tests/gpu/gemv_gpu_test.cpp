// The small-batch GEMV matches a double-precision CPU reference, for every row count it
// serves, every number of warps a row, odd n and k with a partial last round of loads; it
// reads x only after the kernel that wrote x has finished, in a stream and inside a CUDA graph
// (it is launched as a programmatic dependent); and it declines what it cannot take. With a bias,
// it adds the bias to each output (the QKV projection of models with q/k/v biases). Inputs of
// bf16 and of fp16.
// Tolerance: |d| <= u |y| (one rounding of the output: u = 2^-8 for bf16, 2^-11 for fp16; 1e-6 |y|
// for fp32 output) + 1e-5 * max over rows of sum_k |x w| (fp32 accumulation in another order).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>

#include "kernels/cuda/cuda_graph.hpp"
#include "kernels/cuda/cuda_stream.hpp"
#include "kernels/cuda/gemv.hpp"
#include "kernels/cuda/random_fill.hpp"
#include "kernels/cuda/rms_norm.hpp"
#include "kernels/cuda/silu_and_mul.hpp"
#include "tests/gpu/gpu_test_support.hpp"

using namespace troupe::testing::gpu;
namespace kcu = troupe::kernels::cuda;
using bf16 = __nv_bfloat16;

TEST_CASE_TEMPLATE("cuda gemv matches the CPU reference", IO, bf16_to_bf16, bf16_to_float, half_to_half,
                   half_to_float) {
  using E = typename IO::in;
  using Out = typename IO::out;
  struct shape {
    int m, n, k;
  };
  // k = 4104: 513 vectors, one past two full rounds of 8 x 32; k = 8: a single vector, which
  // leaves every warp of a row but the first without a load; odd n leaves the last block's
  // second row (one warp a row) outside the output.
  for (auto [m, n, k] : {shape{1, 1, 8}, shape{1, 37, 136}, shape{2, 5, 4104}, shape{3, 129, 5120}, shape{4, 64, 13824},
                         shape{1, 3001, 64}, shape{4, 9, 8}, shape{1, 5121, 5120}}) {
    const auto [x, w, ref] = random_linear_case<E>(m, n, k);
    auto d_x = to_device<E>(x);
    auto d_w = to_device<E>(w);
    REQUIRE(kcu::gemv_applies(d_x.data(), d_w.data(), m, n, k));
    // 0: the launcher's own choice, gemv_split.
    for (int split : {0, 1, 2, 4, 8}) {
      CAPTURE(m);
      CAPTURE(n);
      CAPTURE(k);
      CAPTURE(split);
      auto d_y = poisoned<Out>(ref.y.size());
      REQUIRE((split == 0
                   ? kcu::gemv<Out>(d_x.data(), d_w.data(), d_y.data(), m, n, k, nullptr)
                   : kcu::gemv<Out>(d_x.data(), d_w.data(), d_y.data(), m, n, k, nullptr, split)) == cudaSuccess);
      sync_or_fail();
      check_close(from_device(d_y), ref.y, linear_tolerance<Out>(ref),
                  std::string("gemv of ") + dtype_name<E>() + " to " + dtype_name<Out>());
    }
  }
}

TEST_CASE_TEMPLATE("cuda gemv with a bias matches the CPU reference", IO, bf16_to_bf16, bf16_to_float, half_to_half,
                   half_to_float) {
  using E = typename IO::in;
  using Out = typename IO::out;
  struct shape {
    int m, n, k;
  };
  for (auto [m, n, k] : {shape{1, 37, 136}, shape{2, 5, 4104}, shape{1, 5121, 5120}, shape{4, 64, 13824}}) {
    CAPTURE(m);
    CAPTURE(n);
    CAPTURE(k);
    auto [x, w, ref] = random_linear_case<E>(m, n, k);
    std::mt19937 rng(n);
    auto bias = random_values(n, rng);
    round_through<E>(bias);
    for (int i = 0; i < m; ++i)
      for (int j = 0; j < n; ++j)
        ref.y[static_cast<std::size_t>(i) * n + j] += bias[j];
    auto d_x = to_device<E>(x);
    auto d_w = to_device<E>(w);
    auto d_bias = to_device<E>(bias);
    auto d_y = poisoned<Out>(ref.y.size());
    REQUIRE(kcu::gemv<Out>(d_x.data(), d_w.data(), d_bias.data(), d_y.data(), m, n, k, nullptr) == cudaSuccess);
    sync_or_fail();
    check_close(from_device(d_y), ref.y, linear_tolerance<Out>(ref),
                std::string("gemv of ") + dtype_name<E>() + " with a bias to " + dtype_name<Out>());
  }
}

// fp16 weights in fp16's subnormal range (below 2^-14) must count, as their exact values, and
// outputs far below 1 keep their precision (fp32 sums, no flush to zero).
TEST_CASE("cuda gemv of fp16 keeps subnormal weights and tiny outputs") {
  const int m = 1, n = 37, k = 4104;
  std::mt19937 rng(5);
  auto x = random_values(std::size_t(m) * k, rng, 1.0f);
  auto w = random_values(std::size_t(n) * k, rng, 1e-6f); // |w| < 2^-14: fp16 subnormals
  round_through<__half>(x);
  round_through<__half>(w);
  REQUIRE(std::count_if(w.begin(), w.end(), [](float v) { return v != 0.0f; }) > n * k / 2);
  const linear_reference ref = linear_layer_reference(x, w, m, n, k);
  auto d_x = to_device<__half>(x);
  auto d_w = to_device<__half>(w);
  auto d_y = poisoned<float>(ref.y.size());
  REQUIRE(kcu::gemv<float>(d_x.data(), d_w.data(), d_y.data(), m, n, k, nullptr) == cudaSuccess);
  sync_or_fail();
  check_close(from_device(d_y), ref.y, linear_tolerance<float>(ref), "fp16 gemv of subnormal weights");
  const auto largest =
      *std::max_element(ref.y.begin(), ref.y.end(), [](float a, float b) { return std::abs(a) < std::abs(b); });
  CHECK(std::abs(largest) > 0.0f);
  CHECK(std::abs(largest) < 1e-3f); // the outputs are tiny
}

TEST_CASE("cuda gemv reads x only after the kernel that wrote it, in a stream and in a CUDA graph") {
  const int m = 2, n = 4096, k = 5120;
  kcu::cuda_stream stream;
  kcu::device_buffer<bf16> d_x(std::size_t(m) * k), d_w(std::size_t(n) * k);
  REQUIRE(kcu::random_fill(d_w.data(), d_w.size(), 7, 0.0f, 0.02f, stream.get()) == cudaSuccess);

  // Each run first overwrites x with a new seed, then multiplies: a GEMV that started reading x
  // early would see the previous run's values (or the poison) in some rows.
  auto check_run = [&](std::uint64_t seed, auto&& run) {
    d_x.fill_bytes(0xff);
    auto d_y = poisoned<bf16>(std::size_t(m) * n);
    sync_or_fail(); // the poison (default stream) lands before the run (its own stream) starts
    run(seed, d_y);
    sync_or_fail();
    const auto x = from_device(d_x), w = from_device(d_w);
    const linear_reference ref = linear_layer_reference(x, w, m, n, k);
    check_close(from_device(d_y), ref.y, linear_tolerance<bf16>(ref), "gemv after the kernel writing x");
  };
  SUBCASE("stream order") {
    for (std::uint64_t seed = 1; seed <= 3; ++seed)
      check_run(seed, [&](std::uint64_t s, device_buffer<bf16>& y) {
        REQUIRE(kcu::random_fill(d_x.data(), d_x.size(), s, 0.0f, 1.0f, stream.get()) == cudaSuccess);
        REQUIRE(kcu::gemv<bf16>(d_x.data(), d_w.data(), y.data(), m, n, k, stream.get()) == cudaSuccess);
      });
  }
  SUBCASE("captured in a CUDA graph") {
    check_run(11, [&](std::uint64_t s, device_buffer<bf16>& y) {
      REQUIRE(cudaStreamBeginCapture(stream.get(), cudaStreamCaptureModeThreadLocal) == cudaSuccess);
      const cudaError_t fill = kcu::random_fill(d_x.data(), d_x.size(), s, 0.0f, 1.0f, stream.get());
      const cudaError_t gemv = kcu::gemv<bf16>(d_x.data(), d_w.data(), y.data(), m, n, k, stream.get());
      cudaGraph_t graph = nullptr;
      REQUIRE(cudaStreamEndCapture(stream.get(), &graph) == cudaSuccess);
      REQUIRE(fill == cudaSuccess);
      REQUIRE(gemv == cudaSuccess);
      kcu::cuda_graph exec(graph);
      REQUIRE(exec.launch(stream.get()) == cudaSuccess);
    });
  }
}

// RMSNorm of a few rows lets the GEMV after it start early (its first weight loads overlap the
// norm); SwiGLU does not. Either way the GEMV must read x only once the kernel ahead has written
// all of it: at the qkv and gate/up inputs (k = 5120) and the down input (k = 13824).
TEST_CASE("cuda gemv reads the whole output of the RMSNorm or SwiGLU before it") {
  const int n = 1024;
  kcu::cuda_stream stream;
  for (int m : {1, 4}) {
    CAPTURE(m);
    for (bool swiglu : {true, false}) {
      CAPTURE(swiglu);
      const int k = swiglu ? 13824 : 5120; // the 13B down and qkv inputs
      kcu::device_buffer<bf16> d_in(std::size_t(m) * (swiglu ? 2 * k : k)), d_x(std::size_t(m) * k),
          d_w(std::size_t(n) * k), d_norm(k);
      REQUIRE(kcu::random_fill(d_in.data(), d_in.size(), 21, 0.0f, 1.0f, stream.get()) == cudaSuccess);
      REQUIRE(kcu::random_fill(d_w.data(), d_w.size(), 22, 0.0f, 0.02f, stream.get()) == cudaSuccess);
      REQUIRE(kcu::random_fill(d_norm.data(), d_norm.size(), 23, 1.0f, 0.1f, stream.get()) == cudaSuccess);
      auto run = [&](cudaStream_t s, device_buffer<bf16>& y) {
        const cudaError_t first = swiglu ? kcu::silu_and_mul(d_in.data(), d_x.data(), m, k, s)
                                         : kcu::rms_norm(d_in.data(), d_norm.data(), d_x.data(), m, k, 1e-5f, s);
        return first != cudaSuccess ? first : kcu::gemv<bf16>(d_x.data(), d_w.data(), y.data(), m, n, k, s);
      };
      auto check = [&](device_buffer<bf16>& y) {
        const auto x = from_device(d_x), w = from_device(d_w);
        const linear_reference ref = linear_layer_reference(x, w, m, n, k);
        check_close(from_device(y), ref.y, linear_tolerance<bf16>(ref), "gemv after an early-starting kernel");
      };
      // In stream order, three times; then captured in a CUDA graph.
      for (int rep = 0; rep < 3; ++rep) {
        d_x.fill_bytes(0xff); // NaN: read before the kernel ahead wrote it, it would show
        auto d_y = poisoned<bf16>(std::size_t(m) * n);
        sync_or_fail();
        REQUIRE(run(stream.get(), d_y) == cudaSuccess);
        sync_or_fail();
        check(d_y);
      }
      d_x.fill_bytes(0xff);
      auto d_y = poisoned<bf16>(std::size_t(m) * n);
      sync_or_fail();
      REQUIRE(cudaStreamBeginCapture(stream.get(), cudaStreamCaptureModeThreadLocal) == cudaSuccess);
      const cudaError_t launched = run(stream.get(), d_y);
      cudaGraph_t graph = nullptr;
      REQUIRE(cudaStreamEndCapture(stream.get(), &graph) == cudaSuccess);
      REQUIRE(launched == cudaSuccess);
      kcu::cuda_graph exec(graph);
      REQUIRE(exec.launch(stream.get()) == cudaSuccess);
      sync_or_fail();
      check(d_y);
    }
  }
}

TEST_CASE("cuda gemv declines shapes and pointers it cannot take") {
  kcu::device_buffer<bf16> x(64), w(64);
  CHECK(kcu::gemv_applies(x.data(), w.data(), 1, 4, 16));
  CHECK(kcu::gemv_applies(x.data(), w.data(), kcu::gemv_max_rows, 1, 8));
  CHECK_FALSE(kcu::gemv_applies(x.data(), w.data(), 0, 4, 16));
  CHECK_FALSE(kcu::gemv_applies(x.data(), w.data(), kcu::gemv_max_rows + 1, 4, 16));
  CHECK_FALSE(kcu::gemv_applies(x.data(), w.data(), 1, 0, 16));
  CHECK_FALSE(kcu::gemv_applies(x.data(), w.data(), 1, 4, 12));     // k not a multiple of 8
  CHECK_FALSE(kcu::gemv_applies(x.data() + 1, w.data(), 1, 4, 16)); // x not 16-byte aligned
  CHECK_FALSE(kcu::gemv_applies(x.data(), w.data() + 4, 1, 4, 16)); // w not 16-byte aligned
  kcu::device_buffer<float> y(4);
  CHECK(kcu::gemv<float>(x.data() + 1, w.data(), y.data(), 1, 4, 16, nullptr) == cudaErrorInvalidValue);
  // Warps a row: a power of two up to gemv_max_split.
  for (int split : {-1, 0, 3, 6, kcu::gemv_max_split * 2})
    CHECK(kcu::gemv<float>(x.data(), w.data(), y.data(), 1, 4, 16, nullptr, split) == cudaErrorInvalidValue);
  CHECK(kcu::gemv<float>(x.data(), w.data(), y.data(), 1, 4, 16, nullptr, kcu::gemv_max_split) == cudaSuccess);
  sync_or_fail();
}

TEST_CASE("cuda gemv shares a row among as many warps as keep 4 loads a lane") {
  CHECK(kcu::gemv_split(5120) == 4);  // 13B qkv, o, gate/up, LM head: 5 vectors a lane
  CHECK(kcu::gemv_split(13824) == 8); // 13B down: 6.75
  CHECK(kcu::gemv_split(4096) == 4);  // 8B: 4
  CHECK(kcu::gemv_split(14336) == 8); // 8B down
  CHECK(kcu::gemv_split(1 << 20) == kcu::gemv_max_split);
  CHECK(kcu::gemv_split(2040) == 1); // 255 vectors: two warps would leave a lane 3.98
  CHECK(kcu::gemv_split(2048) == 2);
  CHECK(kcu::gemv_split(8) == 1);
}

TEST_CASE("cuda gemv is preferred for every layer of one row, and only there") {
  CHECK(kcu::gemv_preferred(1, 27648, 5120));       // 13B gate/up
  CHECK(kcu::gemv_preferred(1, 32000, 5120));       // 13B LM head
  CHECK(kcu::gemv_preferred(1, 15360, 5120));       // qkv
  CHECK(kcu::gemv_preferred(1, 5120, 5120));        // o
  CHECK(kcu::gemv_preferred(1, 5120, 13824));       // down
  CHECK_FALSE(kcu::gemv_preferred(2, 27648, 5120)); // two rows: cuBLASLt reuses weights as well
  CHECK_FALSE(kcu::gemv_preferred(2, 5120, 5120));
}
