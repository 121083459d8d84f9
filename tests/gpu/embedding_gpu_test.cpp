// The CUDA embedding gather copies exactly the rows the CPU reference copies,
// in fp32 and bf16, for row sizes on and off the 16-byte vector path.
#include <doctest/doctest.h>

#include "kernels/cpu/cpu_kernels.hpp"
#include "kernels/cuda/embedding.hpp"
#include "tests/gpu/gpu_test_support.hpp"

using namespace troupe::testing::gpu;
namespace kcu = troupe::kernels::cuda;

TEST_CASE_TEMPLATE("cuda embedding gathers the rows the CPU reference gathers (exactly)", T, float, __nv_bfloat16,
                   __half) {
  const int vocab = 517, tokens = 37;
  for (int dim : {7, 64, 129, 200}) {
    CAPTURE(dim);
    std::mt19937 rng(dim);
    auto table = random_values(static_cast<std::size_t>(vocab) * dim, rng);
    round_through<T>(table);
    std::uniform_int_distribution<std::int32_t> pick(0, vocab - 1);
    std::vector<std::int32_t> ids(tokens);
    for (auto& id : ids)
      id = pick(rng);
    ids[3] = ids[4]; // a repeated id
    ids[0] = vocab - 1;
    std::vector<float> expected(static_cast<std::size_t>(tokens) * dim);
    troupe::kernels::cpu::embedding(ids, table, dim, expected);

    auto d_ids = to_device_raw(ids);
    auto d_table = to_device<T>(table);
    auto d_out = poisoned<T>(expected.size());
    REQUIRE(kcu::embedding<T>(d_ids.data(), d_table.data(), d_out.data(), tokens, dim, nullptr) == cudaSuccess);
    sync_or_fail();
    check_close(from_device(d_out), expected, {0.0f, 0.0f}, std::string("embedding ") + dtype_name<T>());
  }
}

TEST_CASE_TEMPLATE("cuda embedding times Gemma's multiplier: each value times the scale, rounded once", T, float,
                   __nv_bfloat16, __half) {
  const int vocab = 97, tokens = 11;
  const float scale = 48.0f; // sqrt(2304), Gemma 2 2B's
  for (int dim : {7, 64}) {
    CAPTURE(dim);
    std::mt19937 rng(dim + 5);
    auto table = random_values(static_cast<std::size_t>(vocab) * dim, rng);
    round_through<T>(table);
    std::vector<std::int32_t> ids(tokens);
    for (int t = 0; t < tokens; ++t)
      ids[static_cast<std::size_t>(t)] = (t * 37) % vocab;
    std::vector<float> expected(static_cast<std::size_t>(tokens) * dim);
    troupe::kernels::cpu::embedding(ids, table, dim, expected);
    for (float& v : expected)
      v *= scale; // the fp32 product the kernel forms, then one rounding to T below
    round_through<T>(expected);

    auto d_ids = to_device_raw(ids);
    auto d_table = to_device<T>(table);
    auto d_out = poisoned<T>(expected.size());
    REQUIRE(kcu::embedding<T>(d_ids.data(), d_table.data(), d_out.data(), tokens, dim, nullptr, scale) == cudaSuccess);
    sync_or_fail();
    check_close(from_device(d_out), expected, {0.0f, 0.0f}, std::string("scaled embedding ") + dtype_name<T>());
  }
}
