// The CUDA runner's sampler: after a step's forward pass, its logits rows are penalised,
// sampled and scored on the device (kernels/cuda/penalties, sampling, logprobs), and only the
// tokens and the asked-for log-probabilities come back. Its parameters travel in one copy to
// the device, its results in one copy back. The law is runtime::sample_on_host's.
#pragma once

#include <cstddef>
#include <span>

#include <cuda_runtime.h>

#include "kernels/cuda/device_buffer.hpp"
#include "runtime/cuda/cuda_step.hpp"
#include "runtime/device_sampling.hpp"

namespace troupe::runtime {

class cuda_row_sampler {
 public:
  // Sized for `rows` rows without penalties or log-probabilities; grows when a step needs more.
  cuda_row_sampler() = default;
  explicit cuda_row_sampler(int rows);

  // Logits rows the sampler uses of the logits buffer: one per row, plus scratch for each
  // penalised row (its token counts) and for each edited row that asks for log-probabilities
  // (its raw logits, kept from the edits and penalties). A step fits when they fit the buffer's rows.
  static std::size_t logits_rows_needed(std::span<const device_sample> rows);

  // Queues the sampling of rows on `stream`: logits [*, vocab] on the device, row i of it
  // being rows[i]'s, with logits_rows_needed(rows) rows (its scratch rows are overwritten).
  void launch(float* logits, int vocab, std::span<const device_sample> rows, cudaStream_t stream,
              cuda_step_status& status);
  // After the stream has synchronised: the tokens, and the log-probabilities of the rows that
  // asked (logprobs: empty, or one per row).
  void collect(std::span<const device_sample> rows, std::span<token_id> tokens,
               std::span<token_logprobs> logprobs) const;

  std::size_t device_bytes() const { return in_device_.bytes() + out_device_.bytes(); }

 private:
  void reserve(std::size_t in_bytes, std::size_t out_bytes);

  kernels::cuda::pinned_buffer<std::byte> in_host_, out_host_;
  kernels::cuda::device_buffer<std::byte> in_device_, out_device_;
  std::size_t logprobs_offset_ = 0; // in out_*: the logprob_results, after the tokens
  int vocab_ = 0;
};

} // namespace troupe::runtime
