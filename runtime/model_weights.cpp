// Loads a Llama-family model's tensors into fp32 vectors (all of them, or a tensor-parallel
// rank's slices of them), checking each shape against config.json first, and the exact
// F16/BF16 <-> F32 conversions it relies on.
#include "runtime/model_weights.hpp"

#include "runtime/errors.hpp"
#include "runtime/quantized_linear.hpp"
#include "runtime/weight_plan.hpp"

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

float fp8_e4m3_to_f32(uint8_t bits) noexcept {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x80u) << 24;
  const uint32_t exponent = (bits >> 3) & 0xfu;
  const uint32_t mantissa = bits & 0x7u;
  if (exponent == 0xf && mantissa == 0x7) // the one NaN (e4m3fn has no infinities)
    return std::bit_cast<float>(sign | 0x7fc00000u);
  if (exponent != 0) // normal: rebias 7 -> 127
    return std::bit_cast<float>(sign | ((exponent + 120u) << 23) | (mantissa << 20));
  // Zero or subnormal: mantissa * 2^-9.
  const float magnitude = static_cast<float>(mantissa) * 0x1p-9f;
  return sign != 0 ? -magnitude : magnitude;
}

namespace {

// Elements [first, first + count) of `tensor` as fp32 into out[0, count), reading only their
// bytes: a tensor-parallel rank converts just its slices of the mapping.
void convert_elements(const tensor_view& tensor, std::size_t first, std::size_t count, float* out) {
  const std::byte* src = tensor.data.data() + first * dtype_size(tensor.dtype);
  // memcpy, not a cast: the data section need not be aligned for float.
  switch (tensor.dtype) {
    case weight_dtype::f32:
      if (count != 0)
        std::memcpy(out, src, count * sizeof(float));
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
    case weight_dtype::f8_e4m3: // quantized tensors: refused here by check_plan and to_f32
    case weight_dtype::i32:
      break;
  }
}

} // namespace

std::vector<float> to_f32(const tensor_view& tensor) {
  if (!is_float_dtype(tensor.dtype))
    throw model_error("tensor '" + tensor.name + "' has dtype " + std::string(dtype_name(tensor.dtype)) +
                      ", expected F32, F16 or BF16");
  const std::size_t count = tensor.data.size() / dtype_size(tensor.dtype);
  std::vector<float> out(count);
  convert_elements(tensor, 0, count, out.data());
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
bool quantized(const model_config& cfg, const planned_tensor& it) {
  return cfg.quantization && is_quantized_linear(*cfg.quantization, it);
}

// The image-text tensors a Gemma 3 image-text checkpoint holds beside its language model (both layouts).
bool vision_tensor(std::string_view name) {
  for (std::string_view prefix :
       {"vision_tower.", "multi_modal_projector.", "model.vision_tower.", "model.multi_modal_projector."})
    if (name.starts_with(prefix))
      return true;
  return false;
}

// Gemma 3's image-text checkpoints keep the language model under a prefix: transformers 4.5x (and the
// checkpoints Google published) language_model.model.* and language_model.lm_head.*, 5.x
// model.language_model.* and lm_head.*. The plan's names are the text-only model's; this renames them
// to the layout the store has.
void name_for_image_text(const tensor_store& store, std::vector<planned_tensor>& plan) {
  const bool v4 = store.contains("language_model.model.embed_tokens.weight");
  for (planned_tensor& t : plan) {
    if (t.name.starts_with("model."))
      t.name = (v4 ? "language_model.model." : "model.language_model.") + t.name.substr(6);
    else if (v4 && t.name.starts_with("lm_head."))
      t.name = "language_model." + t.name;
  }
}

void check_plan(const tensor_store& store, const model_config& cfg, const std::vector<planned_tensor>& plan) {
  std::set<std::string> wanted;
  for (const planned_tensor& it : plan) {
    if (quantized(cfg, it)) {
      for (std::string& name : check_quantized_linear(store, *cfg.quantization, it))
        wanted.insert(std::move(name));
      continue;
    }
    const tensor_view t = store.get(it.name);
    if (t.shape != it.shape)
      throw model_error(store.file_of(it.name).string() + ": tensor '" + it.name + "' has shape " +
                        format_shape(t.shape) + ", expected " + format_shape(it.shape) + " (from config.json)");
    if (!is_float_dtype(t.dtype))
      throw model_error(store.file_of(it.name).string() + ": tensor '" + it.name + "' has dtype " +
                        std::string(dtype_name(t.dtype)) + ", expected F32, F16 or BF16" +
                        (cfg.quantization
                             ? " (quantization_config " + to_string(*cfg.quantization) + " does not quantize it)"
                             : " (config.json has no quantization_config)"));
    wanted.insert(it.name);
  }
  // Every stored tensor must be used: a leftover bias or layer means config.json and
  // the weights describe different models, and ignoring it would give wrong outputs.
  for (const std::string& name : store.names()) {
    if (wanted.count(name) != 0)
      continue;
    if ((name == "lm_head.weight" || name == "language_model.lm_head.weight") && cfg.tie_word_embeddings)
      continue; // a copy kept for other loaders
    if (cfg.image_text_checkpoint && vision_tensor(name))
      continue; // the vision tower: troupe serves the checkpoint's text
    if (name.ends_with(".rotary_emb.inv_freq"))
      continue; // a buffer older exporters saved; we recompute it
    throw model_error(store.file_of(name).string() + ": tensor '" + name + "' is not used by a " + cfg.model_type +
                      " model as config.json describes it (num_hidden_layers " + std::to_string(cfg.num_hidden_layers) +
                      ", attention_bias " + (cfg.attention_bias ? "true" : "false") +
                      (cfg.qk_norm ? ", with q/k norms" : ", without q/k norms") +
                      (cfg.moe ? ", " + std::to_string(cfg.moe->num_experts) + " experts" +
                                     (cfg.moe->shared_expert ? " and a shared expert" : "")
                               : std::string()) +
                      ")");
  }
}

// Converts each tensor's block row by row from the mapping; a block of whole rows is one run.
void read_plan(const tensor_store& store, const model_config& cfg, const std::vector<planned_tensor>& plan) {
  for (const planned_tensor& it : plan) {
    if (quantized(cfg, it)) {
      read_quantized_linear(store, *cfg.quantization, it);
      continue;
    }
    const tensor_view t = store.get(it.name);
    const std::size_t whole_columns = it.whole_columns(), first = it.matrix_begin();
    // Several blocks share a destination (the experts): each grows it to its end.
    std::vector<float>& out = *it.destination;
    if (out.size() < it.offset + it.rows * it.columns)
      out.resize(it.offset + it.rows * it.columns, 0.0f);
    float* block = out.data() + it.offset;
    if (it.columns == whole_columns) {
      convert_elements(t, first + it.row_begin * whole_columns, it.rows * it.columns, block);
      continue;
    }
    for (std::size_t r = 0; r < it.rows; ++r)
      convert_elements(t, first + (it.row_begin + r) * whole_columns + it.column_begin, it.columns,
                       block + r * it.columns);
  }
}

// The shared path of the whole model and of a rank's shard: the plan, checked, then read.
model_weights load_planned(const tensor_store& store, const model_config& cfg, const shard_shape& shard) {
  model_weights w;
  std::vector<planned_tensor> plan =
      plan_weights(cfg, shard, w, cfg.moe ? find_expert_layout(store, cfg) : expert_layout{});
  if (cfg.image_text_checkpoint)
    name_for_image_text(store, plan);
  check_plan(store, cfg, plan);
  read_plan(store, cfg, plan);
  return w;
}

} // namespace

model_weights load_model_weights(const tensor_store& store, const model_config& cfg) {
  // Tied embeddings leave lm_head empty here: the one rank's output projection is
  // embed_tokens itself, and a copy would double the largest tensor.
  return load_planned(store, cfg, whole_model_shard(cfg));
}

model_weights load_model_weight_shard(const tensor_store& store, const model_config& cfg, const shard_shape& shard) {
  model_weights w = load_planned(store, cfg, shard);
  keep_tied_lm_head_rows(w, cfg, shard);
  return w;
}

} // namespace troupe::runtime
