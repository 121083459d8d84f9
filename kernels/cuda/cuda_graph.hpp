// RAII owner of an instantiated CUDA graph: work captured from a stream once and
// replayed as one launch, which removes the per-kernel launch cost of small steps.
#pragma once

#include <cuda_runtime.h>

#include <utility>

#include "kernels/cuda/cuda_check.hpp"

namespace troupe::kernels::cuda {

class cuda_graph {
 public:
  cuda_graph() = default;
  // Instantiates `graph` and destroys it (the executable graph is all that is kept).
  explicit cuda_graph(cudaGraph_t graph) {
    const cudaError_t e = cudaGraphInstantiate(&exec_, graph, 0);
    cudaGraphDestroy(graph);
    check(e, "cudaGraphInstantiate");
  }
  cuda_graph(cuda_graph&& other) noexcept : exec_(std::exchange(other.exec_, nullptr)) {}
  cuda_graph& operator=(cuda_graph&& other) noexcept {
    if (this != &other) {
      release();
      exec_ = std::exchange(other.exec_, nullptr);
    }
    return *this;
  }
  cuda_graph(const cuda_graph&) = delete;
  cuda_graph& operator=(const cuda_graph&) = delete;
  ~cuda_graph() { release(); }

  bool empty() const noexcept { return exec_ == nullptr; }
  // Queues the whole graph on `stream`; returns the launch's error (no exception: it runs inside a step).
  cudaError_t launch(cudaStream_t stream) const noexcept { return cudaGraphLaunch(exec_, stream); }

 private:
  void release() noexcept {
    if (exec_ != nullptr)
      cudaGraphExecDestroy(exec_);
    exec_ = nullptr;
  }
  cudaGraphExec_t exec_ = nullptr;
};

} // namespace troupe::kernels::cuda
