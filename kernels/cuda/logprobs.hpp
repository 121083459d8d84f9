// Log-probabilities on the GPU (launcher; the kernel is in logprobs.cu): the chosen token's
// log-probability and the top n of rows of raw fp32 logits, so that only n + 1 values per row
// cross to the host instead of the row. The law is runtime::compute_logprobs' (its CPU
// reference): log_z = max + log(sum exp(x - max)), the sum in double; the top n by logit,
// ties to the lower id.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace troupe::kernels::cuda {

inline constexpr int max_top_logprobs = 20; // troupe::max_logprobs

struct logprob_row {
  std::int32_t source_row = 0;  // the raw logits row
  std::int32_t token_index = 0; // the chosen token is tokens[token_index]
  std::int32_t top_n = 0;       // 0..max_top_logprobs
};

struct logprob_result {
  float logprob = 0.0f; // the chosen token's
  std::int32_t top_ids[max_top_logprobs];
  float top_logprobs[max_top_logprobs];
};

// logits: device [*, vocab] fp32 (not modified); rows: device [n], whose top_n are at most
// max_top_n (it picks the kernel: shorter lists are faster); tokens: device int32 ids, each
// inside [0, vocab); out: device [n].
cudaError_t compute_logprobs(const float* logits, int vocab, const logprob_row* rows, int n, int max_top_n,
                             const std::int32_t* tokens, logprob_result* out, cudaStream_t stream);

} // namespace troupe::kernels::cuda
