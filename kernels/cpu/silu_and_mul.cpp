// SwiGLU activation (reference): silu(gate) * up over a fused [gate | up] row.
#include <cmath>

#include "kernels/cpu/cpu_kernels.hpp"

namespace troupe::kernels::cpu {

void silu_and_mul(std::span<const float> gate_up, int rows, int inter, std::span<float> out) {
  for (int r = 0; r < rows; ++r) {
    const float* gate = gate_up.data() + static_cast<std::size_t>(r) * 2 * inter;
    const float* up = gate + inter;
    float* o = out.data() + static_cast<std::size_t>(r) * inter;
    for (int i = 0; i < inter; ++i)
      o[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
  }
}

} // namespace troupe::kernels::cpu
