// The CUDA RMSNorm (plain, in place, and fused with the residual add) matches
// the CPU reference on random rows.
// Tolerances: fp32 |d| <= 1e-5 (1 + |x|) (only the order of the sum differs);
// bf16 |d| <= 1e-6 + 2^-7 |x| (fp16: 2^-10 |x|): one rounding of the output (at most the
// unit roundoff u, 2^-8 or 2^-11, relative) on top of the same fp32 arithmetic, with room for one
// more rounding step.
#include <doctest/doctest.h>

#include "kernels/cpu/cpu_kernels.hpp"
#include "kernels/cuda/rms_norm.hpp"
#include "tests/gpu/gpu_test_support.hpp"

using namespace troupe::testing::gpu;
namespace kcu = troupe::kernels::cuda;
namespace kcpu = troupe::kernels::cpu;

namespace {
template <class T>
tolerance norm_tolerance() {
  return std::is_same_v<T, float> ? tolerance{1e-5f, 1e-5f} : tolerance{1e-6f, 2 * unit_roundoff<T>()};
}
} // namespace

TEST_CASE_TEMPLATE("cuda rms_norm matches the CPU reference, also in place", T, float, __nv_bfloat16, __half) {
  const int rows = 7;
  // Vector kernel (16-byte vectors, <= 1024 per row) and the strided one: 333, 12000, fp32 at 5120 and 8192.
  for (int dim : {8, 64, 333, 1000, 5120, 8192, 12000}) {
    CAPTURE(dim);
    std::mt19937 rng(dim);
    auto x = random_values(static_cast<std::size_t>(rows) * dim, rng, 2.0f);
    auto w = random_values(dim, rng, 1.0f);
    round_through<T>(x);
    round_through<T>(w);
    std::vector<float> expected(x.size());
    kcpu::rms_norm(x, w, dim, 1e-5f, expected);

    auto dx = to_device<T>(x);
    auto dw = to_device<T>(w);
    auto dy = poisoned<T>(x.size());
    REQUIRE(kcu::rms_norm<T>(dx.data(), dw.data(), dy.data(), rows, dim, 1e-5f, nullptr) == cudaSuccess);
    REQUIRE(kcu::rms_norm<T>(dx.data(), dw.data(), dx.data(), rows, dim, 1e-5f, nullptr) == cudaSuccess);
    sync_or_fail();
    check_close(from_device(dy), expected, norm_tolerance<T>(), std::string("rms_norm ") + dtype_name<T>());
    check_close(from_device(dx), expected, norm_tolerance<T>(), std::string("in-place rms_norm ") + dtype_name<T>());
  }
}

TEST_CASE_TEMPLATE("cuda add_rms_norm stores residual + x and normalises that sum", T, float, __nv_bfloat16, __half) {
  const int rows = 5;
  for (int dim : {8, 64, 333, 5120, 8192}) {
    CAPTURE(dim);
    std::mt19937 rng(dim + 1);
    auto residual = random_values(static_cast<std::size_t>(rows) * dim, rng, 2.0f);
    auto x = random_values(residual.size(), rng, 1.0f);
    auto w = random_values(dim, rng, 1.0f);
    round_through<T>(residual);
    round_through<T>(x);
    round_through<T>(w);
    // The residual is the sum rounded once to T; the norm is over that stored value.
    std::vector<float> sum(residual.size()), expected(residual.size());
    for (std::size_t i = 0; i < sum.size(); ++i)
      sum[i] = residual[i] + x[i];
    round_through<T>(sum);
    kcpu::rms_norm(sum, w, dim, 1e-6f, expected);

    auto dr = to_device<T>(residual);
    auto dx = to_device<T>(x);
    auto dw = to_device<T>(w);
    auto dy = poisoned<T>(x.size());
    REQUIRE(kcu::add_rms_norm<T>(dr.data(), dx.data(), dw.data(), dy.data(), rows, dim, 1e-6f, nullptr) == cudaSuccess);
    sync_or_fail();
    check_close(from_device(dr), sum, {0.0f, 0.0f}, std::string("residual ") + dtype_name<T>());
    check_close(from_device(dy), expected, norm_tolerance<T>(), std::string("add_rms_norm ") + dtype_name<T>());

    // out aliasing x (how the runner calls it: the projection's output becomes the normed input).
    auto dr2 = to_device<T>(residual);
    REQUIRE(kcu::add_rms_norm<T>(dr2.data(), dx.data(), dw.data(), dx.data(), rows, dim, 1e-6f, nullptr) ==
            cudaSuccess);
    sync_or_fail();
    check_close(from_device(dx), expected, norm_tolerance<T>(), std::string("add_rms_norm into x ") + dtype_name<T>());
  }
}

TEST_CASE_TEMPLATE("cuda rms_norm and add_rms_norm with Gemma's weight offset scale by (1 + w) in fp32", T, float,
                   __nv_bfloat16, __half) {
  // The reference folds the offset into fp32 weights (exact: w is a T value); the kernels add it per
  // element, so T's rounding of 1 + w never happens.
  const int rows = 4;
  for (int dim : {64, 333, 1024, 12000}) { // the vector kernel and the strided one
    CAPTURE(dim);
    std::mt19937 rng(dim + 2);
    auto residual = random_values(static_cast<std::size_t>(rows) * dim, rng, 2.0f);
    auto x = random_values(residual.size(), rng, 1.0f);
    auto w = random_values(dim, rng, 0.3f);
    round_through<T>(residual);
    round_through<T>(x);
    round_through<T>(w);
    std::vector<float> one_plus_w(w);
    for (float& v : one_plus_w)
      v += 1.0f;
    std::vector<float> plain(x.size()), sum(x.size()), fused(x.size());
    kcpu::rms_norm(x, one_plus_w, dim, 1e-6f, plain);
    for (std::size_t i = 0; i < sum.size(); ++i)
      sum[i] = residual[i] + x[i];
    round_through<T>(sum);
    kcpu::rms_norm(sum, one_plus_w, dim, 1e-6f, fused);

    auto dr = to_device<T>(residual);
    auto dx = to_device<T>(x);
    auto dw = to_device<T>(w);
    auto dy = poisoned<T>(x.size());
    auto dz = poisoned<T>(x.size());
    REQUIRE(kcu::rms_norm<T>(dx.data(), dw.data(), dy.data(), rows, dim, 1e-6f, nullptr, 1.0f) == cudaSuccess);
    REQUIRE(kcu::add_rms_norm<T>(dr.data(), dx.data(), dw.data(), dz.data(), rows, dim, 1e-6f, nullptr, 1.0f) ==
            cudaSuccess);
    sync_or_fail();
    check_close(from_device(dy), plain, norm_tolerance<T>(), std::string("rms_norm (1 + w) ") + dtype_name<T>());
    check_close(from_device(dz), fused, norm_tolerance<T>(), std::string("add_rms_norm (1 + w) ") + dtype_name<T>());
  }
}
