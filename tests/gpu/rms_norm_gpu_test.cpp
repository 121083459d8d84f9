// The CUDA RMSNorm matches the CPU reference on random rows.
#include <doctest/doctest.h>

#include <cuda_runtime.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/cpu/cpu_kernels.hpp"
#include "kernels/cuda/rms_norm.hpp"

TEST_CASE("cuda rms_norm matches the CPU reference on random inputs") {
  for (int dim : {8, 64, 1000, 5120}) {
    const int rows = 7;
    std::mt19937 rng(dim);
    std::normal_distribution<float> normal(0.0f, 2.0f);
    std::vector<float> x(rows * dim), w(dim), expected(rows * dim), got(rows * dim, NAN);
    for (auto& v : x) v = normal(rng);
    for (auto& v : w) v = normal(rng);
    troupe::kernels::cpu::rms_norm(x, w, dim, 1e-5f, expected);

    float *dx, *dw, *dy;
    REQUIRE(cudaMalloc(&dx, x.size() * 4) == cudaSuccess);
    REQUIRE(cudaMalloc(&dw, w.size() * 4) == cudaSuccess);
    REQUIRE(cudaMalloc(&dy, got.size() * 4) == cudaSuccess);
    cudaMemcpy(dx, x.data(), x.size() * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(dw, w.data(), w.size() * 4, cudaMemcpyHostToDevice);
    cudaMemset(dy, 0xff, got.size() * 4);  // poison: unwritten elements read as NaN
    troupe::kernels::cuda::rms_norm_f32(dx, dw, dy, rows, dim, 1e-5f, nullptr);
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    cudaMemcpy(got.data(), dy, got.size() * 4, cudaMemcpyDeviceToHost);
    cudaFree(dx);
    cudaFree(dw);
    cudaFree(dy);
    float max_diff = 0.0f;
    for (std::size_t i = 0; i < got.size(); ++i)
      max_diff = std::max(max_diff, std::abs(got[i] - expected[i]) / (1.0f + std::abs(expected[i])));
    CHECK(max_diff < 1e-5f);
  }
}
