// The GPU forward pass, step by step the CPU runner's:
//   x = x + attention(rms_norm(x));  x = x + mlp(rms_norm(x)),
// with each residual add fused into the norm that follows it, QKV and gate|up as one
// GEMM each, and RoPE fused with the KV-cache write.
#include "runtime/cuda/cuda_model_runner.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "kernels/cuda/embedding.hpp"
#include "kernels/cuda/gemv.hpp"
#include "kernels/cuda/paged_attention.hpp"
#include "kernels/cuda/random_fill.hpp"
#include "kernels/cuda/rms_norm.hpp"
#include "kernels/cuda/rope_write_kv.hpp"
#include "kernels/cuda/sampling.hpp"
#include "kernels/cuda/silu_and_mul.hpp"
#include "runtime/rope.hpp"

namespace troupe::runtime {

namespace kc = kernels::cuda;

namespace {

[[noreturn]] void refuse(const std::string& what) {
  throw std::invalid_argument("cuda runner: " + what);
}

// Runs before any member allocates: every later allocation lands on the chosen device.
const cuda_runner_options& on_device(const cuda_runner_options& options) {
  int count = 0;
  kc::check(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
  if (options.device < 0 || options.device >= count)
    refuse("device " + std::to_string(options.device) + " does not exist (" + std::to_string(count) + " visible)");
  kc::check(cudaSetDevice(options.device), "cudaSetDevice");
  return options;
}

cuda_memory_plan measure_device() {
  cuda_memory_plan plan;
  kc::check(cudaMemGetInfo(&plan.free_at_start, &plan.total_bytes), "cudaMemGetInfo");
  return plan;
}

void check_options(const model_config& cfg, const cuda_runner_options& o) {
  if (o.block_size < 1 || o.block_size > 256)
    refuse("block size must be in 1..256, got " + std::to_string(o.block_size));
  if (o.max_num_batched_tokens < 1)
    refuse("max_num_batched_tokens must be >= 1");
  if (o.num_blocks < 0 || o.num_host_blocks < 0)
    refuse("block counts must not be negative");
  if (!(o.gpu_memory_utilization > 0.0 && o.gpu_memory_utilization <= 1.0))
    refuse("gpu_memory_utilization must be in (0, 1]");
  if (cfg.hidden_act != "silu")
    refuse("only silu MLPs are supported, the model has " + cfg.hidden_act);
  if (cfg.head_dim % 2 != 0)
    refuse("head_dim must be even for rotary embeddings");
  if (o.kv_dtype != own_cache_dtype(o.dtype) && o.kv_dtype != kv_cache_dtype::fp8_e4m3)
    refuse(std::string("a ") + to_string(o.kv_dtype) + " KV cache needs " + to_string(o.kv_dtype) + " weights, not " +
           to_string(o.dtype) + " (the cache stores the model's dtype, or fp8)");
  if (o.kv_dtype == kv_cache_dtype::fp8_e4m3 && !(o.k_scale > 0.0f && o.v_scale > 0.0f))
    refuse("fp8 KV-cache scales must be positive");
}

std::vector<float> concat(std::initializer_list<std::span<const float>> parts) {
  std::vector<float> out;
  for (auto p : parts)
    out.insert(out.end(), p.begin(), p.end());
  return out;
}

std::size_t round_up(std::size_t n, std::size_t to) {
  return (n + to - 1) / to * to;
}

} // namespace

cuda_model_runner::cuda_model_runner(const model_config& config, const model_weights& weights,
                                     const cuda_runner_options& options)
    : config_(config),
      options_(on_device(options)),
      plan_(measure_device()),
      act_bytes_(options.dtype == cuda_dtype::float32 ? 4 : 2) {
  check_options(config_, options_);
  const int hidden = config_.hidden_size, heads = config_.num_attention_heads, kv_heads = config_.num_key_value_heads,
            hd = config_.head_dim, inter = config_.intermediate_size, vocab = config_.vocab_size;
  const int qkv_width = (heads + 2 * kv_heads) * hd;

  // Weights, converted once; q|k|v and gate|up concatenated along the output rows.
  std::size_t weight_bytes = 0;
  auto put = [&](std::span<const float> v) {
    bytes b = upload(v);
    weight_bytes += b.bytes();
    return b;
  };
  if (options_.dummy_weights) {
    weight_bytes = make_dummy_weights();
  } else {
    embed_ = put(weights.embed_tokens);
    final_norm_ = put(weights.final_norm);
    if (!config_.tie_word_embeddings && !weights.lm_head.empty())
      lm_head_ = put(weights.lm_head);
    for (const auto& w : weights.layers) {
      layer l;
      l.input_norm = put(w.input_norm);
      l.qkv = put(concat({w.q_proj, w.k_proj, w.v_proj}));
      if (config_.attention_bias && !w.q_bias.empty())
        l.qkv_bias = put(concat({w.q_bias, w.k_bias, w.v_bias}));
      l.o = put(w.o_proj);
      l.post_norm = put(w.post_attention_norm);
      l.gate_up = put(concat({w.gate_proj, w.up_proj}));
      l.down = put(w.down_proj);
      layers_.push_back(std::move(l));
    }
  }
  if (static_cast<int>(layers_.size()) != config_.num_hidden_layers)
    refuse("the weights have " + std::to_string(layers_.size()) + " layers, the config " +
           std::to_string(config_.num_hidden_layers));
  auto inv_freq = rope_inv_freq(config_);
  inv_freq_ = kc::device_buffer<float>(inv_freq.size());
  inv_freq_.upload(inv_freq);
  k_scale_.assign(config_.num_hidden_layers, options_.kv_dtype == kv_cache_dtype::fp8_e4m3 ? options_.k_scale : 1.0f);
  v_scale_.assign(config_.num_hidden_layers, options_.kv_dtype == kv_cache_dtype::fp8_e4m3 ? options_.v_scale : 1.0f);
  plan_.weight_bytes = weight_bytes;

  // Activations for the largest step; nothing is allocated per step.
  max_tokens_ = options_.max_num_batched_tokens;
  const std::size_t rows = max_tokens_;
  auto activation = [&](std::size_t width) { return bytes(rows * width * act_bytes_); };
  x_ = activation(hidden);
  h_ = activation(hidden);
  proj_ = activation(hidden);
  wide_ = activation(std::max(qkv_width, 2 * inter));
  mid_ = activation(std::max(heads * hd, inter));
  last_x_ = activation(hidden);
  last_proj_ = activation(hidden);
  logits_ = kc::device_buffer<float>(rows * vocab);
  const int seqs = std::min(options_.max_num_seqs, max_tokens_);
  const int blocks_per_seq = options_.max_blocks_per_seq > 0
                                 ? options_.max_blocks_per_seq
                                 : (config_.max_position_embeddings + options_.block_size - 1) / options_.block_size;
  const std::size_t staging = round_up(rows * 8, 16) + 3 * round_up(rows * 4, 16) + round_up((seqs + 1) * 4, 16) +
                              round_up(static_cast<std::size_t>(seqs) * blocks_per_seq * 4, 16);
  inputs_host_ = kc::pinned_buffer<std::byte>(staging);
  inputs_device_ = bytes(staging);
  // Sampling on the device: every logits row's parameters in, one token per row out.
  sampled_tokens_offset_ = round_up(rows * sizeof(kc::sample_row_params), 16);
  sample_params_host_ = kc::pinned_buffer<std::byte>(sampled_tokens_offset_ + round_up(rows * 4, 16));
  sample_params_device_ = bytes(sample_params_host_.size());
  // Split-K scratch of paged attention for the largest step and context (a few MiB at most);
  // never empty, so that attention always takes its fast paths.
  attention_ws_ = kc::device_buffer<float>(std::max<std::size_t>(
      kc::paged_attention_workspace_bytes(max_tokens_, heads, kv_heads, hd, blocks_per_seq * options_.block_size) /
          sizeof(float),
      1));
  // Its counters, cleared once here: each call leaves them zero (graph replays included).
  attention_counters_ = kc::device_buffer<std::uint32_t>(kc::paged_attention_counter_count(max_tokens_, heads));
  kc::check(cudaMemset(attention_counters_.data(), 0, attention_counters_.bytes()), "cudaMemset (attention counters)");
  if (options_.cuda_graphs)
    plan_graph_inputs(seqs, blocks_per_seq);
  plan_.activation_bytes = x_.bytes() + h_.bytes() + proj_.bytes() + wide_.bytes() + mid_.bytes() + last_x_.bytes() +
                           last_proj_.bytes() + logits_.bytes() + inputs_device_.bytes() +
                           sample_params_device_.bytes() + gemm_.workspace_bytes() + graph_inputs_device_.bytes();
  plan_.activation_bytes += attention_ws_.bytes() + attention_counters_.bytes();

  // The KV pool takes what the utilization target leaves after everything above (and
  // after whatever else already lives on the device).
  plan_.kv_block_bytes = kv_block_bytes(config_, options_.block_size, options_.kv_dtype);
  int num_blocks = options_.num_blocks;
  if (num_blocks == 0) {
    std::size_t free_now = 0, total = 0;
    kc::check(cudaMemGetInfo(&free_now, &total), "cudaMemGetInfo");
    const double budget =
        options_.gpu_memory_utilization * static_cast<double>(total) - static_cast<double>(total - free_now);
    const double fit = budget > 0 ? std::floor(budget / static_cast<double>(plan_.kv_block_bytes)) : 0.0;
    num_blocks = static_cast<int>(std::min(fit, 1e9));
    if (options_.max_blocks > 0)
      num_blocks = std::min(num_blocks, options_.max_blocks);
    plan_.blocks_from_memory = true;
    if (num_blocks < 1)
      refuse("no device memory is left for the KV cache (weights " + std::to_string(weight_bytes >> 20) +
             " MiB, activations " + std::to_string(plan_.activation_bytes >> 20) + " MiB, " +
             std::to_string(free_now >> 20) + " MiB free of " + std::to_string(total >> 20) + " MiB at utilization " +
             std::to_string(options_.gpu_memory_utilization) +
             "): raise gpu-memory-utilization or lower max-num-batched-tokens");
  }
  cache_ = kv_cache_config{num_blocks, options_.block_size, options_.num_host_blocks};
  block_slice_bytes_ = plan_.kv_block_bytes / (2 * static_cast<std::size_t>(config_.num_hidden_layers));
  kv_device_ = bytes(2 * static_cast<std::size_t>(config_.num_hidden_layers) * num_blocks * block_slice_bytes_);
  // Zeroed so that a stray read of an unwritten slot gives 0 (as on the CPU), never NaN.
  kc::check(cudaMemset(kv_device_.data(), 0, kv_device_.bytes()), "cudaMemset (KV pool)");
  kv_host_ = kc::pinned_buffer<std::byte>(2 * static_cast<std::size_t>(config_.num_hidden_layers) *
                                          cache_.num_host_blocks * block_slice_bytes_);
  if (kv_host_.bytes() > 0)
    std::memset(kv_host_.data(), 0, kv_host_.bytes());
  plan_.num_blocks = num_blocks;
  plan_.kv_pool_bytes = kv_device_.bytes();
  plan_.num_host_blocks = cache_.num_host_blocks;
  plan_.host_pool_bytes = kv_host_.bytes();
  kc::check(cudaDeviceSynchronize(), "cudaDeviceSynchronize (runner set-up)");
  if (options_.cuda_graphs)
    capture_graphs();
}

cuda_model_runner::bytes cuda_model_runner::upload(std::span<const float> values) const {
  bytes b(values.size() * act_bytes_);
  if (values.empty())
    return b;
  if (options_.dtype == cuda_dtype::float32) {
    kc::check(cudaMemcpy(b.data(), values.data(), b.bytes(), cudaMemcpyHostToDevice), "cudaMemcpy (weights)");
  } else {
    const bool f16 = options_.dtype == cuda_dtype::float16;
    std::vector<std::uint16_t> half(values.size());
    for (std::size_t i = 0; i < values.size(); ++i)
      half[i] = f16 ? f32_to_f16(values[i]) : f32_to_bf16(values[i]);
    kc::check(cudaMemcpy(b.data(), half.data(), b.bytes(), cudaMemcpyHostToDevice), "cudaMemcpy (weights)");
  }
  return b;
}

std::size_t cuda_model_runner::make_dummy_weights() {
  const std::size_t hidden = config_.hidden_size, heads = config_.num_attention_heads,
                    kv_heads = config_.num_key_value_heads, hd = config_.head_dim, inter = config_.intermediate_size,
                    vocab = config_.vocab_size;
  const std::size_t qkv_width = (heads + 2 * kv_heads) * hd;
  std::size_t total = 0;
  std::uint64_t tensor = 0; // each tensor draws from its own seed: (dummy_seed, tensor index)
  auto make = [&](std::size_t n, float mean, float std) {
    bytes b(n * act_bytes_);
    const std::uint64_t seed = (options_.dummy_seed << 20) + tensor++;
    const cudaError_t e =
        options_.dtype == cuda_dtype::float32
            ? kc::random_fill(reinterpret_cast<float*>(b.data()), n, seed, mean, std, compute_)
        : options_.dtype == cuda_dtype::float16
            ? kc::random_fill(reinterpret_cast<__half*>(b.data()), n, seed, mean, std, compute_)
            : kc::random_fill(reinterpret_cast<__nv_bfloat16*>(b.data()), n, seed, mean, std, compute_);
    kc::check(e, "random_fill (dummy weights)");
    total += b.bytes();
    return b;
  };
  // The usual Llama init scale; norms of 1 keep the activations' scale layer after layer.
  constexpr float matrix_std = 0.02f;
  embed_ = make(vocab * hidden, 0.0f, matrix_std);
  final_norm_ = make(hidden, 1.0f, 0.0f);
  if (!config_.tie_word_embeddings)
    lm_head_ = make(vocab * hidden, 0.0f, matrix_std);
  for (int i = 0; i < config_.num_hidden_layers; ++i) {
    layer l;
    l.input_norm = make(hidden, 1.0f, 0.0f);
    l.qkv = make(qkv_width * hidden, 0.0f, matrix_std);
    if (config_.attention_bias)
      l.qkv_bias = make(qkv_width, 0.0f, 0.0f);
    l.o = make(hidden * heads * hd, 0.0f, matrix_std);
    l.post_norm = make(hidden, 1.0f, 0.0f);
    l.gate_up = make(2 * inter * hidden, 0.0f, matrix_std);
    l.down = make(hidden * inter, 0.0f, matrix_std);
    layers_.push_back(std::move(l));
  }
  return total;
}

std::byte* cuda_model_runner::kv_pool(bool host, int layer, int which) const {
  const std::size_t blocks = host ? cache_.num_host_blocks : cache_.num_blocks;
  std::byte* base = host ? kv_host_.data() : kv_device_.data();
  return base + (static_cast<std::size_t>(layer) * 2 + which) * blocks * block_slice_bytes_;
}

cuda_model_runner::step_inputs cuda_model_runner::stage_inputs(const step_batch& b, std::size_t& total) {
  struct part {
    const void* data;
    std::size_t bytes;
  };
  const part parts[] = {{b.slot_mapping.data(), b.slot_mapping.size() * sizeof(std::int64_t)},
                        {b.token_ids.data(), b.token_ids.size() * sizeof(std::int32_t)},
                        {b.positions.data(), b.positions.size() * sizeof(std::int32_t)},
                        {b.query_start.data(), b.query_start.size() * sizeof(std::int32_t)},
                        {b.block_tables.data(), b.block_tables.size() * sizeof(std::int32_t)},
                        {b.logits_rows.data(), b.logits_rows.size() * sizeof(std::int32_t)}};
  std::size_t offsets[6];
  total = 0;
  for (int i = 0; i < 6; ++i) {
    offsets[i] = total;
    total += round_up(parts[i].bytes, 16);
  }
  if (total > inputs_host_.bytes()) {
    // Only when a step outgrows the sizing hints (longer block tables than expected);
    // the previous step has completed, so nothing still reads the old buffers.
    inputs_host_ = kc::pinned_buffer<std::byte>(total);
    inputs_device_ = bytes(total);
  }
  for (int i = 0; i < 6; ++i)
    if (parts[i].bytes > 0)
      std::memcpy(inputs_host_.data() + offsets[i], parts[i].data, parts[i].bytes);
  const std::byte* d = inputs_device_.data();
  auto i32 = [&](int i) { return reinterpret_cast<const std::int32_t*>(d + offsets[i]); };
  return {reinterpret_cast<const std::int64_t*>(d + offsets[0]), i32(1), i32(2), i32(3), i32(4), i32(5)};
}

template <class T, class C>
void cuda_model_runner::forward(const step_shape& shape, const step_inputs& in, step_status& status) {
  const int hidden = config_.hidden_size, heads = config_.num_attention_heads, kv_heads = config_.num_key_value_heads,
            hd = config_.head_dim, inter = config_.intermediate_size, vocab = config_.vocab_size;
  const int qkv_width = (heads + 2 * kv_heads) * hd, q_width = heads * hd;
  const int rows = shape.rows, seqs = shape.seqs;
  const float eps = config_.rms_norm_eps;
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
  auto linear = [&](const void* x, const bytes& w, void* y, int m, int n, int k, kc::gemm_type out, const char* what,
                    const bytes* bias = nullptr) {
    const T* b = bias != nullptr && bias->size() > 0 ? reinterpret_cast<const T*>(bias->data()) : nullptr;
    if (b != nullptr && out != type)
      return ok(cudaErrorInvalidValue, what); // a bias of T with a wider y: neither path reads it right
    if constexpr (!std::is_same_v<T, float>) {
      if (options_.small_batch_gemv && kc::gemv_preferred(m, n, k) && kc::gemv_applies(x, w.data(), m, n, k)) {
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
  T *x = as(x_), *h = as(h_), *proj = as(proj_), *wide = as(wide_), *mid = as(mid_);

  if (!ok(kc::embedding<T>(in.token_ids, as(embed_), x, rows, hidden, s), "embedding"))
    return;
  for (int l = 0; l < config_.num_hidden_layers; ++l) {
    const layer& w = layers_[l];
    C* k_cache = reinterpret_cast<C*>(kv_pool(false, l, 0));
    C* v_cache = reinterpret_cast<C*>(kv_pool(false, l, 1));
    // x = x + attention(rms_norm(x)); the previous layer's MLP residual is added here.
    const cudaError_t norm = l == 0 ? kc::rms_norm<T>(x, as(w.input_norm), h, rows, hidden, eps, s)
                                    : kc::add_rms_norm<T>(x, proj, as(w.input_norm), h, rows, hidden, eps, s);
    if (!ok(norm, "input rms_norm"))
      return;
    // [T, hidden] · [qkv, hidden]ᵀ + bias -> [T, qkv]
    if (!linear(h, w.qkv, wide, rows, qkv_width, hidden, type, "qkv gemm", &w.qkv_bias))
      return;
    kc::rope_write_kv_params<T, C> rope{.qkv = wide,
                                        .positions = in.positions,
                                        .inv_freq = inv_freq_.data(),
                                        .slot_mapping = in.slot_mapping,
                                        .k_cache = k_cache,
                                        .v_cache = v_cache,
                                        .tokens = rows,
                                        .heads = heads,
                                        .kv_heads = kv_heads,
                                        .head_dim = hd,
                                        .block_size = cache_.block_size,
                                        .k_scale = k_scale_[l],
                                        .v_scale = v_scale_[l]};
    if (!ok(kc::rope_write_kv(rope, s), "rope_write_kv"))
      return;
    kc::paged_attention_params<T, C> attn{.q = wide,
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
                                          .scale = 1.0f / std::sqrt(static_cast<float>(hd)),
                                          .k_scale = k_scale_[l],
                                          .v_scale = v_scale_[l],
                                          .workspace = attention_ws_.data(),
                                          .workspace_bytes = attention_ws_.bytes(),
                                          .split_counters = attention_counters_.data(),
                                          .min_query_len = shape.min_query_len,
                                          .max_query_len = shape.max_query_len};
    if (!ok(kc::paged_attention(attn, s), "paged_attention"))
      return;
    if (!linear(mid, w.o, proj, rows, hidden, q_width, type,
                "o gemm")) // [T, heads*hd] · [hidden, heads*hd]ᵀ -> [T, hidden]
      return;
    // x = x + mlp(rms_norm(x))
    if (!ok(kc::add_rms_norm<T>(x, proj, as(w.post_norm), h, rows, hidden, eps, s), "post-attention rms_norm"))
      return;
    if (!linear(h, w.gate_up, wide, rows, 2 * inter, hidden, type,
                "gate_up gemm")) // [T, hidden] · [2I, hidden]ᵀ -> [T, 2I]
      return;
    if (!ok(kc::silu_and_mul<T>(wide, mid, rows, inter, s), "silu_and_mul")) // [T, 2I] -> [T, I]
      return;
    if (!linear(mid, w.down, proj, rows, hidden, inter, type, "down gemm")) // [T, I] · [hidden, I]ᵀ -> [T, hidden]
      return;
  }

  // Only the rows that need logits get the last residual add, the final norm and the LM head.
  const int n_rows = shape.logit_rows;
  if (n_rows == 0)
    return;
  T *last_x = as(last_x_), *last = as(last_proj_);
  if (!ok(kc::embedding<T>(in.logits_rows, x, last_x, n_rows, hidden, s), "gather x rows") ||
      !ok(kc::embedding<T>(in.logits_rows, proj, last, n_rows, hidden, s), "gather mlp rows") ||
      !ok(kc::add_rms_norm<T>(last_x, last, as(final_norm_), last, n_rows, hidden, eps, s), "final rms_norm"))
    return;
  const bytes& head = lm_head_.size() > 0 ? lm_head_ : embed_;
  // [R, hidden] · [vocab, hidden]ᵀ -> [R, vocab] fp32, whatever T is
  linear(last, head, logits_.data(), n_rows, vocab, hidden, kc::gemm_type::f32, "lm_head gemm");
}

void cuda_model_runner::execute(const step_batch& batch, std::span<float> logits) {
  const std::size_t vocab = config_.vocab_size, n_rows = batch.logits_rows.size();
  if (logits.size() < n_rows * vocab)
    throw std::logic_error("logits buffer is smaller than rows * vocab");
  if (!begin_step(batch))
    return;
  step_status status;
  launch_step(batch, status);
  if (status.ok() && n_rows > 0)
    if (cudaError_t e = cudaMemcpyAsync(logits.data(), logits_.data(), n_rows * vocab * sizeof(float),
                                        cudaMemcpyDeviceToHost, compute_);
        e != cudaSuccess)
      status = {static_cast<int>(e), "cudaMemcpyAsync (logits)", false};
  finish_step(status);
}

void cuda_model_runner::execute_sampled(const step_batch& batch, std::span<const device_sample> rows,
                                        std::span<token_id> tokens) {
  const std::size_t n_rows = batch.logits_rows.size();
  if (rows.size() != n_rows || tokens.size() != n_rows)
    throw std::logic_error("execute_sampled: one sampling row and one token per logits row");
  if (!begin_step(batch))
    return;
  // The rows' parameters travel in a second small copy; the kernel waits for it on the same stream.
  auto* params = reinterpret_cast<kc::sample_row_params*>(sample_params_host_.data());
  for (std::size_t i = 0; i < n_rows; ++i)
    params[i] = {
        static_cast<std::int32_t>(i), rows[i].temperature, rows[i].top_k, rows[i].top_p, rows[i].min_p, rows[i].u};
  step_status status;
  launch_step(batch, status);
  auto* device_params = reinterpret_cast<kc::sample_row_params*>(sample_params_device_.data());
  auto* device_tokens = reinterpret_cast<std::int32_t*>(sample_params_device_.data() + sampled_tokens_offset_);
  const auto step = [&](cudaError_t e, const char* what) {
    if (status.ok() && e != cudaSuccess)
      status = {static_cast<int>(e), what, false};
  };
  if (status.ok() && n_rows > 0) {
    step(cudaMemcpyAsync(device_params, params, n_rows * sizeof(kc::sample_row_params), cudaMemcpyHostToDevice,
                         compute_),
         "cudaMemcpyAsync (sampling rows)");
    if (status.ok())
      step(kc::sample_rows(logits_.data(), config_.vocab_size, device_params, static_cast<int>(n_rows), device_tokens,
                           compute_),
           "sample_rows");
    if (status.ok())
      step(cudaMemcpyAsync(sample_params_host_.data() + sampled_tokens_offset_, device_tokens,
                           n_rows * sizeof(std::int32_t), cudaMemcpyDeviceToHost, compute_),
           "cudaMemcpyAsync (sampled tokens)");
  }
  finish_step(status);
  std::memcpy(tokens.data(), sample_params_host_.data() + sampled_tokens_offset_, n_rows * sizeof(std::int32_t));
}

bool cuda_model_runner::begin_step(const step_batch& batch) {
  check_step_batch(batch, cache_, config_.vocab_size);
  if (batch.num_tokens() == 0)
    return false;
  if (batch.num_tokens() > static_cast<std::size_t>(max_tokens_))
    throw std::logic_error(
        "step_batch: " + std::to_string(batch.num_tokens()) +
        " tokens, but the CUDA runner holds activations for max_num_batched_tokens = " + std::to_string(max_tokens_));
  kc::check(cudaSetDevice(options_.device), "cudaSetDevice"); // the executor's thread may be new to CUDA
  return true;
}

void cuda_model_runner::launch_step(const step_batch& batch, step_status& status) {
  if (const int slot = graph_slot(batch); slot >= 0) {
    run_graph(batch, slot, status);
    return;
  }
  std::size_t input_bytes = 0;
  const step_inputs in = stage_inputs(batch, input_bytes);
  if (cudaError_t e =
          cudaMemcpyAsync(inputs_device_.data(), inputs_host_.data(), input_bytes, cudaMemcpyHostToDevice, compute_);
      e != cudaSuccess)
    status = {static_cast<int>(e), "cudaMemcpyAsync (step inputs)", false};
  int min_query_len = static_cast<int>(batch.num_tokens()), max_query_len = 0;
  for (std::size_t s = 0; s + 1 < batch.query_start.size(); ++s) {
    min_query_len = std::min(min_query_len, batch.query_start[s + 1] - batch.query_start[s]);
    max_query_len = std::max(max_query_len, batch.query_start[s + 1] - batch.query_start[s]);
  }
  if (status.ok())
    run_forward({static_cast<int>(batch.num_tokens()), static_cast<int>(batch.num_seqs()), batch.max_blocks_per_seq,
                 static_cast<int>(batch.logits_rows.size()), min_query_len, max_query_len},
                in, status);
}

void cuda_model_runner::finish_step(const step_status& status) {
  const cudaError_t done = cudaStreamSynchronize(compute_);
  if (!status.ok()) {
    if (status.cublas)
      throw kc::cublas_error(static_cast<cublasStatus_t>(status.code), std::string("step: ") + status.what);
    throw kc::cuda_error(static_cast<cudaError_t>(status.code), std::string("step: ") + status.what);
  }
  kc::check(done, "step: cudaStreamSynchronize");
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

// --- CUDA graphs of decode steps ---------------------------------------------------------
// A graph fixes every pointer and size its kernels were launched with. The pointers are
// the runner's own buffers (weights, activations, KV pools, GEMM workspace, and the graph
// inputs below), allocated once; the sizes are the padded batch size and the table width
// (max_blocks_per_seq: the attention kernels plan their split-K partitions for that context).
// Padding sequences have one token at position 0 with slot -1 (nothing is written to the
// cache) reading block 0: their rows are computed and ignored.

void cuda_model_runner::plan_graph_inputs(int max_seqs, int table_width) {
  for (int size : {1, 2, 4, 8, 12, 16, 24, 32})
    if (size < max_seqs)
      graph_sizes_.push_back(size);
  for (int size = 48; size < max_seqs; size += 16)
    graph_sizes_.push_back(size);
  graph_sizes_.push_back(max_seqs);
  graphs_.resize(graph_sizes_.size());
  graph_table_width_ = table_width;
  const std::size_t g = max_seqs;
  const std::size_t slots = 0, tokens = slots + round_up(g * 8, 16), positions = tokens + round_up(g * 4, 16),
                    logits_rows = positions + round_up(g * 4, 16), query_start = logits_rows + round_up(g * 4, 16);
  graph_tables_offset_ = query_start + round_up((g + 1) * 4, 16);
  const std::size_t total = graph_tables_offset_ + g * table_width * 4;
  graph_inputs_host_ = kc::pinned_buffer<std::byte>(total);
  graph_inputs_device_ = bytes(total);
  std::memset(graph_inputs_host_.data(), 0, total);
  // Block 0 wherever a table entry is never written: a valid block, should anything read it.
  kc::check(cudaMemset(graph_inputs_device_.data(), 0, total), "cudaMemset (graph inputs)");
  // One token per sequence: sequence i is row i, and every row gets logits.
  auto* host_rows = reinterpret_cast<std::int32_t*>(graph_inputs_host_.data() + logits_rows);
  auto* host_starts = reinterpret_cast<std::int32_t*>(graph_inputs_host_.data() + query_start);
  for (std::size_t i = 0; i <= g; ++i) {
    if (i < g)
      host_rows[i] = static_cast<std::int32_t>(i);
    host_starts[i] = static_cast<std::int32_t>(i);
  }
  const std::byte* d = graph_inputs_device_.data();
  auto i32 = [&](std::size_t offset) { return reinterpret_cast<const std::int32_t*>(d + offset); };
  graph_in_ = {reinterpret_cast<const std::int64_t*>(d + slots), i32(tokens),      i32(positions),
               i32(query_start),                                  i32(graph_tables_offset_), i32(logits_rows)};
}

int cuda_model_runner::graph_slot(const step_batch& b) const {
  const std::size_t n = b.num_seqs();
  if (graph_sizes_.empty() || graphs_paused_ || !graph_error_.empty() || n == 0 || b.num_tokens() != n ||
      n > static_cast<std::size_t>(graph_sizes_.back()) || b.max_blocks_per_seq > graph_table_width_ ||
      b.logits_rows.size() != n)
    return -1;
  for (std::size_t i = 0; i < n; ++i)
    if (b.logits_rows[i] != static_cast<std::int32_t>(i) || b.query_start[i + 1] != static_cast<std::int32_t>(i + 1))
      return -1;
  const auto it = std::lower_bound(graph_sizes_.begin(), graph_sizes_.end(), static_cast<int>(n));
  return static_cast<int>(it - graph_sizes_.begin());
}

void cuda_model_runner::run_graph(const step_batch& b, int slot, step_status& status) {
  const int n = static_cast<int>(b.num_seqs()), padded = graph_sizes_[slot], width = graph_table_width_;
  std::byte* host = graph_inputs_host_.data();
  auto* slots = reinterpret_cast<std::int64_t*>(host + (reinterpret_cast<const std::byte*>(graph_in_.slot_mapping) -
                                                        graph_inputs_device_.data()));
  auto at = [&](const std::int32_t* device) {
    return reinterpret_cast<std::int32_t*>(host + (reinterpret_cast<const std::byte*>(device) -
                                                   graph_inputs_device_.data()));
  };
  std::int32_t *tokens = at(graph_in_.token_ids), *positions = at(graph_in_.positions),
               *tables = at(graph_in_.block_tables);
  for (int i = 0; i < padded; ++i) {
    const bool real = i < n;
    slots[i] = real ? b.slot_mapping[i] : -1;
    tokens[i] = real ? b.token_ids[i] : 0;
    positions[i] = real ? b.positions[i] : 0;
    std::int32_t* row = tables + static_cast<std::size_t>(i) * width;
    if (real)
      std::copy_n(b.block_tables.begin() + static_cast<std::size_t>(i) * b.max_blocks_per_seq, b.max_blocks_per_seq,
                  row);
    else
      row[0] = 0;
  }
  // The arrays before the tables, then only the table columns this step uses: the kernels read
  // a sequence's table only up to its position's block, never the stale entries past it.
  const std::size_t columns = std::max(b.max_blocks_per_seq, 1) * sizeof(std::int32_t),
                    pitch = static_cast<std::size_t>(width) * sizeof(std::int32_t);
  if (cudaError_t e = cudaMemcpyAsync(graph_inputs_device_.data(), host, graph_tables_offset_, cudaMemcpyHostToDevice,
                                      compute_);
      e != cudaSuccess) {
    status = {static_cast<int>(e), "cudaMemcpyAsync (graph step inputs)", false};
    return;
  }
  if (cudaError_t e = cudaMemcpy2DAsync(graph_inputs_device_.data() + graph_tables_offset_, pitch,
                                        host + graph_tables_offset_, pitch, columns, padded, cudaMemcpyHostToDevice,
                                        compute_);
      e != cudaSuccess) {
    status = {static_cast<int>(e), "cudaMemcpy2DAsync (graph step block tables)", false};
    return;
  }
  if (cudaError_t e = graphs_[slot].launch(compute_); e != cudaSuccess) {
    status = {static_cast<int>(e), "cudaGraphLaunch", false};
    return;
  }
  ++graph_replays_;
}

// Every size is captured when the runner is built, as vLLM does, so that no request's step
// pays for a capture. The inputs are padding rows only: slot -1 writes no KV, and each row
// attends to position 0 of block 0 (memory that exists; the logits are never read).
void cuda_model_runner::capture_graphs() {
  std::byte* host = graph_inputs_host_.data();
  auto* slots = reinterpret_cast<std::int64_t*>(host + (reinterpret_cast<const std::byte*>(graph_in_.slot_mapping) -
                                                        graph_inputs_device_.data()));
  std::fill_n(slots, graph_sizes_.back(), std::int64_t{-1});
  // Token ids, positions and block tables stay 0 from plan_graph_inputs; logits rows and query
  // starts hold their fixed values there too.
  kc::check(cudaMemcpy(graph_inputs_device_.data(), host, graph_inputs_host_.bytes(), cudaMemcpyHostToDevice),
            "cudaMemcpy (graph capture inputs)");
  for (std::size_t slot = 0; slot < graph_sizes_.size() && graph_error_.empty(); ++slot) {
    const int n = graph_sizes_[slot];
    const step_shape shape{n, n, graph_table_width_, n, 1, 1};
    // Once kernel by kernel first: it loads every kernel and plans every GEMM of these shapes,
    // which capture must not do.
    step_status status;
    run_forward(shape, graph_in_, status);
    if (cudaError_t e = cudaStreamSynchronize(compute_); status.ok() && e != cudaSuccess)
      status = {static_cast<int>(e), "cudaStreamSynchronize (before capture)", false};
    if (!status.ok()) {
      graph_error_ = "decode step of batch " + std::to_string(n) + " before capture: " + status.what + " failed";
      break;
    }
    capture_graph(static_cast<int>(slot), shape);
  }
  kc::check(cudaDeviceSynchronize(), "cudaDeviceSynchronize (graph capture)");
}

void cuda_model_runner::capture_graph(int slot, const step_shape& shape) {
  // Thread-local mode: only this thread's unsafe calls would break the capture.
  step_status status;
  cudaGraph_t graph = nullptr;
  cudaError_t e = cudaStreamBeginCapture(compute_, cudaStreamCaptureModeThreadLocal);
  if (e == cudaSuccess) {
    run_forward(shape, graph_in_, status);
    e = cudaStreamEndCapture(compute_, &graph); // always: it ends capture mode on the stream
  }
  const std::string where = "CUDA graph capture of a decode step of batch " + std::to_string(shape.seqs) + ": ";
  if (!status.ok() || e != cudaSuccess) {
    if (graph != nullptr)
      cudaGraphDestroy(graph);
    cudaGetLastError(); // capture errors are not sticky; clear the last-error slot for later checks
    graph_error_ = where + (!status.ok() ? std::string(status.what) + " failed"
                                         : std::string(cudaGetErrorName(e)) + " (" + cudaGetErrorString(e) + ")");
    return;
  }
  try {
    graphs_[slot] = kc::cuda_graph(graph);
  } catch (const kc::cuda_error& error) {
    graph_error_ = where + error.what();
  }
}

void cuda_model_runner::copy_blocks(kv_copy kind, std::span<const block_copy> pairs) {
  const int src_blocks = kind == kv_copy::host_to_device ? cache_.num_host_blocks : cache_.num_blocks;
  const int dst_blocks = kind == kv_copy::device_to_host ? cache_.num_host_blocks : cache_.num_blocks;
  for (const auto& p : pairs)
    if (p.src < 0 || p.src >= src_blocks || p.dst < 0 || p.dst >= dst_blocks)
      throw std::logic_error("copy_blocks: block pair " + std::to_string(p.src) + " -> " + std::to_string(p.dst) +
                             " is outside the pools");
  if (pairs.empty())
    return;
  kc::check(cudaSetDevice(options_.device), "cudaSetDevice");
  const bool src_host = kind == kv_copy::host_to_device, dst_host = kind == kv_copy::device_to_host;
  const cudaMemcpyKind direction = src_host   ? cudaMemcpyHostToDevice
                                   : dst_host ? cudaMemcpyDeviceToHost
                                              : cudaMemcpyDeviceToDevice;
  // The copies wait for the steps already queued (they may write the source blocks), and
  // the next step waits for the copies (it may read the destination blocks).
  compute_idle_.record(compute_);
  kc::check(cudaStreamWaitEvent(copy_, compute_idle_, 0), "cudaStreamWaitEvent (copy after compute)");
  // Runs of consecutive source and destination blocks move as one copy per layer and K/V.
  for (std::size_t i = 0; i < pairs.size();) {
    std::size_t run = 1;
    while (i + run < pairs.size() && pairs[i + run].src == pairs[i].src + static_cast<int>(run) &&
           pairs[i + run].dst == pairs[i].dst + static_cast<int>(run))
      ++run;
    for (int l = 0; l < config_.num_hidden_layers; ++l)
      for (int which = 0; which < 2; ++which) {
        const std::byte* src = kv_pool(src_host, l, which) + pairs[i].src * block_slice_bytes_;
        std::byte* dst = kv_pool(dst_host, l, which) + pairs[i].dst * block_slice_bytes_;
        kc::check(cudaMemcpyAsync(dst, src, run * block_slice_bytes_, direction, copy_), "cudaMemcpyAsync (KV blocks)");
      }
    i += run;
  }
  copies_done_.record(copy_);
  kc::check(cudaStreamWaitEvent(compute_, copies_done_, 0), "cudaStreamWaitEvent (compute after copy)");
  // Synchronous completion: the caller frees the source blocks as soon as this returns.
  copy_.synchronize();
}

std::unique_ptr<model_runner> make_cuda_model_runner(const model_config& config, const model_weights& weights,
                                                     const cuda_runner_options& options, cuda_memory_plan* plan) {
  auto runner = std::make_unique<cuda_model_runner>(config, weights, options);
  if (plan != nullptr)
    *plan = runner->memory_plan();
  return runner;
}

} // namespace troupe::runtime
