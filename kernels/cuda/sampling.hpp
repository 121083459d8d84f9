// Sampling on the GPU (launcher; the kernel is in sampling.cu): greedy, temperature,
// top-k, top-p and min-p over rows of fp32 logits, so that only one token per row
// leaves the device. The law is runtime::sampler's (its CPU reference), draw included.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace troupe::kernels::cuda {

// One row's parameters, with runtime::sampling_params' meanings. Penalties are not
// here: a row that needs them is sampled on the host.
struct sample_row_params {
  std::int32_t logits_row = 0; // which row of logits
  float temperature = 0.0f;    // 0: greedy (argmax, ties to the lowest id)
  std::int32_t top_k = 0;      // <= 0 or >= vocab: off
  float top_p = 1.0f;          // (0, 1]; 1: off
  float min_p = 0.0f;          // [0, 1]; 0: off
  double u = 0.0;              // the draw's uniform in [0, 1): runtime::counter_uniform(seed, step)
  std::int32_t target = -1;    // >= 0: a prompt row to score, nothing is drawn: its token is this one
};

// tokens[r] = the token row r draws. logits: device [*, vocab] fp32 (not modified);
// params: device [rows]; tokens: device [rows] int32.
//
// Candidates are ordered by logit, highest first, ties by id, as on the CPU. Weights are
// exp((logit - max) / temperature) in float (the CPU's are its double exp rounded to float:
// an ulp or two apart), summed in 2^-40 fixed point (exact and order-free, so a row's token
// does not depend on thread timing); the CPU sums them in double. The two pick different
// tokens only when u falls within ~1e-6 of the boundary between two candidates. A NaN logit
// is never drawn.
cudaError_t sample_rows(const float* logits, int vocab, const sample_row_params* params, int rows, std::int32_t* tokens,
                        cudaStream_t stream);

} // namespace troupe::kernels::cuda
