// Built instead of device.cu when troupe is built without CUDA.
#include "kernels/cuda/device.hpp"

namespace troupe::kernels::cuda {

int device_count() noexcept { return 0; }
std::string device_description(int) { return {}; }
std::size_t device_memory_bytes(int) { return 0; }

} // namespace troupe::kernels::cuda
