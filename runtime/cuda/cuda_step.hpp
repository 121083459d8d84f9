// What one step of the CUDA runner is launched with: its inputs' device pointers, the sizes of
// its forward pass, and its first failure. Shared by the runner, its forward pass and its graphs.
#pragma once

#include <cstdint>

namespace troupe::runtime {

// Device pointers of a step's inputs: in the runner's staging buffer, or a graph's fixed inputs.
struct cuda_step_inputs {
  const std::int64_t* slot_mapping;
  const std::int32_t *token_ids, *positions, *query_start, *block_tables, *logits_rows;
};

// The sizes a forward pass is launched with: the batch's, or a captured graph's padded ones.
struct cuda_step_shape {
  int rows, seqs, max_blocks_per_seq, logit_rows;
  int min_query_len; // the fewest tokens a sequence of the step has
  int max_query_len; // the most
};

// The first failure of a step; later launches are skipped, and the runner throws after the sync.
struct cuda_step_status {
  int code = 0; // cudaError_t or cublasStatus_t
  const char* what = nullptr;
  bool cublas = false;
  bool ok() const { return what == nullptr; }
};

} // namespace troupe::runtime
