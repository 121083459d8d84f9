// GeGLU activation (reference): gelu(gate) * up over a fused [gate | up] row, with GELU's tanh
// approximation (PyTorch's gelu(approximate="tanh"), Gemma's gelu_pytorch_tanh).
#include <cmath>
#include <numbers>

#include "kernels/cpu/cpu_kernels.hpp"

namespace troupe::kernels::cpu {

float gelu_tanh(float x) {
  const float k = std::sqrt(2.0f / std::numbers::pi_v<float>);
  return 0.5f * x * (1.0f + std::tanh(k * (x + 0.044715f * x * x * x)));
}

void gelu_tanh_and_mul(std::span<const float> gate_up, int rows, int inter, std::span<float> out) {
  for (int r = 0; r < rows; ++r) {
    const float* gate = gate_up.data() + static_cast<std::size_t>(r) * 2 * inter;
    const float* up = gate + inter;
    float* o = out.data() + static_cast<std::size_t>(r) * inter;
    for (int i = 0; i < inter; ++i)
      o[i] = gelu_tanh(gate[i]) * up[i];
  }
}

} // namespace troupe::kernels::cpu
