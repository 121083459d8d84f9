// The fp32 forward pass, written the way the paper reads:
//   x = x + attention(rms_norm(x));  x = x + mlp(rms_norm(x)),
// and with Gemma's sandwich norms x = x + rms_norm(attention(rms_norm(x))), the same around the MLP;
// a mixture-of-experts model's mlp is its experts (runtime/cpu/cpu_moe_layer.hpp).
#include "runtime/cpu/cpu_model_runner.hpp"

#include <cmath>
#include <stdexcept>

#include "kernels/cpu/cpu_kernels.hpp"
#include "runtime/kv_geometry.hpp"
#include "runtime/rope.hpp"
#include "runtime/weight_shard.hpp"

namespace troupe::runtime {

namespace kc = kernels::cpu;

cpu_model_runner::cpu_model_runner(model_config config, model_weights weights, kv_cache_config cache,
                                   std::size_t threads, std::optional<tensor_parallel_rank> rank)
    : config_(std::move(config)),
      weights_(std::move(weights)),
      cache_(cache),
      shard_(rank ? rank->shard : shard_shapes(config_, 1).front()),
      group_(rank ? rank->group : nullptr),
      pool_(threads) {
  if (rank) {
    if (group_ == nullptr || group_->size() != shard_.ranks || group_->rank() != shard_.rank)
      throw std::invalid_argument("tensor-parallel rank " + std::to_string(shard_.rank) + " of " +
                                  std::to_string(shard_.ranks) + " needs a collective of that rank and size");
    if (shard_ != shard_shapes(config_, shard_.ranks)[static_cast<std::size_t>(shard_.rank)])
      throw std::invalid_argument("tensor-parallel rank " + std::to_string(shard_.rank) + " of " +
                                  std::to_string(shard_.ranks) + ": its shard is not the model's shard_shapes");
  }
  check_shard_weights(weights_, config_, shard_);
  if (!valid_block_size(cache_.block_size))
    throw std::invalid_argument("block size must be a power of two in 1..256, got " +
                                std::to_string(cache_.block_size));
  if (cache_.num_blocks < 1)
    throw std::invalid_argument("the KV cache needs at least one block");
  inv_freq_ = rope_inv_freq(config_);
  if (config_.sliding_rope_theta)
    sliding_inv_freq_ = rope_inv_freq(config_, true);
  // Gemma's norms scale by (1 + weight): added once here, in fp32 as transformers adds it.
  if (config_.norm_weight_offset != 0.0f) {
    const auto offset = [&](std::vector<float>& weight) {
      for (float& w : weight)
        w += config_.norm_weight_offset;
    };
    offset(weights_.final_norm);
    for (auto& layer : weights_.layers)
      for (auto* norm : {&layer.input_norm, &layer.post_attention_norm, &layer.pre_feedforward_norm,
                         &layer.post_feedforward_norm, &layer.q_norm, &layer.k_norm})
        offset(*norm);
  }
  std::size_t block_elems = static_cast<std::size_t>(shard_.kv_heads) * cache_.block_size * config_.head_dim;
  for (int l = 0; l < config_.num_hidden_layers; ++l) {
    k_cache_.emplace_back(block_elems * cache_.num_blocks, 0.0f);
    v_cache_.emplace_back(block_elems * cache_.num_blocks, 0.0f);
    host_k_cache_.emplace_back(block_elems * cache_.num_host_blocks, 0.0f);
    host_v_cache_.emplace_back(block_elems * cache_.num_host_blocks, 0.0f);
    auto& src = weights_.layers[l];
    layer fused;
    fused.gate_up.reserve(src.gate_proj.size() + src.up_proj.size());
    fused.gate_up.insert(fused.gate_up.end(), src.gate_proj.begin(), src.gate_proj.end());
    fused.gate_up.insert(fused.gate_up.end(), src.up_proj.begin(), src.up_proj.end());
    // The fused copy is the one used; drop the originals to keep one copy in memory.
    std::vector<float>().swap(src.gate_proj);
    std::vector<float>().swap(src.up_proj);
    fused_.push_back(std::move(fused));
  }
}

void cpu_model_runner::follow_step(const step_batch& batch) {
  if (group_ == nullptr)
    throw std::logic_error("this cpu model runner is not a tensor-parallel rank");
  const std::size_t whole = batch.logits_rows.size() * static_cast<std::size_t>(config_.vocab_size);
  if (follower_logits_.size() < whole)
    follower_logits_.resize(whole);
  execute(batch, std::span<float>(follower_logits_).first(whole));
}

std::size_t cpu_model_runner::block_bytes() const {
  return 2 * sizeof(float) * static_cast<std::size_t>(config_.num_hidden_layers) * shard_.kv_heads * cache_.block_size *
         config_.head_dim;
}

void cpu_model_runner::copy_blocks(kv_copy kind, std::span<const block_copy> pairs) {
  // On the CPU backend both tiers are host memory: a swap is a memcpy per block and layer.
  const std::size_t block_elems = static_cast<std::size_t>(shard_.kv_heads) * cache_.block_size * config_.head_dim;
  const int src_blocks = kind == kv_copy::host_to_device ? cache_.num_host_blocks : cache_.num_blocks;
  const int dst_blocks = kind == kv_copy::device_to_host ? cache_.num_host_blocks : cache_.num_blocks;
  for (const auto& p : pairs)
    if (p.src < 0 || p.src >= src_blocks || p.dst < 0 || p.dst >= dst_blocks)
      throw std::logic_error("copy_blocks: block pair " + std::to_string(p.src) + " -> " + std::to_string(p.dst) +
                             " is outside the pools");
  for (int l = 0; l < config_.num_hidden_layers; ++l) {
    auto& src_k = kind == kv_copy::host_to_device ? host_k_cache_[l] : k_cache_[l];
    auto& src_v = kind == kv_copy::host_to_device ? host_v_cache_[l] : v_cache_[l];
    auto& dst_k = kind == kv_copy::device_to_host ? host_k_cache_[l] : k_cache_[l];
    auto& dst_v = kind == kv_copy::device_to_host ? host_v_cache_[l] : v_cache_[l];
    for (const auto& p : pairs) {
      std::copy_n(src_k.data() + p.src * block_elems, block_elems, dst_k.data() + p.dst * block_elems);
      std::copy_n(src_v.data() + p.src * block_elems, block_elems, dst_v.data() + p.dst * block_elems);
    }
  }
}

void cpu_model_runner::ensure_scratch(std::size_t tokens) {
  auto grow = [](std::vector<float>& v, std::size_t n) {
    if (v.size() < n)
      v.resize(n);
  };
  std::size_t hidden = config_.hidden_size, hd = config_.head_dim;
  grow(x_, tokens * hidden);
  grow(h_, tokens * hidden);
  grow(q_, tokens * shard_.q_heads * hd);
  grow(k_, tokens * shard_.kv_heads * hd);
  grow(v_, tokens * shard_.kv_heads * hd);
  grow(attn_, tokens * shard_.q_heads * hd);
  grow(proj_, tokens * hidden);
  grow(gate_up_, tokens * 2 * shard_.intermediate);
  grow(act_, tokens * shard_.intermediate);
}

void cpu_model_runner::execute(const step_batch& batch, std::span<float> logits) {
  check_step_batch(batch, cache_, config_.vocab_size);
  // This rank's heads and MLP rows (the whole model's without a rank).
  const int hidden = config_.hidden_size, heads = shard_.q_heads, kv_heads = shard_.kv_heads, hd = config_.head_dim,
            inter = shard_.intermediate, vocab = config_.vocab_size;
  const std::size_t T = batch.num_tokens();
  if (logits.size() < batch.logits_rows.size() * static_cast<std::size_t>(vocab))
    throw std::logic_error("logits buffer is smaller than rows * vocab");
  if (T == 0)
    return;
  ensure_scratch(T);
  const int rows = static_cast<int>(T);
  auto span_of = [](std::vector<float>& v, std::size_t n) { return std::span<float>(v.data(), n); };
  auto x = span_of(x_, T * hidden), h = span_of(h_, T * hidden), proj = span_of(proj_, T * hidden);
  auto q = span_of(q_, T * heads * hd), k = span_of(k_, T * kv_heads * hd), v = span_of(v_, T * kv_heads * hd);
  auto attn = span_of(attn_, T * heads * hd);
  auto gate_up = span_of(gate_up_, T * 2 * inter), act = span_of(act_, T * inter);

  kc::embedding(batch.token_ids, weights_.embed_tokens, hidden, x);
  if (config_.embedding_multiplier != 1.0f)
    for (float& e : x)
      e *= config_.embedding_multiplier;
  const float scale = config_.attention_scale();
  for (int l = 0; l < config_.num_hidden_layers; ++l) {
    const auto& w = weights_.layers[l];
    const std::vector<float>& inv_freq = config_.uses_sliding_rope(l) ? sliding_inv_freq_ : inv_freq_;
    // x = x + attention(rms_norm(x))
    kc::rms_norm(x, w.input_norm, hidden, config_.rms_norm_eps, h);
    kc::linear(h, rows, hidden, w.q_proj, heads * hd, w.q_bias, q, &pool_);
    kc::linear(h, rows, hidden, w.k_proj, kv_heads * hd, w.k_bias, k, &pool_);
    kc::linear(h, rows, hidden, w.v_proj, kv_heads * hd, w.v_bias, v, &pool_);
    if (config_.qk_norm) { // Qwen3: each head normalized before it is rotated
      kc::head_rms_norm(q, heads, hd, w.q_norm, config_.rms_norm_eps);
      kc::head_rms_norm(k, kv_heads, hd, w.k_norm, config_.rms_norm_eps);
    }
    kc::rotary_embedding(q, heads, hd, batch.positions, inv_freq);
    kc::rotary_embedding(k, kv_heads, hd, batch.positions, inv_freq);
    kc::write_kv_cache(k, v, batch.slot_mapping, kv_heads, hd, cache_.block_size, k_cache_[l], v_cache_[l]);
    kc::paged_attention({.q = q,
                         .out = attn,
                         .positions = batch.positions,
                         .query_start = batch.query_start,
                         .block_tables = batch.block_tables,
                         .max_blocks_per_seq = batch.max_blocks_per_seq,
                         .heads = heads,
                         .kv_heads = kv_heads,
                         .head_dim = hd,
                         .block_size = cache_.block_size,
                         .scale = scale,
                         .window = config_.attention_window(l),
                         .softcap = config_.attention_logit_softcap,
                         .k_cache = k_cache_[l],
                         .v_cache = v_cache_[l]},
                        &pool_);
    kc::linear(attn, rows, heads * hd, w.o_proj, hidden, {}, proj, &pool_);
    if (group_ != nullptr) // row-parallel: each rank's heads give one term of the projection
      group_->all_reduce_sum(proj);
    if (config_.sandwich_norms) // Gemma: the attention output normalized before its residual add
      kc::rms_norm(proj, w.post_attention_norm, hidden, config_.rms_norm_eps, proj);
    for (std::size_t i = 0; i < x.size(); ++i)
      x[i] += proj[i];
    // x = x + mlp(rms_norm(x))
    kc::rms_norm(x, config_.sandwich_norms ? w.pre_feedforward_norm : w.post_attention_norm, hidden,
                 config_.rms_norm_eps, h);
    if (config_.moe) {
      moe_.forward(config_,
                   {.router = w.router,
                    .experts_gate_up = w.experts_gate_up,
                    .experts_down = w.experts_down,
                    .expert_inter = shard_.expert_intermediate,
                    .shared_gate_up = fused_[l].gate_up,
                    .shared_down = w.down_proj,
                    .shared_expert_gate = w.shared_expert_gate,
                    .shared_inter = inter},
                   h, rows, proj, &pool_);
    } else {
      kc::linear(h, rows, hidden, fused_[l].gate_up, 2 * inter, {}, gate_up, &pool_);
      if (config_.activation == mlp_activation::gelu_tanh)
        kc::gelu_tanh_and_mul(gate_up, rows, inter, act);
      else
        kc::silu_and_mul(gate_up, rows, inter, act);
      kc::linear(act, rows, inter, w.down_proj, hidden, {}, proj, &pool_);
    }
    if (group_ != nullptr) // row-parallel: each rank's MLP rows (each expert's, on a mixture) give one term
      group_->all_reduce_sum(proj);
    if (config_.sandwich_norms)
      kc::rms_norm(proj, w.post_feedforward_norm, hidden, config_.rms_norm_eps, proj);
    for (std::size_t i = 0; i < x.size(); ++i)
      x[i] += proj[i];
  }

  // Only the rows that need logits go through the final norm and the LM head.
  const std::size_t n_rows = batch.logits_rows.size();
  if (last_.size() < n_rows * hidden)
    last_.resize(n_rows * hidden);
  auto last = span_of(last_, n_rows * hidden);
  for (std::size_t r = 0; r < n_rows; ++r)
    std::copy_n(x.data() + static_cast<std::size_t>(batch.logits_rows[r]) * hidden, hidden, last.data() + r * hidden);
  kc::rms_norm(last, weights_.final_norm, hidden, config_.rms_norm_eps, last);
  const auto whole = logits.first(n_rows * vocab);
  if (group_ == nullptr) {
    kc::linear(last, static_cast<int>(n_rows), hidden, weights_.output_projection(), vocab, {}, whole, &pool_);
  } else {
    // Vocab-parallel: each rank computes its columns of the rows, and every rank gets them all.
    if (local_logits_.size() < n_rows * shard_.vocab)
      local_logits_.resize(n_rows * shard_.vocab);
    auto local = span_of(local_logits_, n_rows * shard_.vocab);
    kc::linear(last, static_cast<int>(n_rows), hidden, weights_.output_projection(), shard_.vocab, {}, local, &pool_);
    group_->all_gather_columns(local, static_cast<int>(n_rows), shard_.vocab_begin, whole);
  }
  if (config_.final_logit_softcap > 0.0f) // Gemma 2: on the whole rows, whichever way they were made
    kc::logit_softcap(whole, config_.final_logit_softcap);
}

} // namespace troupe::runtime
