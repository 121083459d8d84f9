// Embedding gather on the GPU (launcher; the kernel is in embedding.cu).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace troupe::kernels::cuda {

// out[t, :] = table[ids[t], :] (times scale, in fp32 and rounded to T, when scale != 1: Gemma's
// embeddings are multiplied by sqrt(hidden)). T = float, __nv_bfloat16 or __half; every id must be in
// [0, vocab). ids: device [tokens] int32; table: device [vocab, dim] T; out: device [tokens, dim] T.
// Returns the launch's error (cudaSuccess when queued).
template <class T>
cudaError_t embedding(const std::int32_t* ids, const T* table, T* out, int tokens, int dim, cudaStream_t stream,
                      float scale = 1.0f);

} // namespace troupe::kernels::cuda
