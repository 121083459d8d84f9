// A request's logit edits and its repetition, frequency and presence penalties on the GPU
// (launcher; the kernel is in penalties.cu), applied in place to rows of fp32 logits before
// they are sampled, with runtime::sampler's law (its CPU reference), float for float: first
// logit += bias for each logit_bias entry, then -inf for each banned id (min_tokens' stop
// ids); then the penalties: the repetition penalty
// divides a positive logit and multiplies a negative one, once per distinct token of the
// sequence (prompt and output); then logit -= frequency * count + presence for each token
// that occurs `count` > 0 times in the output.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace troupe::kernels::cuda {

// One edit: a logit_bias entry (id, bias), or a banned id (bias unused).
struct logit_edit {
  std::int32_t id = 0;
  float bias = 0.0f;
};

struct penalty_row {
  std::int32_t logits_row = 0;   // the row edited and penalised, in place
  std::int32_t scratch_row = -1; // with tokens: a row of the same buffer the kernel may scribble on, as int32 counts
  std::int32_t copy_row = -1;    // >= 0: the row's raw logits are first copied here (for log-probabilities)
  std::int32_t token_begin = 0;  // the sequence's tokens: tokens[token_begin, token_begin + token_count)
  std::int32_t token_count = 0;
  std::int32_t prompt_len = 0; // the first prompt_len of them are the prompt, the rest the output
  float repetition = 1.0f;     // 1: off
  float frequency = 0.0f;      // 0: off
  float presence = 0.0f;       // 0: off
  std::int32_t edit_begin = 0; // edits[edit_begin, +bias_count): logit_bias entries (distinct ids);
  std::int32_t bias_count = 0; // then ban_count banned ids (distinct)
  std::int32_t ban_count = 0;
};

// logits: device [*, vocab] fp32, rows read and written in place; each row's scratch_row
// (distinct per row, none of them a penalised or copied row) holds garbage before and after;
// rows: device [n]; tokens: device, the sequences' ids; edits: device, the rows' edits (ids
// outside [0, vocab) are ignored, as on the host). One thread block per row; its cost is the
// row's token and edit counts, not vocab, apart from the copy.
cudaError_t apply_penalties(float* logits, int vocab, const penalty_row* rows, int n, const std::int32_t* tokens,
                            const logit_edit* edits, cudaStream_t stream);

} // namespace troupe::kernels::cuda
