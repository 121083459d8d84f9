// What the engine may ask of the process's CUDA devices (its backend choice, the draft's
// KV sizing, the start-up log) without reaching into kernels/: runtime's face of
// kernels::cuda's device queries, which answer "none" in a build without CUDA.
#pragma once

#include <cstddef>
#include <string>

namespace troupe::runtime {

// Number of usable CUDA devices; 0 without a driver, a device, or a CUDA build.
int cuda_device_count() noexcept;
// "NVIDIA H200 (sm_90, 132 SMs, 140 GiB)", or "" for a bad index.
std::string cuda_device_description(int device);
// Bytes of memory the device has in all, or 0 for a bad index (or no CUDA build).
std::size_t cuda_device_memory_bytes(int device);

} // namespace troupe::runtime
