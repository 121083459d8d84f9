// What the process can see of CUDA devices. Plain C++ so that code without
// CUDA (tests, the engine's device choice) can ask; the stub answers "none".
#pragma once

#include <cstddef>
#include <string>

namespace troupe::kernels::cuda {

// Number of usable CUDA devices; 0 without a driver, a device, or a CUDA build.
int device_count() noexcept;
// "NVIDIA H200 (sm_90, 132 SMs, 140 GiB)", or "" for a bad index.
std::string device_description(int device);
// Bytes of memory the device has in all, or 0 for a bad index (or no CUDA build).
std::size_t device_memory_bytes(int device);

} // namespace troupe::kernels::cuda
