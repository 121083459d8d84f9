// The GPU forward pass, step by step the CPU runner's:
//   x = x + attention(rms_norm(x));  x = x + mlp(rms_norm(x))  (Gemma: each output normalized too;
//   a mixture-of-experts MLP: cuda_moe.cpp),
// with each residual add fused into the norm that follows it, QKV and gate|up as one
// GEMM each, and RoPE fused with the KV-cache write (and with Qwen3's per-head q/k norm before it).
#include <cmath>
#include <type_traits>

#include "kernels/cuda/embedding.hpp"
#include "kernels/cuda/fp8_linear.hpp"
#include "kernels/cuda/gemv.hpp"
#include "kernels/cuda/int4_linear.hpp"
#include "kernels/cuda/logit_softcap.hpp"
#include "kernels/cuda/paged_attention.hpp"
#include "kernels/cuda/rms_norm.hpp"
#include "kernels/cuda/rope_write_kv.hpp"
#include "kernels/cuda/silu_and_mul.hpp"
#include "runtime/cuda/cuda_model_runner.hpp"

namespace troupe::runtime {

namespace kc = kernels::cuda;

template <class T, class C>
void cuda_model_runner::forward(const step_shape& shape, const step_inputs& in, step_status& status) {
  // This rank's heads and MLP width (the whole model's without a rank); the vocabulary is whole.
  const int hidden = config_.hidden_size, heads = local_.num_attention_heads, kv_heads = local_.num_key_value_heads,
            hd = config_.head_dim, inter = local_.intermediate_size, vocab = config_.vocab_size;
  const int qkv_width = (heads + 2 * kv_heads) * hd, q_width = heads * hd;
  const int rows = shape.rows, seqs = shape.seqs;
  const float eps = config_.rms_norm_eps, norm_offset = config_.norm_weight_offset;
  const kc::gemm_type type = std::is_same_v<T, float>    ? kc::gemm_type::f32
                             : std::is_same_v<T, __half> ? kc::gemm_type::f16
                                                         : kc::gemm_type::bf16;
  const cudaStream_t s = compute_;
  auto as = [](const bytes& b) { return reinterpret_cast<T*>(b.data()); };
  auto ok = [&](cudaError_t e, const char* what) {
    if (e != cudaSuccess && status.ok())
      status = {static_cast<int>(e), what, false};
    return status.ok();
  };
  // y[m, n] = x[m, k] · w[n, k]ᵀ (+ bias[n], added before y is rounded, as torch's nn.Linear does).
  // A bias is of the weights' type T, which both paths read it as only when y is too: cuBLASLt
  // takes the bias in y's type, the GEMV in x's. Only the QKV GEMM has one (out = T).
  auto dense_linear = [&](const void* x, const bytes& w, void* y, int m, int n, int k, kc::gemm_type out,
                          const char* what, const T* b) {
    if constexpr (!std::is_same_v<T, float>) {
      if (options_.small_batch_gemv && !options_.deterministic && kc::gemv_preferred(m, n, k) && kc::gemv_applies(x, w.data(), m, n, k)) {
        const auto* xb = static_cast<const T*>(x);
        const auto* wb = reinterpret_cast<const T*>(w.data());
        return ok(out == kc::gemm_type::f32 ? kc::gemv(xb, wb, b, static_cast<float*>(y), m, n, k, s)
                                            : kc::gemv(xb, wb, b, static_cast<T*>(y), m, n, k, s),
                  what);
      }
    }
    const cublasStatus_t e = gemm_.linear(x, w.data(), y, m, n, k, type, out, s, b);
    if (e != CUBLAS_STATUS_SUCCESS && status.ok())
      status = {static_cast<int>(e), what, true};
    return status.ok();
  };
  // INT4 weights: as FP8 below, through the INT4 GEMV or a dequantized matrix.
  auto int4_linear = [&](const void* x, const linear_weight& w, void* y, int m, int n, int k, kc::gemm_type out,
                         const char* what, const T* b) {
    const kc::int4_weight_view view{reinterpret_cast<const std::uint32_t*>(w.codes.data()),
                                    reinterpret_cast<const float2*>(w.scales.data()), w.group};
    if constexpr (!std::is_same_v<T, float>) {
      if (!options_.deterministic && m <= kc::int4_gemv_max_rows && kc::int4_gemv_applies(x, view, m, n, k)) {
        const auto* xb = static_cast<const T*>(x);
        return ok(out == kc::gemm_type::f32 ? kc::int4_gemv(xb, view, b, static_cast<float*>(y), m, n, k, s)
                                            : kc::int4_gemv(xb, view, b, static_cast<T*>(y), m, n, k, s),
                  what);
      }
    }
    return ok(kc::dequantize_int4(view, as(dequantized_), n, k, s), "int4 dequantize") &&
           dense_linear(x, dequantized_, y, m, n, k, out, what, b);
  };
  // FP8 weights: up to fp8_gemv_max_rows rows through the FP8 GEMV (dequantized in registers);
  // more, or engine.deterministic (one path whatever the batch), dequantized into a matrix of T
  // for the dense path.
  auto linear = [&](const void* x, const linear_weight& w, void* y, int m, int n, int k, kc::gemm_type out,
                    const char* what, const bytes* bias = nullptr) {
    const T* b = bias != nullptr && bias->size() > 0 ? reinterpret_cast<const T*>(bias->data()) : nullptr;
    if (b != nullptr && out != type)
      return ok(cudaErrorInvalidValue, what); // a bias of T with a wider y: neither path reads it right
    if (w.int4())
      return int4_linear(x, w, y, m, n, k, out, what, b);
    if (!w.fp8())
      return dense_linear(x, w.dense, y, m, n, k, out, what, b);
    const kc::fp8_weight_view view{reinterpret_cast<const std::uint8_t*>(w.codes.data()), w.scales.data(), w.group};
    if constexpr (!std::is_same_v<T, float>) {
      if (!options_.deterministic && m <= kc::fp8_gemv_max_rows && kc::fp8_gemv_applies(x, view, m, n, k)) {
        const auto* xb = static_cast<const T*>(x);
        return ok(out == kc::gemm_type::f32 ? kc::fp8_gemv(xb, view, b, static_cast<float*>(y), m, n, k, s)
                                            : kc::fp8_gemv(xb, view, b, static_cast<T*>(y), m, n, k, s),
                  what);
      }
    }
    return ok(kc::dequantize_fp8(view, as(dequantized_), n, k, s), "fp8 dequantize") &&
           dense_linear(x, dequantized_, y, m, n, k, out, what, b);
  };
  T *x = as(x_), *h = as(h_), *proj = as(proj_), *wide = as(wide_), *mid = as(mid_);
  // Row-parallel layers (o_proj, down_proj): each rank's heads or MLP rows give one term of the
  // projection, summed over the group before the residual add.
  const kc::reduce_type reduce_as = std::is_same_v<T, float>    ? kc::reduce_type::f32
                                    : std::is_same_v<T, __half> ? kc::reduce_type::f16
                                                                : kc::reduce_type::bf16;
  auto all_reduce = [&](T* data, const char* what) {
    return group_ == nullptr || ok(group_->all_reduce_sum(data, static_cast<std::size_t>(rows) * hidden, reduce_as, s), what);
  };

  // Gemma's embedding multiplier is a tensor of the activations' dtype in transformers: rounded to T.
  const float embed_scale = static_cast<float>(static_cast<T>(config_.embedding_multiplier));
  if (!ok(kc::embedding<T>(in.token_ids, as(embed_), x, rows, hidden, s, embed_scale), "embedding"))
    return;
  for (int l = 0; l < config_.num_hidden_layers; ++l) {
    const layer& w = layers_[l];
    C* k_cache = reinterpret_cast<C*>(kv_pool(false, l, 0));
    C* v_cache = reinterpret_cast<C*>(kv_pool(false, l, 1));
    // x = x + attention(rms_norm(x)); the previous layer's MLP residual is added here.
    const cudaError_t norm = l == 0
                                 ? kc::rms_norm<T>(x, as(w.input_norm), h, rows, hidden, eps, s, norm_offset)
                                 : kc::add_rms_norm<T>(x, proj, as(w.input_norm), h, rows, hidden, eps, s, norm_offset);
    if (!ok(norm, "input rms_norm"))
      return;
    // [T, hidden] · [qkv, hidden]ᵀ + bias -> [T, qkv]
    if (!linear(h, w.qkv, wide, rows, qkv_width, hidden, type, "qkv gemm", &w.qkv_bias))
      return;
    kc::rope_write_kv_params<T, C> rope{
        .qkv = wide,
        .positions = in.positions,
        .inv_freq = config_.uses_sliding_rope(l) ? sliding_inv_freq_.data() : inv_freq_.data(),
        .slot_mapping = in.slot_mapping,
        .k_cache = k_cache,
        .v_cache = v_cache,
        .tokens = rows,
        .heads = heads,
        .kv_heads = kv_heads,
        .head_dim = hd,
        .block_size = cache_.block_size,
        .k_scale = k_scale_[l],
        .v_scale = v_scale_[l],
        // Qwen3: each q and k head RMS-normalized before its rotation
        .q_norm = config_.qk_norm ? as(w.q_norm) : nullptr,
        .k_norm = config_.qk_norm ? as(w.k_norm) : nullptr,
        .norm_eps = eps,
        .norm_weight_offset = norm_offset};
    if (!ok(kc::rope_write_kv(rope, s), "rope_write_kv"))
      return;
    kc::paged_attention_params<T, C> attn{
        .q = wide,
        .q_stride = qkv_width,
        .out = mid,
        .k_cache = k_cache,
        .v_cache = v_cache,
        .positions = in.positions,
        .query_start = in.query_start,
        .block_tables = in.block_tables,
        .tokens = rows,
        .seqs = seqs,
        .max_blocks_per_seq = shape.max_blocks_per_seq,
        .heads = heads,
        .kv_heads = kv_heads,
        .head_dim = hd,
        .block_size = cache_.block_size,
        .scale = config_.attention_scale(),
        .k_scale = k_scale_[l],
        .v_scale = v_scale_[l],
        .window = config_.attention_window(l),      // 0: a full-attention layer
        .softcap = config_.attention_logit_softcap, // 0: none
        .workspace = attention_ws_.data(),
        .workspace_bytes = attention_ws_.bytes(),
        .split_counters = attention_counters_.data(),
        .min_query_len = shape.min_query_len,
        .max_query_len = shape.max_query_len,
        .invariant_parts = options_.deterministic ? deterministic_attention_parts : 0};
    if (!ok(kc::paged_attention(attn, s), "paged_attention"))
      return;
    if (!linear(mid, w.o, proj, rows, hidden, q_width, type,
                "o gemm") || // [T, heads*hd] · [hidden, heads*hd]ᵀ -> [T, hidden]
        !all_reduce(proj, "o_proj all-reduce"))
      return;
    // Gemma: the attention output normalized before its residual add (in place).
    if (config_.sandwich_norms &&
        !ok(kc::rms_norm<T>(proj, as(w.post_norm), proj, rows, hidden, eps, s, norm_offset), "post-attention rms_norm"))
      return;
    // x = x + mlp(rms_norm(x))
    const bytes& mlp_norm = config_.sandwich_norms ? w.pre_mlp_norm : w.post_norm;
    if (!ok(kc::add_rms_norm<T>(x, proj, as(mlp_norm), h, rows, hidden, eps, s, norm_offset), "pre-MLP rms_norm"))
      return;
    // The dense MLP, or a mixture-of-experts model's shared expert (into last_x_, free until the
    // final norm, for the experts' sum to add).
    T* dense_out = config_.moe ? as(last_x_) : proj;
    if (inter > 0) {
      if (!linear(h, w.gate_up, wide, rows, 2 * inter, hidden, type,
                  "gate_up gemm")) // [T, hidden] · [2I, hidden]ᵀ -> [T, 2I]
        return;
      const cudaError_t act = config_.activation == mlp_activation::gelu_tanh
                                  ? kc::gelu_tanh_and_mul<T>(wide, mid, rows, inter, s)
                                  : kc::silu_and_mul<T>(wide, mid, rows, inter, s);
      if (!ok(act, "gated activation")) // [T, 2I] -> [T, I]
        return;
      if (!linear(mid, w.down, dense_out, rows, hidden, inter, type, "down gemm")) // [T, I] · [hidden, I]ᵀ
        return;
    }
    if (config_.moe && !moe_mlp<T>(w, h, inter > 0 ? dense_out : nullptr, proj, rows, status))
      return;
    if (!all_reduce(proj, "down_proj all-reduce"))
      return;
    // Gemma: the MLP output normalized before its residual add (the next norm adds it).
    if (config_.sandwich_norms &&
        !ok(kc::rms_norm<T>(proj, as(w.post_mlp_norm), proj, rows, hidden, eps, s, norm_offset), "post-MLP rms_norm"))
      return;
  }

  // Only the rows that need logits get the last residual add, the final norm and the LM head.
  const int n_rows = shape.logit_rows;
  if (n_rows == 0)
    return;
  T *last_x = as(last_x_), *last = as(last_proj_);
  if (!ok(kc::embedding<T>(in.logits_rows, x, last_x, n_rows, hidden, s), "gather x rows") ||
      !ok(kc::embedding<T>(in.logits_rows, proj, last, n_rows, hidden, s), "gather mlp rows") ||
      !ok(kc::add_rms_norm<T>(last_x, last, as(final_norm_), last, n_rows, hidden, eps, s, norm_offset),
          "final rms_norm"))
    return;
  const bytes& head = lm_head_.size() > 0 ? lm_head_ : embed_;
  if (group_ == nullptr) {
    // [R, hidden] · [vocab, hidden]ᵀ -> [R, vocab] fp32, whatever T is
    if (!dense_linear(last, head, logits_.data(), n_rows, vocab, hidden, kc::gemm_type::f32, "lm_head gemm", nullptr))
      return;
  } else if (!dense_linear(last, head, vocab_logits_.data(), n_rows, shard_.vocab, hidden, kc::gemm_type::f32,
                           "lm_head gemm", nullptr) ||
             // Vocab-parallel: this rank's slice of every row, then every rank gets the whole rows.
             !ok(group_->all_gather_vocab(vocab_logits_.data(), n_rows, logits_.data(), s), "logits all-gather")) {
    return;
  }
  if (config_.final_logit_softcap > 0.0f) // Gemma 2: before anything reads the logits
    ok(kc::logit_softcap(logits_.data(), static_cast<std::size_t>(n_rows) * vocab, config_.final_logit_softcap, s),
       "logit soft-cap");
}

void cuda_model_runner::run_forward(const step_shape& shape, const step_inputs& in, step_status& status) {
  const bool fp8 = options_.kv_dtype == kv_cache_dtype::fp8_e4m3;
  if (options_.dtype == cuda_dtype::float32) {
    if (fp8)
      forward<float, __nv_fp8_e4m3>(shape, in, status);
    else
      forward<float, float>(shape, in, status);
  } else if (options_.dtype == cuda_dtype::float16) {
    if (fp8)
      forward<__half, __nv_fp8_e4m3>(shape, in, status);
    else
      forward<__half, __half>(shape, in, status);
  } else {
    if (fp8)
      forward<__nv_bfloat16, __nv_fp8_e4m3>(shape, in, status);
    else
      forward<__nv_bfloat16, __nv_bfloat16>(shape, in, status);
  }
}

} // namespace troupe::runtime
