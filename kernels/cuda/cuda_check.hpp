// CUDA errors as a typed exception for the edges (allocation, set-up, the end of
// a step): the message names the call that failed and CUDA's own description.
#pragma once

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace troupe::kernels::cuda {

class cuda_error : public std::runtime_error {
 public:
  cuda_error(cudaError_t code, const std::string& what)
      : std::runtime_error(what + ": " + cudaGetErrorName(code) + " (" + cudaGetErrorString(code) + ")"), code_(code) {}
  cudaError_t code() const noexcept { return code_; }

 private:
  cudaError_t code_;
};

// Throws cuda_error naming `what` unless code is cudaSuccess.
inline void check(cudaError_t code, const char* what) {
  if (code != cudaSuccess)
    throw cuda_error(code, what);
}

} // namespace troupe::kernels::cuda
