// Dense projection y = x W^T (+ bias) (reference). Rows of W are split across
// the pool: every output column reads one contiguous weight row, and four
// independent accumulators let the compiler vectorise the dot product.
#include "kernels/cpu/cpu_kernels.hpp"

namespace troupe::kernels::cpu {

namespace {
inline float dot(const float* a, const float* b, int n) {
  float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  int i = 0;
  for (; i + 4 <= n; i += 4) {
    s0 += a[i] * b[i];
    s1 += a[i + 1] * b[i + 1];
    s2 += a[i + 2] * b[i + 2];
    s3 += a[i + 3] * b[i + 3];
  }
  for (; i < n; ++i)
    s0 += a[i] * b[i];
  return (s0 + s1) + (s2 + s3);
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
