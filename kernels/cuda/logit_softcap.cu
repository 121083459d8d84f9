// Logit soft-capping: one thread per logit, after the LM head and before anything reads the logits
// (sampling, log-probabilities, constraints), so every consumer sees the capped values.
#include "kernels/cuda/logit_softcap.hpp"

namespace troupe::kernels::cuda {

namespace {
constexpr int threads = 256;

__global__ void logit_softcap_kernel(float* x, std::size_t n, float cap) {
  const std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n)
    x[i] = tanhf(x[i] / cap) * cap;
}
} // namespace

cudaError_t logit_softcap(float* x, std::size_t n, float cap, cudaStream_t stream) {
  if (n == 0)
    return cudaSuccess;
  const auto blocks = static_cast<unsigned>((n + threads - 1) / threads);
  logit_softcap_kernel<<<blocks, threads, 0, stream>>>(x, n, cap);
  return cudaGetLastError();
}

} // namespace troupe::kernels::cuda
