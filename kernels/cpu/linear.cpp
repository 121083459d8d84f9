// Dense projection y = x W^T (+ bias) (reference). Rows of W are split across
// the pool: every output column reads one contiguous weight row. The dot
// product is an OpenMP SIMD reduction (-fopenmp-simd, no runtime): it lets the
// compiler vectorise the sum without -ffast-math, in a fixed order, so results
// do not depend on the batch or the thread count.
#include "kernels/cpu/cpu_kernels.hpp"

namespace troupe::kernels::cpu {

namespace {
inline float dot(const float* a, const float* b, int n) {
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int i = 0; i < n; ++i)
    sum += a[i] * b[i];
  return sum;
}
} // namespace

void linear(std::span<const float> x, int rows, int in, std::span<const float> w, int out,
            std::span<const float> bias, std::span<float> y, thread_pool* pool) {
  parallel_for(pool, static_cast<std::size_t>(out), static_cast<std::size_t>(rows) * in,
               [&](std::size_t begin, std::size_t end) {
                 for (std::size_t o = begin; o < end; ++o) {
                   const float* wr = w.data() + o * in;
                   float b = bias.empty() ? 0.0f : bias[o];
                   for (int r = 0; r < rows; ++r)
                     y[static_cast<std::size_t>(r) * out + o] = dot(x.data() + static_cast<std::size_t>(r) * in, wr, in) + b;
                 }
               });
}

} // namespace troupe::kernels::cpu
