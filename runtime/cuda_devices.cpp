// runtime's device queries, answered by kernels::cuda (its stub in a build without CUDA).
#include "runtime/cuda_devices.hpp"

#include "kernels/cuda/device.hpp"

namespace troupe::runtime {

int cuda_device_count() noexcept {
  return kernels::cuda::device_count();
}
std::string cuda_device_description(int device) {
  return kernels::cuda::device_description(device);
}
std::size_t cuda_device_memory_bytes(int device) {
  return kernels::cuda::device_memory_bytes(device);
}

} // namespace troupe::runtime
