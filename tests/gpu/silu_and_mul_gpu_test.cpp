// The CUDA SwiGLU matches the CPU reference, including batches taller than one grid's 65535 rows.
// Tolerances: fp32 |d| <= 1e-6 + 1e-5 |x| (expf vs std::exp, a few ulp);
// bf16 |d| <= 1e-6 + 2^-7 |x|, fp16 1e-6 + 2^-10 |x| (one rounding of the output, twice its
// unit roundoff).
#include <doctest/doctest.h>

#include "kernels/cpu/cpu_kernels.hpp"
#include "kernels/cuda/silu_and_mul.hpp"
#include "tests/gpu/gpu_test_support.hpp"

using namespace troupe::testing::gpu;
namespace kcu = troupe::kernels::cuda;

TEST_CASE_TEMPLATE("cuda silu_and_mul matches the CPU reference", T, float, __nv_bfloat16, __half) {
  const tolerance tol = std::is_same_v<T, float> ? tolerance{1e-6f, 1e-5f} : tolerance{1e-6f, 2 * unit_roundoff<T>()};
  struct shape {
    int rows, inter;
  };
  // Packs (element_pack.cuh) of 8 bf16 / 4 fp32 (1000, 13824), 4 (172), 2 (6) and 1 (1, 4097, 3).
  for (auto [rows, inter] :
       {shape{5, 1}, shape{5, 172}, shape{3, 1000}, shape{2, 4097}, shape{70001, 3}, shape{4, 6}, shape{3, 13824}}) {
    CAPTURE(rows);
    CAPTURE(inter);
    std::mt19937 rng(rows * 7919 + inter);
    auto gate_up = random_values(static_cast<std::size_t>(rows) * 2 * inter, rng, 3.0f);
    round_through<T>(gate_up);
    std::vector<float> expected(static_cast<std::size_t>(rows) * inter);
    troupe::kernels::cpu::silu_and_mul(gate_up, rows, inter, expected);

    auto d_in = to_device<T>(gate_up);
    auto d_out = poisoned<T>(expected.size());
    REQUIRE(kcu::silu_and_mul<T>(d_in.data(), d_out.data(), rows, inter, nullptr) == cudaSuccess);
    sync_or_fail();
    check_close(from_device(d_out), expected, tol, std::string("silu_and_mul ") + dtype_name<T>());
  }
}

TEST_CASE_TEMPLATE("cuda silu_and_mul reads and writes unaligned rows element by element", T, float, __nv_bfloat16,
                   __half) {
  // Arrays that start one element past an alignment: the launcher must fall back to packs of one.
  const tolerance tol = std::is_same_v<T, float> ? tolerance{1e-6f, 1e-5f} : tolerance{1e-6f, 2 * unit_roundoff<T>()};
  const int rows = 3, inter = 64;
  std::mt19937 rng(17);
  auto gate_up = random_values(static_cast<std::size_t>(rows) * 2 * inter + 1, rng, 3.0f);
  round_through<T>(gate_up);
  std::vector<float> expected(static_cast<std::size_t>(rows) * inter + 1, std::nanf(""));
  troupe::kernels::cpu::silu_and_mul(std::span<const float>(gate_up).subspan(1), rows, inter,
                                     std::span<float>(expected).subspan(1));
  auto d_in = to_device<T>(gate_up);
  auto d_out = poisoned<T>(expected.size());
  REQUIRE(kcu::silu_and_mul<T>(d_in.data() + 1, d_out.data() + 1, rows, inter, nullptr) == cudaSuccess);
  sync_or_fail();
  check_close(from_device(d_out), expected, tol, std::string("unaligned silu_and_mul ") + dtype_name<T>());
}

TEST_CASE_TEMPLATE("cuda gelu_tanh_and_mul (GeGLU) matches the CPU reference", T, float, __nv_bfloat16, __half) {
  // tanhf against std::tanh: a few ulp, as expf for SwiGLU.
  const tolerance tol = std::is_same_v<T, float> ? tolerance{1e-6f, 1e-5f} : tolerance{1e-6f, 2 * unit_roundoff<T>()};
  struct shape {
    int rows, inter;
  };
  for (auto [rows, inter] : {shape{5, 1}, shape{5, 172}, shape{3, 2816}, shape{2, 4097}, shape{70001, 3}}) {
    CAPTURE(rows);
    CAPTURE(inter);
    std::mt19937 rng(rows * 131 + inter);
    auto gate_up = random_values(static_cast<std::size_t>(rows) * 2 * inter, rng, 4.0f);
    round_through<T>(gate_up);
    std::vector<float> expected(static_cast<std::size_t>(rows) * inter);
    troupe::kernels::cpu::gelu_tanh_and_mul(gate_up, rows, inter, expected);

    auto d_in = to_device<T>(gate_up);
    auto d_out = poisoned<T>(expected.size());
    REQUIRE(kcu::gelu_tanh_and_mul<T>(d_in.data(), d_out.data(), rows, inter, nullptr) == cudaSuccess);
    sync_or_fail();
    check_close(from_device(d_out), expected, tol, std::string("gelu_tanh_and_mul ") + dtype_name<T>());
  }
}
