// cuBLASLt behind cublaslt_gemm: linear() and every algorithm the heuristic offers for the same
// call (linear_candidate, what bench_kernels_gpu --gemm-candidates times) match a double-precision
// CPU reference, for decode and prefill row counts, bf16 and fp32, and odd sizes; so does linear()
// with a bias (cuBLASLt's epilogue), each call its own bias; bad calls get a status, not a launch.
// Tolerance: |d| <= 2^-8 |y| (one bf16 rounding of the output; 1e-6 |y| for fp32) + 1e-5 * max over
// outputs of sum_k |x w| (fp32 accumulation in an order of the algorithm's own, never TF32).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "kernels/cuda/cublaslt_gemm.hpp"
#include "tests/gpu/gpu_test_support.hpp"

using namespace troupe::testing::gpu;
namespace kcu = troupe::kernels::cuda;
using bf16 = __nv_bfloat16;

namespace {

template <class T>
kcu::gemm_type type_of() {
  return std::is_same_v<T, float>    ? kcu::gemm_type::f32
         : std::is_same_v<T, __half> ? kcu::gemm_type::f16
                                     : kcu::gemm_type::bf16;
}

} // namespace

TEST_CASE_TEMPLATE("cuda cublaslt_gemm: linear and every heuristic candidate match the CPU reference", T, bf16, __half,
                   float) {
  struct shape {
    int m, n, k;
  };
  kcu::cublaslt_gemm gemm;
  // Decode rows (1, 12), a prefill chunk (130), and sizes that are not multiples of a tile.
  for (auto [m, n, k] : {shape{1, 384, 512}, shape{12, 257, 136}, shape{130, 96, 1000}, shape{7, 1000, 64}}) {
    CAPTURE(m);
    CAPTURE(n);
    CAPTURE(k);
    const auto [x, w, ref] = random_linear_case<T>(m, n, k);
    const tolerance tol = linear_tolerance<T>(ref);
    auto d_x = to_device<T>(x);
    auto d_w = to_device<T>(w);
    const auto type = type_of<T>();

    auto d_y = poisoned<T>(ref.y.size());
    REQUIRE(gemm.linear(d_x.data(), d_w.data(), d_y.data(), m, n, k, type, type, nullptr) == CUBLAS_STATUS_SUCCESS);
    sync_or_fail();
    check_close(from_device(d_y), ref.y, tol, std::string("linear, ") + dtype_name<T>());

    const int found = gemm.candidate_count(d_x.data(), d_w.data(), d_y.data(), m, n, k, type, type);
    CHECK(found >= 1);
    CHECK(found <= kcu::cublaslt_gemm::max_candidates);
    for (int i = 0; i < found; ++i) {
      CAPTURE(i);
      auto d_yi = poisoned<T>(ref.y.size());
      REQUIRE(gemm.linear_candidate(i, d_x.data(), d_w.data(), d_yi.data(), m, n, k, type, type, nullptr) ==
              CUBLAS_STATUS_SUCCESS);
      sync_or_fail();
      check_close(from_device(d_yi), ref.y, tol, "candidate " + std::to_string(i) + ", " + dtype_name<T>());
    }
    auto d_unused = poisoned<T>(ref.y.size());
    CHECK(gemm.linear_candidate(found, d_x.data(), d_w.data(), d_unused.data(), m, n, k, type, type, nullptr) ==
          CUBLAS_STATUS_INVALID_VALUE);
    CHECK(gemm.linear_candidate(-1, d_x.data(), d_w.data(), d_unused.data(), m, n, k, type, type, nullptr) ==
          CUBLAS_STATUS_INVALID_VALUE);
  }
}

// One plan serves every layer of a shape, so the bias pointer is set on each call: two biases of
// one alignment in turn (one plan: the plan key holds the bias's alignment, so the second call
// finds the first call's pointer in the plan), then a bias only 4-byte aligned (another plan: the
// heuristic is told the pointer's alignment), then the first bias again, then the same shape
// without a bias (another plan).
TEST_CASE_TEMPLATE("cuda cublaslt_gemm: linear with a bias adds each call's own bias", T, bf16, __half, float) {
  struct shape {
    int m, n, k;
  };
  kcu::cublaslt_gemm gemm;
  const auto type = type_of<T>();
  for (auto [m, n, k] : {shape{2, 384, 512}, shape{12, 257, 136}, shape{130, 96, 1000}}) {
    CAPTURE(m);
    CAPTURE(n);
    CAPTURE(k);
    const auto [x, w, ref] = random_linear_case<T>(m, n, k);
    auto d_x = to_device<T>(x);
    auto d_w = to_device<T>(w);
    std::mt19937 rng(m + 3 * n + 7 * k);
    // Three biases in one allocation (256-byte aligned): the first two start on 256-byte
    // boundaries (128 elements apart or more), the third 2 elements past one (4-byte aligned in
    // bf16, 8-byte in fp32).
    const std::size_t apart = (static_cast<std::size_t>(n) + 127) / 128 * 128;
    auto biases = random_values(3 * apart + 2, rng);
    round_through<T>(biases);
    auto d_biases = to_device<T>(biases);
    for (std::size_t offset : {std::size_t{0}, apart, 2 * apart + 2, std::size_t{0}}) {
      CAPTURE(offset);
      linear_reference expected = ref;
      for (int i = 0; i < m; ++i)
        for (int j = 0; j < n; ++j)
          expected.y[static_cast<std::size_t>(i) * n + j] += biases[offset + j];
      auto d_y = poisoned<T>(ref.y.size());
      cublasStatus_t planned = CUBLAS_STATUS_NOT_INITIALIZED;
      const kcu::gemm_algorithm algo =
          gemm.algorithm_of(d_x.data(), d_w.data(), d_y.data(), m, n, k, type, type, d_biases.data() + offset, planned);
      REQUIRE(planned == CUBLAS_STATUS_SUCCESS);
      MESSAGE(dtype_name<T>() << " " << m << " x " << n << " x " << k << " with a bias at element " << offset
                              << ": algorithm " << algo.id << ", tile " << algo.tile << ", split-K " << algo.split_k
                              << ", reduction " << algo.reduction);
      CHECK(algo.split_k == 1); // split-K with the bias epilogue rounded bf16 twice (25x one rounding off)
      REQUIRE(gemm.linear(d_x.data(), d_w.data(), d_y.data(), m, n, k, type, type, nullptr, d_biases.data() + offset) ==
              CUBLAS_STATUS_SUCCESS);
      sync_or_fail();
      check_close(from_device(d_y), expected.y, linear_tolerance<T>(expected),
                  std::string("linear with a bias, ") + dtype_name<T>());
    }
    auto d_y = poisoned<T>(ref.y.size());
    cublasStatus_t planned = CUBLAS_STATUS_NOT_INITIALIZED;
    const kcu::gemm_algorithm algo =
        gemm.algorithm_of(d_x.data(), d_w.data(), d_y.data(), m, n, k, type, type, nullptr, planned);
    REQUIRE(planned == CUBLAS_STATUS_SUCCESS);
    MESSAGE(dtype_name<T>() << " " << m << " x " << n << " x " << k << " without a bias: algorithm " << algo.id
                            << ", tile " << algo.tile << ", split-K " << algo.split_k << ", reduction "
                            << algo.reduction);
    REQUIRE(gemm.linear(d_x.data(), d_w.data(), d_y.data(), m, n, k, type, type, nullptr) == CUBLAS_STATUS_SUCCESS);
    sync_or_fail();
    check_close(from_device(d_y), ref.y, linear_tolerance<T>(ref),
                std::string("the same shape without a bias, ") + dtype_name<T>());
  }
}

TEST_CASE("cuda cublaslt_gemm: empty and negative shapes get a status") {
  kcu::cublaslt_gemm gemm;
  auto d = poisoned<bf16>(64);
  const auto type = kcu::gemm_type::bf16;
  CHECK(gemm.linear(d.data(), d.data(), d.data(), 0, 8, 8, type, type, nullptr) == CUBLAS_STATUS_SUCCESS);
  CHECK(gemm.linear(d.data(), d.data(), d.data(), 2, -1, 8, type, type, nullptr) == CUBLAS_STATUS_INVALID_VALUE);
  CHECK(gemm.candidate_count(d.data(), d.data(), d.data(), 0, 8, 8, type, type) == 0);
  CHECK(gemm.linear_candidate(0, d.data(), d.data(), d.data(), 0, 8, 8, type, type, nullptr) ==
        CUBLAS_STATUS_INVALID_VALUE);
}
