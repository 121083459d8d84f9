// The fp32 reference kernels of the CPU backend, one op per .cpp file. They are
// also the references the CUDA kernels are tested against. Shapes are row-major
// and written beside each signature; nothing here knows about requests.
#pragma once

#include <cstdint>
#include <span>

#include "kernels/cpu/thread_pool.hpp"

namespace troupe::kernels::cpu {

// out[t, :] = table[ids[t], :]            ids [T], table [vocab, dim], out [T, dim]
void embedding(std::span<const std::int32_t> ids, std::span<const float> table, int dim,
               std::span<float> out);

// out[t] = x[t] / rms(x[t]) * weight       x, out [T, dim], weight [dim]; out may alias x
void rms_norm(std::span<const float> x, std::span<const float> weight, int dim, float eps,
              std::span<float> out);

// Qwen3's q/k norm: every head's vector x[t, h, :] / rms(x[t, h, :]) * weight, in place; the one
// weight is shared by all heads.      x [T, heads, head_dim], weight [head_dim]
void head_rms_norm(std::span<float> x, int heads, int head_dim, std::span<const float> weight, float eps);

// y = x W^T (+ bias)                        x [T, in], w [out, in], bias [out] or empty, y [T, out]
void linear(std::span<const float> x, int rows, int in, std::span<const float> w, int out,
            std::span<const float> bias, std::span<float> y, thread_pool* pool);

// out[t, i] = silu(gate_up[t, i]) * gate_up[t, inter + i]   gate_up [T, 2*inter], out [T, inter]
void silu_and_mul(std::span<const float> gate_up, int rows, int inter, std::span<float> out);

// GELU with the tanh approximation (PyTorch's gelu(approximate="tanh")): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715
// x^3)))
float gelu_tanh(float x);

// out[t, i] = gelu_tanh(gate_up[t, i]) * gate_up[t, inter + i]   gate_up [T, 2*inter], out [T, inter]
void gelu_tanh_and_mul(std::span<const float> gate_up, int rows, int inter, std::span<float> out);

// A mixture-of-experts router's choice for each token: softmax over its expert logits (fp32), then the
// top_k largest probabilities in descending order (equal ones: the lower expert first), divided by their
// sum when normalize (Mixtral; Qwen's norm_topk_prob).   logits [T, experts], ids, weights [T, top_k]
void moe_route(std::span<const float> logits, int rows, int experts, int top_k, bool normalize,
               std::span<std::int32_t> ids, std::span<float> weights);

// x = cap * tanh(x / cap), in place (Gemma 2's final logit soft-capping); cap > 0
void logit_softcap(std::span<float> x, float cap);

// Rotary embedding in the rotate-half (Hugging Face) layout, in place.
// x [T, heads, head_dim]; positions [T]; inv_freq [head_dim/2]
void rotary_embedding(std::span<float> x, int heads, int head_dim, std::span<const std::int32_t> positions,
                      std::span<const float> inv_freq);

// Writes each token's K and V into its slot of the paged cache.
// k, v [T, kv_heads, head_dim]; slot_mapping [T] (block * block_size + offset; < 0 = skip)
// k_cache, v_cache [num_blocks, kv_heads, block_size, head_dim]
void write_kv_cache(std::span<const float> k, std::span<const float> v, std::span<const std::int64_t> slot_mapping,
                    int kv_heads, int head_dim, int block_size, std::span<float> k_cache, std::span<float> v_cache);

// Causal attention of every query token over its sequence's paged cache
// (cached prefix + this step's tokens, already written).
// q [T, heads, head_dim], out [T, heads, head_dim]; positions [T];
// query_start [B+1]; block_tables [B, max_blocks] ; the token at position p sees positions 0..p,
// or with window W > 0 (a sliding-window layer) max(0, p - W + 1) .. p: W positions, as
// transformers' sliding_window mask (kv > q - W).
struct paged_attention_args {
  std::span<const float> q;
  std::span<float> out;
  std::span<const std::int32_t> positions;
  std::span<const std::int32_t> query_start;
  std::span<const std::int32_t> block_tables;
  int max_blocks_per_seq = 0;
  int heads = 0, kv_heads = 0, head_dim = 0, block_size = 0;
  float scale = 1.0f;
  int window = 0;       // 0: full causal attention
  float softcap = 0.0f; // > 0: each score s becomes softcap * tanh(s / softcap) (Gemma 2); 0: none
  std::span<const float> k_cache, v_cache;
};
void paged_attention(const paged_attention_args& args, thread_pool* pool);

} // namespace troupe::kernels::cpu
