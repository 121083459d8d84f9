// Counter-based random fill: splitmix64 of (seed, index) gives two 24-bit uniforms,
// Box-Muller turns them into a normal value. A grid-stride loop covers any n.
#include <cuda_bf16.h>

#include "kernels/cuda/numeric.cuh"
#include "kernels/cuda/random_fill.hpp"

namespace troupe::kernels::cuda {

namespace {
constexpr int threads = 256;

__device__ __forceinline__ std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

template <class T>
__global__ void random_fill_kernel(T* __restrict__ out, std::size_t n, std::uint64_t seed, float mean, float std) {
  const std::uint64_t key = splitmix64(seed);
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const std::uint64_t h = splitmix64(key ^ i);
    // u1 in (0, 1] keeps the logarithm finite; u2 in [0, 1).
    const float u1 = (static_cast<float>(h >> 40) + 1.0f) * (1.0f / 16777216.0f);
    const float u2 = static_cast<float>((h >> 8) & 0xffffffu) * (1.0f / 16777216.0f);
    const float z = sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2);
    out[i] = detail::from_float<T>(mean + std * z);
  }
}
} // namespace

template <class T>
cudaError_t random_fill(T* out, std::size_t n, std::uint64_t seed, float mean, float std, cudaStream_t stream) {
  if (n == 0)
    return cudaSuccess;
  // Enough blocks to fill the device several times over; the loop strides over the rest.
  const std::size_t wanted = (n + threads - 1) / threads;
  const unsigned blocks = static_cast<unsigned>(wanted < 65536 ? wanted : 65536);
  random_fill_kernel<T><<<blocks, threads, 0, stream>>>(out, n, seed, mean, std);
  return cudaGetLastError();
}

template cudaError_t random_fill<float>(float*, std::size_t, std::uint64_t, float, float, cudaStream_t);
template cudaError_t random_fill<__nv_bfloat16>(__nv_bfloat16*, std::size_t, std::uint64_t, float, float, cudaStream_t);
template cudaError_t random_fill<__half>(__half*, std::size_t, std::uint64_t, float, float, cudaStream_t);
template cudaError_t random_fill<__nv_fp8_e4m3>(__nv_fp8_e4m3*, std::size_t, std::uint64_t, float, float, cudaStream_t);

} // namespace troupe::kernels::cuda
