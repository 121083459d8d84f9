// The CUDA logit soft-cap matches the CPU reference: tanhf against std::tanh, a few ulp of the cap.
#include <doctest/doctest.h>

#include "kernels/cpu/cpu_kernels.hpp"
#include "kernels/cuda/logit_softcap.hpp"
#include "tests/gpu/gpu_test_support.hpp"

using namespace troupe::testing::gpu;
namespace kcu = troupe::kernels::cuda;

TEST_CASE("cuda logit_softcap matches the CPU reference, from values far inside the cap to far past it") {
  for (float cap : {30.0f, 2.0f, 0.25f}) {
    for (std::size_t n : {std::size_t{1}, std::size_t{255}, std::size_t{12} * 32000 + 7}) {
      CAPTURE(cap);
      CAPTURE(n);
      std::mt19937 rng(static_cast<unsigned>(n) + static_cast<unsigned>(cap * 100));
      auto x = random_values(n, rng, 4.0f * cap);
      std::vector<float> expected(x);
      troupe::kernels::cpu::logit_softcap(expected, cap);
      auto d = to_device<float>(x);
      REQUIRE(kcu::logit_softcap(d.data(), n, cap, nullptr) == cudaSuccess);
      sync_or_fail();
      check_close(from_device(d), expected, {1e-6f * cap, 4e-7f}, "logit_softcap");
    }
  }
}
