// CUDA graphs of the runner's decode steps, one per padded batch size: the sizes a step pads
// to, the fixed-address inputs the graphs read, their capture when the runner is built, and
// their replay.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "kernels/cuda/cuda_graph.hpp"
#include "kernels/cuda/device_buffer.hpp"
#include "runtime/cuda/cuda_step.hpp"
#include "runtime/step_batch.hpp"

namespace troupe::runtime {

class cuda_graph_cache {
 public:
  // Queues one forward pass of `shape` over `in` on the stream (the one being captured).
  using forward_pass = std::function<void(const cuda_step_shape&, const cuda_step_inputs&, cuda_step_status&)>;

  // Plans graphs for batches of up to max_seqs sequences whose block tables are at most
  // table_width wide, and allocates their inputs; nothing is captured yet.
  void plan(int max_seqs, int table_width);
  // Device bytes of the graphs' inputs (0 before plan).
  std::size_t input_bytes() const { return inputs_device_.bytes(); }
  // Captures every planned size on `stream`; the first failure stops there (see error()).
  void capture_all(cudaStream_t stream, const forward_pass& forward);
  // The captured size a decode step pads to (an index), or -1 if the step runs kernel by kernel.
  int slot(const step_batch& batch) const;
  // Copies the batch's inputs to the graph's (padding the rest) and replays that graph on `stream`.
  void replay(const step_batch& batch, int slot, cudaStream_t stream, cuda_step_status& status);

  // Steps replayed so far, and why graphs were turned off if a capture failed ("" if none did).
  std::uint64_t replays() const { return replays_; }
  const std::string& error() const { return error_; }
  // Paused graphs send every step kernel by kernel.
  void pause(bool paused) { paused_ = paused; }

 private:
  void capture(int slot, const cuda_step_shape& shape, cudaStream_t stream, const forward_pass& forward);

  // One graph per padded batch size (sizes_, ascending). Their inputs sit at fixed addresses:
  // [G] slots, tokens, positions, logits rows (0..G-1), [G + 1] query starts, then
  // [G, table_width_] block tables.
  std::vector<int> sizes_;
  std::vector<kernels::cuda::cuda_graph> graphs_;
  int table_width_ = 0;
  std::size_t tables_offset_ = 0;
  kernels::cuda::pinned_buffer<std::byte> inputs_host_;
  kernels::cuda::device_buffer<std::byte> inputs_device_;
  cuda_step_inputs in_{};
  std::uint64_t replays_ = 0;
  std::string error_;
  bool paused_ = false;
};

} // namespace troupe::runtime
