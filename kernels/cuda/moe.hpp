// The mixture-of-experts MLP on the GPU (Mixtral, Qwen2-MoE, Qwen3-MoE): routing, grouping the
// (token, slot) entries by expert, the experts' linear layers and the weighted sum back into
// token order (launchers; kernels in moe_route.cu, moe_align.cu, moe_rows.cu, moe_grouped_gemv.cu).
//
// A layer, for `rows` tokens of `hidden` values, E experts of intermediate size I, top_k of them a token:
//   moe_route         logits [rows, E]        -> topk_ids, topk_weights [rows * top_k]
//   moe_align         topk_ids                -> expert_offsets [E + 1], sorted_entries, entry_position
//   moe_gather_rows   x [rows, hidden]        -> xs [entries, hidden]     (entries = rows * top_k, by expert)
//   moe_grouped_gemv  xs · gate_up[e]ᵀ        -> [entries, 2I]; silu_and_mul -> [entries, I]
//   moe_grouped_gemv  · down[e]ᵀ              -> ys [entries, hidden]
//   moe_combine       ys, topk_weights        -> out [rows, hidden]       (+ Qwen2-MoE's gated shared expert)
// An entry is token * top_k + slot. Every launcher is graph-capturable: no host synchronisation,
// no allocation, no host read of device data; grids are sized from the host-known counts only.
//
// Why a grouped GEMV: at decode an MoE layer is a weight stream over the experts the batch uses.
// Mixtral-8x7B at batch 1 reads 2 of 8 experts, 2 x 352 MB of bf16 (~165 us at 4.3 TB/s); Qwen3-30B-A3B
// 8 of 128, 8 x 9.4 MB (~18 us). A dense GEMM over all experts would read 4x and 16x that; one GEMM
// per expert needs the counts on the host (a sync, no graph). The kernel's grid is (output rows,
// chunk slots): a slot is one chunk of up to moe_chunk_rows consecutive entries of one expert, found
// on the device from expert_offsets, so an unused expert costs no block at all and a used one has its
// weights streamed once per chunk, as gemv.cu streams a dense layer (16-byte loads kept out of L1,
// gemv_split(k) warps a row, up to 8 loads in flight a lane). The grid has as many slots as the
// worst case needs, (entries + min(experts, entries) (R - 1)) / R for R = moe_chunk_rows (batch 1 of
// a top-8 model: 8, all used); slots past the batch's chunks exit before touching weights. Unlike
// gemv.cu it cannot request weights before the kernel ahead has finished (the expert is known only
// from expert_offsets), so its dependent launch hides only the launch itself.
// Each output's fp32 sum is in a fixed order (per lane over its vectors, a butterfly over the warp,
// the row's warps in order) that depends on k alone, never on the chunk's size or the batch; route,
// gather, combine and the activation are per token: a token's output is bit-identical at any batch.
// Long prefills should instead run one GEMM per expert on xs (expert_offsets copied to the host);
// the GEMV stays correct there, re-reading an expert's weights for every 8 of its rows.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

namespace troupe::kernels::cuda {

inline constexpr int moe_max_experts = 512; // moe_route's limit
inline constexpr int moe_max_top_k = 16;
// The most entries of one expert that moe_grouped_gemv serves from one read of its weights.
inline constexpr int moe_chunk_rows = 8;

// For each of `rows` tokens: softmax in fp32 over logits[t, 0 .. experts) (logits: device fp32,
// row t at logits + t * logits_stride), then the top_k largest probabilities in descending order
// (equal probabilities: the lower expert first), divided by their sum when `normalize`
// (Qwen3-MoE's norm_topk_prob; Mixtral's softmax over the top logits is the same).
// topk_ids: device int [rows * top_k]; topk_weights: device fp32 [rows * top_k].
// 1 <= top_k <= min(experts, moe_max_top_k), experts <= moe_max_experts; else cudaErrorInvalidValue.
cudaError_t moe_route(const float* logits, int logits_stride, int rows, int experts, int top_k, bool normalize,
                      int* topk_ids, float* topk_weights, cudaStream_t stream);

// Groups the entries by expert, deterministically (no atomics): expert 0's first, within an expert in
// ascending entry order. topk_ids: device int [rows * top_k], each in [0, experts);
// expert_offsets: device int [experts + 1], the prefix sums of the experts' entry counts;
// sorted_entries: device int [rows * top_k], the entries in that order;
// entry_position: device int [rows * top_k], entry_position[sorted_entries[p]] = p.
// One block an expert, each reading all ids: ~2 rows * top_k int reads from L2 per expert.
cudaError_t moe_align(const int* topk_ids, int rows, int top_k, int experts, int* expert_offsets, int* sorted_entries,
                      int* entry_position, cudaStream_t stream);

// xs[p, :] = x[sorted_entries[p] / top_k, :] for p < entries. x: device [rows, hidden] T;
// xs: device [entries, hidden] T. T = float, __nv_bfloat16 or __half.
template <class T>
cudaError_t moe_gather_rows(const T* x, const int* sorted_entries, int entries, int top_k, int hidden, T* xs,
                            cudaStream_t stream);

// For every expert e and p in [expert_offsets[e], expert_offsets[e + 1]):
// ys[p, :] = xs[p, :] · w[e]ᵀ, w[e] = w + e * n * k a row-major [n, k] matrix; fp32 sums rounded to T
// once. xs: device [entries, k] T; w: device [experts, n, k] T; ys: device [entries, n] T;
// expert_offsets: device int [experts + 1] as moe_align writes it (offsets[experts] <= entries);
// experts <= moe_max_experts.
// 16-byte loads where k is a multiple of 16 / sizeof(T) and xs, w are 16-byte aligned; otherwise one
// element a load (correct, slower). Launched as a programmatic dependent of the kernel before it.
template <class T>
cudaError_t moe_grouped_gemv(const T* xs, const T* w, const int* expert_offsets, int experts, int entries, int n, int k,
                             T* ys, cudaStream_t stream);

// out[t, :] = sum over slots j in order of topk_weights[t * top_k + j] * ys[entry_position[t * top_k + j], :]
// (+ sigmoid(shared_gate_logits[t * logits_stride]) * shared[t, :] where both are given: Qwen2-MoE's
// shared expert, its gate being router column `experts`), in fp32, rounded to T once.
// ys: device [rows * top_k, hidden] T; entry_position: device int [rows * top_k];
// topk_weights: device fp32 [rows * top_k]; shared: device [rows, hidden] T or null;
// shared_gate_logits: device fp32 or null (then the shared term, if any, is added ungated);
// out: device [rows, hidden] T.
template <class T>
cudaError_t moe_combine(const T* ys, const int* entry_position, const float* topk_weights, int rows, int top_k,
                        int hidden, const T* shared, const float* shared_gate_logits, int logits_stride, T* out,
                        cudaStream_t stream);

} // namespace troupe::kernels::cuda
