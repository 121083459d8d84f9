// The runner's weights on the GPU: a checkpoint's, converted to the runner's dtype once (or the
// linear layers to FP8 codes and scales, or to INT4 codes and groups), with q|k|v and gate|up
// concatenated along the output rows; or dummy ones made on the device.
#include <algorithm>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cuda/random_fill.hpp"
#include "runtime/cuda/cuda_model_runner.hpp"
#include "kernels/cuda/int4_linear.hpp"
#include "runtime/fp8_quantization.hpp"
#include "runtime/int4_packing.hpp"

namespace troupe::runtime {

namespace kc = kernels::cuda;

namespace {

std::vector<float> concat(std::initializer_list<std::span<const float>> parts) {
  std::vector<float> out;
  for (auto p : parts)
    out.insert(out.end(), p.begin(), p.end());
  return out;
}

} // namespace

std::size_t cuda_model_runner::upload_weights(const model_weights& weights) {
  std::size_t weight_bytes = 0;
  auto put = [&](std::span<const float> v) {
    bytes b = upload(v);
    weight_bytes += b.bytes();
    return b;
  };
  embed_ = put(weights.embed_tokens);
  final_norm_ = put(weights.final_norm);
  // A rank holds its slice of the LM head as lm_head, tied or not (shard_weights).
  if ((!config_.tie_word_embeddings || group_ != nullptr) && !weights.lm_head.empty())
    lm_head_ = put(weights.lm_head);
  auto put_linear = [&](std::initializer_list<linear_part> parts, std::size_t columns, const char* name) {
    linear_weight w = upload_linear(parts, columns, name);
    weight_bytes += w.dense.bytes() + w.codes.bytes() + w.scales.bytes();
    return w;
  };
  const std::size_t hidden = config_.hidden_size;
  for (const auto& w : weights.layers) {
    layer l;
    l.input_norm = put(w.input_norm);
    l.qkv = put_linear({{w.q_proj, &w.q_proj_fp8, &w.q_proj_int4},
                        {w.k_proj, &w.k_proj_fp8, &w.k_proj_int4},
                        {w.v_proj, &w.v_proj_fp8, &w.v_proj_int4}},
                       hidden, "q|k|v");
    if (config_.attention_bias && !w.q_bias.empty())
      l.qkv_bias = put(concat({w.q_bias, w.k_bias, w.v_bias}));
    if (config_.qk_norm) { // whole in every rank: one vector for all heads
      l.q_norm = put(w.q_norm);
      l.k_norm = put(w.k_norm);
    }
    l.o = put_linear({{w.o_proj, &w.o_proj_fp8, &w.o_proj_int4}}, w.o_proj.size() / hidden, "o_proj");
    l.post_norm = put(w.post_attention_norm);
    if (config_.sandwich_norms) {
      l.pre_mlp_norm = put(w.pre_feedforward_norm);
      l.post_mlp_norm = put(w.post_feedforward_norm);
    }
    l.gate_up = put_linear({{w.gate_proj, &w.gate_proj_fp8, &w.gate_proj_int4},
                            {w.up_proj, &w.up_proj_fp8, &w.up_proj_int4}},
                           hidden, "gate|up");
    l.down = put_linear({{w.down_proj, &w.down_proj_fp8, &w.down_proj_int4}}, w.down_proj.size() / hidden,
                        "down_proj");
    if (config_.moe) { // the shared expert's gate as one more router row: one GEMM scores both
      std::vector<float> router = concat({w.router, w.shared_expert_gate});
      router.resize(static_cast<std::size_t>(moe_router_rows(*config_.moe)) * hidden, 0.0f);
      l.router = put(router);
      l.experts_gate_up = put(w.experts_gate_up);
      l.experts_down = put(w.experts_down);
    }
    layers_.push_back(std::move(l));
  }
  return weight_bytes;
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

cuda_model_runner::linear_weight cuda_model_runner::upload_linear(std::initializer_list<linear_part> parts,
                                                                 std::size_t columns, const char* name) const {
  if (options_.int4_weights)
    return upload_int4_linear(parts, columns, name);
  linear_weight w;
  w.columns = static_cast<int>(columns);
  if (!options_.fp8_weights) {
    std::vector<float> all;
    for (const linear_part& p : parts)
      all.insert(all.end(), p.values.begin(), p.values.end());
    w.dense = upload(all);
    return w;
  }
  std::vector<std::uint8_t> codes;
  std::vector<float> scales;
  for (const linear_part& p : parts) {
    fp8_scales own;
    const fp8_scales* s = p.scales;
    if (s == nullptr || s->empty()) { // not FP8 in the checkpoint: a scale a row
      std::vector<float> rounded(p.values.begin(), p.values.end());
      own = quantize_fp8_rows(rounded, columns);
      s = &own;
    }
    if (w.group == 0)
      w.group = static_cast<int>(s->group);
    if (static_cast<std::size_t>(w.group) != s->group)
      throw std::invalid_argument(std::string("FP8 weights: the parts of ") + name + " have scales for groups of " +
                                  std::to_string(w.group) + " and " + std::to_string(s->group) + " columns");
    const std::vector<std::uint8_t> part = fp8_codes(p.values, columns, *s);
    codes.insert(codes.end(), part.begin(), part.end());
    scales.insert(scales.end(), s->values.begin(), s->values.end());
  }
  if (codes.empty())
    return w;
  w.kind = linear_weight::form::fp8;
  w.codes = bytes(codes.size());
  kc::check(cudaMemcpy(w.codes.data(), codes.data(), codes.size(), cudaMemcpyHostToDevice), "cudaMemcpy (FP8 codes)");
  w.scales = kc::device_buffer<float>(scales.size());
  w.scales.upload(scales); // waits for the legacy stream: the codes' copy is done too
  return w;
}

cuda_model_runner::linear_weight cuda_model_runner::make_dummy_linear(std::size_t rows, std::size_t columns,
                                                                      std::uint64_t& tensor, std::size_t& total) {
  // normal(0, 0.02) as the dense dummies: codes of normal(0, 64) (a few beyond ±448 saturate)
  // times 0.02 / 64.
  constexpr float code_std = 64.0f, matrix_std = 0.02f;
  linear_weight w;
  w.kind = linear_weight::form::fp8;
  w.columns = static_cast<int>(columns);
  w.group = static_cast<int>(columns);
  w.codes = bytes(rows * columns);
  w.scales = kc::device_buffer<float>(rows);
  const std::uint64_t seed = (options_.dummy_seed << 20) + tensor++;
  kc::check(kc::random_fill(reinterpret_cast<__nv_fp8_e4m3*>(w.codes.data()), rows * columns, seed, 0.0f, code_std,
                            compute_),
            "random_fill (dummy FP8 codes)");
  kc::check(kc::random_fill(w.scales.data(), rows, seed, matrix_std / code_std, 0.0f, compute_),
            "random_fill (dummy FP8 scales)");
  total += w.codes.bytes() + w.scales.bytes();
  return w;
}

cuda_model_runner::linear_weight cuda_model_runner::upload_int4_linear(std::initializer_list<linear_part> parts,
                                                                      std::size_t columns, const char* name) const {
  static_assert(kc::int4_tile_rows == int4_tile_rows && kc::int4_vector_columns == int4_vector_columns,
                "the host packs codes in the layout the kernels read");
  linear_weight w;
  w.columns = static_cast<int>(columns);
  const bool all_int4 =
      std::all_of(parts.begin(), parts.end(), [](const linear_part& p) { return p.groups != nullptr && !p.groups->empty(); });
  if (!all_int4) { // left unquantized by the checkpoint (modules_to_not_convert): kept in the dtype
    std::vector<float> all;
    for (const linear_part& p : parts)
      all.insert(all.end(), p.values.begin(), p.values.end());
    w.dense = upload(all);
    return w;
  }
  // The parts' rows and groups one after another, packed as one matrix (tiles of 16 rows may
  // straddle two parts, as gate|up's of stories260k's 172 rows each).
  std::vector<float> values;
  int4_groups all{static_cast<std::size_t>(parts.begin()->groups->group), {}, {}};
  for (const linear_part& p : parts) {
    if (all.group != p.groups->group)
      throw std::invalid_argument(std::string("INT4 weights: the parts of ") + name + " have groups of " +
                                  std::to_string(all.group) + " and " + std::to_string(p.groups->group) + " columns");
    values.insert(values.end(), p.values.begin(), p.values.end());
    all.scales.insert(all.scales.end(), p.groups->scales.begin(), p.groups->scales.end());
    all.zeros.insert(all.zeros.end(), p.groups->zeros.begin(), p.groups->zeros.end());
  }
  int4_packed packed;
  try {
    packed = pack_int4(values, columns, all);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string("INT4 weights of ") + name + ": " + e.what());
  }
  w.group = static_cast<int>(all.group);
  const std::vector<std::uint32_t>& codes = packed.codes;
  const std::vector<float>& groups = packed.groups;
  w.kind = linear_weight::form::int4;
  w.codes = bytes(codes.size() * sizeof(std::uint32_t));
  kc::check(cudaMemcpy(w.codes.data(), codes.data(), w.codes.bytes(), cudaMemcpyHostToDevice),
            "cudaMemcpy (INT4 codes)");
  w.scales = kc::device_buffer<float>(groups.size());
  w.scales.upload(groups); // waits for the legacy stream: the codes' copy is done too
  return w;
}

cuda_model_runner::linear_weight cuda_model_runner::make_dummy_int4_linear(std::size_t rows, std::size_t columns,
                                                                           std::uint64_t& tensor, std::size_t& total) {
  // Codes: the bytes of random e4m3 values (any byte is two valid codes). Zero 8 and one scale, so
  // that (code - 8) * scale, spread over [-8, 7], has about normal(0, 0.02)'s deviation (4.6 steps).
  constexpr float matrix_std = 0.02f, steps_std = 4.6f;
  std::size_t group = 128; // the caller checked that 32 divides columns
  while (columns % group != 0)
    group /= 2;
  linear_weight w;
  w.kind = linear_weight::form::int4;
  w.columns = static_cast<int>(columns);
  w.group = static_cast<int>(group);
  const auto round_up = [](std::size_t v, std::size_t to) { return (v + to - 1) / to * to; };
  w.codes = bytes(round_up(rows, int4_tile_rows) * round_up(columns, int4_vector_columns) / 2); // padded tiles
  const std::uint64_t seed = (options_.dummy_seed << 20) + tensor++;
  kc::check(kc::random_fill(reinterpret_cast<__nv_fp8_e4m3*>(w.codes.data()), w.codes.size(), seed, 0.0f, 64.0f,
                            compute_),
            "random_fill (dummy INT4 codes)");
  std::vector<float> groups(2 * rows * (columns / group));
  for (std::size_t i = 0; i < groups.size(); i += 2) {
    groups[i] = matrix_std / steps_std;
    groups[i + 1] = 8.0f;
  }
  w.scales = kc::device_buffer<float>(groups.size());
  w.scales.upload(groups);
  total += w.codes.bytes() + w.scales.bytes();
  return w;
}

std::size_t cuda_model_runner::make_dummy_weights() {
  // A rank makes its shard's shapes (values drawn afresh, not slices of the whole model's:
  // only the shapes matter to a benchmark).
  const std::size_t hidden = config_.hidden_size, heads = local_.num_attention_heads,
                    kv_heads = local_.num_key_value_heads, hd = config_.head_dim, inter = local_.intermediate_size,
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
  // The usual Llama init scale; norms that scale by 1 keep the activations' scale layer after layer.
  constexpr float matrix_std = 0.02f;
  const float norm = 1.0f - config_.norm_weight_offset;
  embed_ = make(vocab * hidden, 0.0f, matrix_std);
  final_norm_ = make(hidden, norm, 0.0f);
  if (group_ != nullptr)
    lm_head_ = make(static_cast<std::size_t>(shard_.vocab) * hidden, 0.0f, matrix_std);
  else if (!config_.tie_word_embeddings)
    lm_head_ = make(vocab * hidden, 0.0f, matrix_std);
  // A linear layer: dense like the other matrices, or FP8 codes and scales.
  auto linear = [&](std::size_t rows, std::size_t columns) {
    if (options_.fp8_weights)
      return make_dummy_linear(rows, columns, tensor, total);
    // INT4 where an AWQ group size fits (not stories260k's 172-wide down_proj: dense, like a layer left out).
    if (options_.int4_weights && columns % 32 == 0)
      return make_dummy_int4_linear(rows, columns, tensor, total);
    linear_weight w;
    w.columns = static_cast<int>(columns);
    w.dense = make(rows * columns, 0.0f, matrix_std);
    return w;
  };
  for (int i = 0; i < config_.num_hidden_layers; ++i) {
    layer l;
    l.input_norm = make(hidden, norm, 0.0f);
    l.qkv = linear(qkv_width, hidden);
    if (config_.attention_bias)
      l.qkv_bias = make(qkv_width, 0.0f, 0.0f);
    l.o = linear(hidden, heads * hd);
    l.post_norm = make(hidden, norm, 0.0f);
    if (inter > 0) { // a mixture-of-experts model without a shared expert has no dense MLP
      l.gate_up = linear(2 * inter, hidden);
      l.down = linear(hidden, inter);
    }
    if (config_.qk_norm) { // drawn last: the other tensors' seeds stay those of a model without
      l.q_norm = make(hd, norm, 0.0f);
      l.k_norm = make(hd, norm, 0.0f);
    }
    if (config_.sandwich_norms) {
      l.pre_mlp_norm = make(hidden, norm, 0.0f);
      l.post_mlp_norm = make(hidden, norm, 0.0f);
    }
    if (config_.moe) {
      const auto& m = *config_.moe;
      const std::size_t experts = m.num_experts, expert_inter = shard_.expert_intermediate;
      // The padding rows are random too: their logits are never read.
      l.router = make(static_cast<std::size_t>(moe_router_rows(m)) * hidden, 0.0f, matrix_std);
      l.experts_gate_up = make(experts * 2 * expert_inter * hidden, 0.0f, matrix_std);
      l.experts_down = make(experts * hidden * expert_inter, 0.0f, matrix_std);
    }
    layers_.push_back(std::move(l));
  }
  return total;
}

} // namespace troupe::runtime
