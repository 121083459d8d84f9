// Loads a Llama-family model's tensors into fp32 vectors, checking each shape against
// config.json first, and the exact F16/BF16 <-> F32 conversions it relies on.
#include "runtime/model_weights.hpp"

#include "runtime/errors.hpp"

#include <bit>
#include <cstring>
#include <set>
#include <string>

namespace troupe::runtime {

// --- element conversions ---------------------------------------------------------

float f16_to_f32(uint16_t bits) noexcept {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1fu;
  const uint32_t mantissa = bits & 0x3ffu;
  if (exponent == 0x1f) // infinity, or NaN with its payload kept
    return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  if (exponent != 0) // normal: rebias 15 -> 127
    return std::bit_cast<float>(sign | ((exponent + 112u) << 23) | (mantissa << 13));
  // Zero or subnormal: mantissa * 2^-24, exact in fp32 (a small integer times a power of two).
  const float magnitude = static_cast<float>(mantissa) * 0x1p-24f;
  return sign != 0 ? -magnitude : magnitude;
}

float bf16_to_f32(uint16_t bits) noexcept {
  return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16);
}

uint16_t f32_to_bf16(float value) noexcept {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  // Rounding could carry a NaN's payload into an infinity; keep it a (quiet) NaN.
  if ((bits & 0x7fffffffu) > 0x7f800000u)
    return static_cast<uint16_t>((bits >> 16) | 0x0040u);
  const uint32_t rounded = bits + 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(rounded >> 16);
}

uint16_t f32_to_f16(float value) noexcept {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  const auto sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u) // NaN: keep the top payload bits, force quiet
    return static_cast<uint16_t>(sign | 0x7e00u | ((magnitude >> 13) & 0x3ffu));
  if (magnitude >= 0x477ff000u) // >= 65520 rounds past the largest f16 (65504): infinity
    return static_cast<uint16_t>(sign | 0x7c00u);
  if (magnitude >= 0x38800000u) { // >= 2^-14: a normal f16
    // Rebias the exponent (127 -> 15), then round away the low 13 mantissa bits to
    // nearest even; a mantissa carry correctly bumps the exponent.
    const uint32_t rebiased = magnitude - (112u << 23);
    const uint32_t rounded = rebiased + 0xfffu + ((rebiased >> 13) & 1u);
    return static_cast<uint16_t>(sign | (rounded >> 13));
  }
  const uint32_t exponent = magnitude >> 23;
  if (exponent < 102)
    return sign; // below 2^-25: rounds to zero
  // A subnormal f16 m * 2^-24: m = full mantissa * 2^(exponent - 126), rounded to even.
  const uint32_t full = (magnitude & 0x7fffffu) | 0x800000u;
  const uint32_t shift = 126 - exponent; // 14..24
  uint32_t m = full >> shift;
  const uint32_t rest = full & ((1u << shift) - 1);
  const uint32_t half = 1u << (shift - 1);
  if (rest > half || (rest == half && (m & 1u) != 0))
    ++m; // m == 0x400 is the smallest normal: still right
  return static_cast<uint16_t>(sign | m);
}

std::vector<float> to_f32(const tensor_view& tensor) {
  const std::size_t count = tensor.data.size() / dtype_size(tensor.dtype);
  std::vector<float> out(count);
  const std::byte* src = tensor.data.data();
  // memcpy, not a cast: the data section need not be aligned for float.
  switch (tensor.dtype) {
    case weight_dtype::f32:
      if (count != 0)
        std::memcpy(out.data(), src, count * sizeof(float));
      break;
    case weight_dtype::f16:
      for (std::size_t i = 0; i < count; ++i) {
        uint16_t bits;
        std::memcpy(&bits, src + 2 * i, 2);
        out[i] = f16_to_f32(bits);
      }
      break;
    case weight_dtype::bf16:
      for (std::size_t i = 0; i < count; ++i) {
        uint16_t bits;
        std::memcpy(&bits, src + 2 * i, 2);
        out[i] = bf16_to_f32(bits);
      }
      break;
  }
  return out;
}

// --- model loading -------------------------------------------------------------------

std::span<const float> model_weights::output_projection() const {
  if (lm_head.empty())
    return embed_tokens;
  return lm_head;
}

namespace {

// Everything is checked (presence, shapes, leftovers) before anything is converted, so
// a bad folder fails fast instead of after gigabytes of conversion.
class load_plan {
 public:
  load_plan(const tensor_store& store, const model_config& cfg) : store_(store), cfg_(cfg) {}

  void add(std::string name, std::vector<int64_t> shape, std::vector<float>& destination) {
    items_.push_back({std::move(name), std::move(shape), &destination});
  }

  void check() const {
    std::set<std::string_view> wanted;
    for (const item& it : items_) {
      const tensor_view t = store_.get(it.name);
      if (t.shape != it.shape)
        throw model_error(store_.file_of(it.name).string() + ": tensor '" + it.name + "' has shape " +
                          format_shape(t.shape) + ", expected " + format_shape(it.shape) + " (from config.json)");
      wanted.insert(it.name);
    }
    // Every stored tensor must be used: a leftover bias or layer means config.json and
    // the weights describe different models, and ignoring it would give wrong outputs.
    for (const std::string& name : store_.names()) {
      if (wanted.count(name) != 0)
        continue;
      if (name == "lm_head.weight" && cfg_.tie_word_embeddings)
        continue; // a copy kept for other loaders
      if (name.ends_with(".rotary_emb.inv_freq"))
        continue; // a buffer older exporters saved; we recompute it
      throw model_error(store_.file_of(name).string() + ": tensor '" + name + "' is not used by a " + cfg_.model_type +
                        " model as config.json describes it (num_hidden_layers " +
                        std::to_string(cfg_.num_hidden_layers) + ", attention_bias " +
                        (cfg_.attention_bias ? "true" : "false") + ")");
    }
  }

  void convert() const {
    for (const item& it : items_)
      *it.destination = to_f32(store_.get(it.name));
  }

 private:
  struct item {
    std::string name;
    std::vector<int64_t> shape;
    std::vector<float>* destination;
  };
  const tensor_store& store_;
  const model_config& cfg_;
  std::vector<item> items_;
};

} // namespace

model_weights load_model_weights(const tensor_store& store, const model_config& cfg) {
  const int64_t hidden = cfg.hidden_size;
  const int64_t q_width = int64_t{cfg.num_attention_heads} * cfg.head_dim;
  const int64_t kv_width = int64_t{cfg.num_key_value_heads} * cfg.head_dim;
  const int64_t inter = cfg.intermediate_size;
  const int64_t vocab = cfg.vocab_size;

  model_weights w;
  // Sized up front: the plan holds pointers into these vectors.
  w.layers.resize(static_cast<std::size_t>(cfg.num_hidden_layers));
  load_plan plan(store, cfg);
  plan.add("model.embed_tokens.weight", {vocab, hidden}, w.embed_tokens);
  plan.add("model.norm.weight", {hidden}, w.final_norm);
  if (!cfg.tie_word_embeddings)
    plan.add("lm_head.weight", {vocab, hidden}, w.lm_head);
  for (int i = 0; i < cfg.num_hidden_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    layer_weights& layer = w.layers[static_cast<std::size_t>(i)];
    plan.add(p + "input_layernorm.weight", {hidden}, layer.input_norm);
    plan.add(p + "self_attn.q_proj.weight", {q_width, hidden}, layer.q_proj);
    plan.add(p + "self_attn.k_proj.weight", {kv_width, hidden}, layer.k_proj);
    plan.add(p + "self_attn.v_proj.weight", {kv_width, hidden}, layer.v_proj);
    if (cfg.attention_bias) {
      plan.add(p + "self_attn.q_proj.bias", {q_width}, layer.q_bias);
      plan.add(p + "self_attn.k_proj.bias", {kv_width}, layer.k_bias);
      plan.add(p + "self_attn.v_proj.bias", {kv_width}, layer.v_bias);
    }
    plan.add(p + "self_attn.o_proj.weight", {hidden, q_width}, layer.o_proj);
    plan.add(p + "post_attention_layernorm.weight", {hidden}, layer.post_attention_norm);
    plan.add(p + "mlp.gate_proj.weight", {inter, hidden}, layer.gate_proj);
    plan.add(p + "mlp.up_proj.weight", {inter, hidden}, layer.up_proj);
    plan.add(p + "mlp.down_proj.weight", {hidden, inter}, layer.down_proj);
  }
  plan.check();
  plan.convert();
  return w;
}

} // namespace troupe::runtime
