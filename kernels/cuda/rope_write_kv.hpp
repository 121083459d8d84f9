// Rotary embedding fused with the paged-KV-cache write (launcher; kernel in rope_write_kv.cu).
// Rotate-half (Hugging Face) layout: element i pairs with i + head_dim/2, as kernels/cpu does.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace troupe::kernels::cuda {

// T: activations (float, __nv_bfloat16 or __half). C: cache elements (float, __nv_bfloat16, __half, or
// __nv_fp8_e4m3, which stores value / scale with a per-layer scale for K and one for V).
template <class T, class C>
struct rope_write_kv_params {
  // [tokens, (heads + 2 * kv_heads) * head_dim] T, each row q | k | v (the fused QKV GEMM's output,
  // its bias already added there). q is rotated in place; the k and v parts are read only.
  T* qkv = nullptr;
  const std::int32_t* positions = nullptr;    // [tokens]
  const float* inv_freq = nullptr;            // [head_dim / 2] fp32, scaling applied (runtime::rope_inv_freq)
  const std::int64_t* slot_mapping = nullptr; // [tokens]: block * block_size + offset; < 0 = not cached
  C* k_cache = nullptr;                       // [num_blocks, kv_heads, block_size, head_dim]
  C* v_cache = nullptr;                       // [num_blocks, kv_heads, block_size, head_dim]
  int tokens = 0, heads = 0, kv_heads = 0, head_dim = 0, block_size = 0; // head_dim even
  float k_scale = 1.0f, v_scale = 1.0f; // cache value = stored * scale (fp8; 1 otherwise)
  // Qwen3's per-head RMSNorm before the rotation: [head_dim] T weights shared by every q head
  // (q_norm) and every k head (k_norm), or both null for none. Statistics in fp32 with norm_eps;
  // the normalized value stays fp32 into the rotation (one rounding, at the store).
  const T* q_norm = nullptr;
  const T* k_norm = nullptr;
  float norm_eps = 1e-6f;
  float norm_weight_offset = 0.0f; // the norms scale by (offset + weight) in fp32 (Gemma 3: 1)
};

// q <- rope(norm(q)); k_cache[slot] <- rope(norm(k)); v_cache[slot] <- v, for every token
// (norm: x / rms(x) * weight per head when q_norm and k_norm are given, else the identity).
template <class T, class C>
cudaError_t rope_write_kv(const rope_write_kv_params<T, C>& p, cudaStream_t stream);

} // namespace troupe::kernels::cuda
