// Causal attention over the paged KV cache on the GPU, for prefill chunks and
// decode alike (launcher; the kernels are in paged_attention*.cu).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace troupe::kernels::cuda {

// T: activations (float, __nv_bfloat16 or __half); C: cache elements (float, __nv_bfloat16, __half or
// __nv_fp8_e4m3).
// The token at position p of its sequence attends to positions 0..p of that sequence's cache
// (with a sliding window, `window`, only the last of them: max(0, p - window + 1) .. p),
// which already holds this step's K and V (rope_write_kv runs first). Query head h reads
// KV head h / (heads / kv_heads). Positions must be < max_blocks_per_seq * block_size.
template <class T, class C>
struct paged_attention_params {
  const T* q = nullptr;                    // [tokens, q_stride] T: head h of token t at q + t * q_stride + h * head_dim
  int q_stride = 0;                        // >= heads * head_dim (the fused QKV row width when q lives there)
  T* out = nullptr;                        // [tokens, heads, head_dim] T
  const C* k_cache = nullptr;              // [num_blocks, kv_heads, block_size, head_dim]
  const C* v_cache = nullptr;              // [num_blocks, kv_heads, block_size, head_dim]
  const std::int32_t* positions = nullptr; // [tokens]
  const std::int32_t* query_start = nullptr;  // [seqs + 1]: tokens of sequence s are query_start[s] .. [s+1]
  const std::int32_t* block_tables = nullptr; // [seqs, max_blocks_per_seq]
  int tokens = 0, seqs = 0, max_blocks_per_seq = 0;
  int heads = 0, kv_heads = 0, head_dim = 0, block_size = 0; // block_size 1..256
  float scale = 1.0f; // softmax scale, usually 1/sqrt(head_dim); any sign (the tiled prefill needs scale * k_scale > 0)
  float k_scale = 1.0f, v_scale = 1.0f;                      // cache value = stored * scale (fp8; 1 otherwise)
  // > 0: a sliding-window layer: the token at position p attends only to positions
  // max(0, p - window + 1) .. p (window positions; transformers' mask kv > q - window). 0: full
  // causal attention. The kernels read only a token's window (and the split-K partitions cut only
  // that), so a call's cost follows the window, not the context; the split-K plan is made for a
  // context of min(window, max_blocks_per_seq * block_size) positions. What lies before a token's
  // window never reaches its output (a K row read there has its score masked, a V row there is
  // taken as zeros), and a sequence's table is read only from the block of the earliest position
  // that one of its tokens in the call sees.
  int window = 0;
  // > 0: Gemma 2's attention logit soft-capping: each score s = q·k * scale (k dequantised) enters
  // the softmax as softcap * tanh(s / softcap), after which the causal and window masks apply.
  // 0: no cap (the scores as they are).
  float softcap = 0.0f;
  // Scratch for the fast paths (split-K partials): fp32, 16-byte aligned, contents need not be
  // kept between calls. Null: the simple kernel (one block per token and KV head) does everything.
  // Smaller than paged_attention_workspace_bytes asks for: coarser split-K partitions, still correct.
  float* workspace = nullptr;
  std::size_t workspace_bytes = 0;
  // With the workspace: paged_attention_counter_count zeroed counters. The partitions of a
  // split-K row then merge in the block that finishes last instead of in a second kernel.
  // The caller clears them once; every call leaves them zero (so a CUDA graph can replay).
  // Null: a combine kernel merges the partitions.
  std::uint32_t* split_counters = nullptr;
  // The plan's partitions are at least this many positions (rounded up to a multiple of 64, at
  // least 128), which bounds how many partitions a token may take: ceil(max_context / that).
  // Each token's context is then cut into at most that many, as even as whole 64-position
  // granules allow, so a token's partitions may be shorter than this. 0 leaves the partition to
  // the launcher. For tuning and benchmarks (bench_kernels_gpu --sweep).
  int min_partition = 0;
  // What the caller knows of the query lengths: no sequence of the call has fewer tokens than
  // this (0: unknown). When every sequence is long enough for the tiled prefill kernel, the
  // split-K grid (one block per token, KV head and partition, which would all exit at once)
  // is not launched: 26 / 100 us a layer of a 1,000 / 4,096-token 13B prefill on the H200.
  // A sequence shorter than claimed gets no output.
  int min_query_len = 0;
  // And no sequence has more tokens than this (0: unknown). When none is long enough for the
  // tiled kernel, that kernel is not launched: a decode batch of more than 16 tokens launched a
  // grid of blocks that all exit at once, 3.2 us a layer on the H200 (ncu, 8B batch 64). When
  // both are 1 (a decode step) and tokens == seqs, token t is taken as sequence t.
  // A sequence longer than claimed gets no output.
  int max_query_len = 0;
  // > 0: the batch-invariant plan (engine.deterministic). Every token, prefill or decode, takes the
  // split-K kernels, its context (under a window, its visible span) cut into at most this many
  // partitions of ceil(span / this) positions rounded up to whole granules (at least a chunk), so
  // that a token's partitions, the order they are computed and merged in, and so its bits depend
  // on its own context and the window only: not on the other tokens, on occupancy, or on query
  // tiles (none run). The workspace must hold
  // paged_attention_invariant_workspace_bytes(tokens, ...) (cudaErrorInvalidValue otherwise).
  int invariant_parts = 0;
};

// Softmax statistics and the output accumulator are fp32 whatever T and C are.
template <class T, class C>
cudaError_t paged_attention(const paged_attention_params<T, C>& p, cudaStream_t stream);

// Workspace that lets calls of up to `tokens` tokens, with contexts of up to `max_context`
// positions (max_blocks_per_seq * block_size), split their contexts as finely as the launcher
// wants on the current device. Small: a few MiB (it does not grow with tokens * contexts).
std::size_t paged_attention_workspace_bytes(int tokens, int heads, int kv_heads, int head_dim, int max_context);

// Workspace that the batch-invariant plan (paged_attention_params::invariant_parts = parts) needs
// for calls of up to `tokens` tokens: every token's partials, whatever its context.
std::size_t paged_attention_invariant_workspace_bytes(int tokens, int heads, int head_dim, int parts);

// Counters that paged_attention_params::split_counters needs for calls of up to `tokens` tokens.
std::size_t paged_attention_counter_count(int tokens, int heads);

// Positions per split-K partition of a max_context-long context in a call of these sizes on
// the current device (a multiple of 64, at least 128; >= max_context means one partition per
// token), or, with `context` (1 .. max_context), of a context that long in that call: at most as
// many partitions as the longest has, as many as fill the GPU best, as even as whole 64-position
// granules allow (detail::split_granule).
// With `window` (paged_attention_params::window), of such a call: the plan is made for a context
// of min(window, max_context) positions, and what a context is cut into is its visible span,
// from its first visible position (max(0, context - window)) rounded down to a multiple of 64 to
// the context: between window and window + 63 positions once the context passes the window.
// For tests and benchmarks.
template <class T, class C>
int paged_attention_partition_size(int tokens, int heads, int kv_heads, int head_dim, int max_context,
                                   std::size_t workspace_bytes, int min_partition = 0, int context = 0, int window = 0);

} // namespace troupe::kernels::cuda
