// RMSNorm (reference): statistics in fp32, like the CUDA kernel keeps them; over a hidden row, or
// over each attention head's vector (Qwen3's q/k norm).
#include <cmath>

#include "kernels/cpu/cpu_kernels.hpp"

namespace troupe::kernels::cpu {

void rms_norm(std::span<const float> x, std::span<const float> weight, int dim, float eps, std::span<float> out) {
  std::size_t rows = x.size() / dim;
  for (std::size_t r = 0; r < rows; ++r) {
    const float* xr = x.data() + r * dim;
    float* yr = out.data() + r * dim;
    float sum_sq = 0.0f;
    for (int i = 0; i < dim; ++i)
      sum_sq += xr[i] * xr[i];
    float inv_rms = 1.0f / std::sqrt(sum_sq / static_cast<float>(dim) + eps);
    for (int i = 0; i < dim; ++i)
      yr[i] = xr[i] * inv_rms * weight[i];
  }
}

void head_rms_norm(std::span<float> x, int heads, int head_dim, std::span<const float> weight, float eps) {
  // Each head is a row of head_dim values: the same statistics as a hidden row. (heads only
  // names the layout: [T, heads, head_dim] is [T * heads, head_dim] rows.)
  static_cast<void>(heads);
  rms_norm(x, weight, head_dim, eps, x);
}

} // namespace troupe::kernels::cpu
