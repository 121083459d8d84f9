// Parses and checks config.json. Every refusal names the file, the field and the value,
// so a user with an unsupported model learns exactly what is in the way.
#include "runtime/model_config.hpp"

#include "runtime/errors.hpp"

#include <boost/json.hpp>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <limits>
#include <system_error>
#include <vector>

namespace troupe::runtime {

namespace {

namespace json = boost::json;

// Sanity bounds: far above any real model, low enough that sizes computed from them
// (vocab * hidden, heads * head_dim) cannot overflow.
constexpr int64_t max_hidden = 1 << 20;
constexpr int64_t max_intermediate = 1 << 22;
constexpr int64_t max_layers = 4096;
constexpr int64_t max_heads = 4096;
constexpr int64_t max_head_dim = 4096;
constexpr int64_t max_vocab = 1 << 24;
constexpr int64_t max_positions = int64_t{1} << 27;

struct family {
  std::string_view model_type;
  std::string_view architecture;
  int default_max_positions;   // the transformers config class defaults
  bool default_attention_bias; // Qwen2 always has q/k/v biases
  bool reads_sliding_window;
  bool qk_norm;           // Qwen3, Gemma 3: per-head RMSNorm of q and k before RoPE
  bool fused_projections; // Phi-3: one qkv_proj and one gate_up_proj tensor per layer
  int gemma = 0;          // 2 or 3: Gemma's norms, activation, scaling and layer pattern (read_gemma)
  bool moe = false;       // Mixtral, Qwen2-MoE, Qwen3-MoE: every layer's MLP is experts (read_moe)
};

constexpr family families[] = {
    {"llama", "LlamaForCausalLM", 2048, false, false, false, false},
    {"mistral", "MistralForCausalLM", 4096 * 32, false, true, false, false},
    {"qwen2", "Qwen2ForCausalLM", 32768, true, true, false, false},
    {"qwen3", "Qwen3ForCausalLM", 32768, false, true, true, false},
    {"phi3", "Phi3ForCausalLM", 4096, false, true, false, true},
    {"gemma2", "Gemma2ForCausalLM", 8192, false, true, false, false, 2},
    {"gemma3_text", "Gemma3ForCausalLM", 131072, false, true, true, false, 3},
    {"mixtral", "MixtralForCausalLM", 4096 * 32, false, true, false, false, 0, true},
    {"qwen2_moe", "Qwen2MoeForCausalLM", 32768, true, true, false, false, 0, true},
    {"qwen3_moe", "Qwen3MoeForCausalLM", 32768, false, true, true, false, 0, true},
};

constexpr std::string_view supported_types =
    "llama, mistral, qwen2, qwen3, phi3, gemma2, gemma3_text, mixtral, qwen2_moe, qwen3_moe";
constexpr std::string_view supported_architectures =
    "LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, Phi3ForCausalLM, Gemma2ForCausalLM, "
    "Gemma3ForCausalLM, MixtralForCausalLM, Qwen2MoeForCausalLM, Qwen3MoeForCausalLM";

// The Qwen families read sliding_window only with use_sliding_window (and Qwen2-MoE writes 0 there without it).
bool qwen_family(const family& f) {
  return f.model_type == "qwen2" || f.model_type == "qwen3" || f.model_type == "qwen2_moe" ||
         f.model_type == "qwen3_moe";
}

const family* family_by_type(std::string_view model_type) {
  for (const family& f : families)
    if (f.model_type == model_type)
      return &f;
  return nullptr;
}

const family* family_by_architecture(std::string_view architecture) {
  for (const family& f : families)
    if (f.architecture == architecture)
      return &f;
  return nullptr;
}

// Shortest round-trip form ("0.5", "1e+300"); Boost.JSON would print "5E-1".
std::string show_number(double v) {
  char buffer[32];
  const auto result = std::to_chars(buffer, buffer + sizeof buffer, v);
  return std::string(buffer, result.ptr);
}

// A value as it appears in the file, cut short for messages.
std::string show(const json::value& v) {
  std::string text = v.is_double() ? show_number(v.get_double()) : json::serialize(v);
  if (text.size() > 60)
    text = text.substr(0, 57) + "...";
  return text;
}

// Typed access to one JSON object's fields; every error says "<source>: <prefix><field> ...".
class field_reader {
 public:
  field_reader(const json::object& object, std::string_view source, std::string prefix = {})
      : object_(object), source_(source), prefix_(std::move(prefix)) {}

  [[noreturn]] void fail(std::string_view field, const std::string& what) const {
    throw model_error(std::string(source_) + ": " + prefix_ + std::string(field) + " " + what);
  }

  const json::object& object() const noexcept { return object_; }

  // nullptr when absent or null: HF writes null to mean "the default".
  const json::value* find(std::string_view field) const {
    const json::value* v = object_.if_contains(field);
    return (v == nullptr || v->is_null()) ? nullptr : v;
  }

  std::optional<int64_t> integer(std::string_view field) const {
    const json::value* v = find(field);
    if (v == nullptr)
      return std::nullopt;
    if (v->is_int64())
      return v->get_int64();
    if (v->is_uint64() && v->get_uint64() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      return static_cast<int64_t>(v->get_uint64());
    // Some tools write 4096.0; a whole number is still a count.
    if (v->is_double() && std::isfinite(v->get_double()) && std::trunc(v->get_double()) == v->get_double() &&
        std::fabs(v->get_double()) < 9.0e15)
      return static_cast<int64_t>(v->get_double());
    fail(field, "must be an integer, got " + show(*v));
  }

  std::optional<double> number(std::string_view field) const {
    const json::value* v = find(field);
    if (v == nullptr)
      return std::nullopt;
    if (!v->is_number())
      fail(field, "must be a number, got " + show(*v));
    const double d = v->to_number<double>();
    if (!std::isfinite(d))
      fail(field, "must be finite, got " + show(*v));
    return d;
  }

  std::optional<bool> boolean(std::string_view field) const {
    const json::value* v = find(field);
    if (v == nullptr)
      return std::nullopt;
    if (!v->is_bool())
      fail(field, "must be true or false, got " + show(*v));
    return v->get_bool();
  }

  std::optional<std::string> string(std::string_view field) const {
    const json::value* v = find(field);
    if (v == nullptr)
      return std::nullopt;
    if (!v->is_string())
      fail(field, "must be a string, got " + show(*v));
    return std::string(v->get_string());
  }

  int bounded(std::string_view field, int64_t value, int64_t low, int64_t high) const {
    if (value < low || value > high)
      fail(field,
           std::to_string(value) + " is out of range (" + std::to_string(low) + ".." + std::to_string(high) + ")");
    return static_cast<int>(value);
  }

  int required_int(std::string_view field, int64_t low, int64_t high) const {
    const std::optional<int64_t> v = integer(field);
    if (!v)
      fail(field, "is missing");
    return bounded(field, *v, low, high);
  }

  int int_or(std::string_view field, int64_t fallback, int64_t low, int64_t high) const {
    return bounded(field, integer(field).value_or(fallback), low, high);
  }

  double required_number(std::string_view field) const {
    const std::optional<double> v = number(field);
    if (!v)
      fail(field, "is missing");
    return *v;
  }

 private:
  const json::object& object_;
  std::string_view source_;
  std::string prefix_;
};

// Sliding-window attention. Mistral: every layer when sliding_window is set. Qwen2 / Qwen3: only
// with use_sliding_window, and then the layers from max_window_layers on (transformers' rule).
// Gemma 2: every other layer from the first; Gemma 3: all but every sliding_window_pattern-th (default
// 6); both with a window of 4,096 unless the file says otherwise.
// A layer_types list, when the file has one, names each layer's kind and wins over these rules.
void read_attention_windows(const field_reader& r, const family& f, model_config& cfg) {
  const bool qwen = qwen_family(f);
  const bool applies = !qwen || r.boolean("use_sliding_window").value_or(false);
  // transformers disagrees with itself on which Qwen-MoE layers slide (4.x: from max_window_layers on, in
  // flash attention only; 5.x Qwen2-MoE: the even layers below it; 5.x Qwen3-MoE: all), and no published
  // checkpoint turns it on: refused rather than guessed.
  if (applies && qwen && f.moe)
    r.fail("use_sliding_window", "true is not supported for model_type '" + cfg.model_type +
                                     "' (transformers versions disagree on which of its layers slide)");
  std::optional<int> window;
  if (const std::optional<int64_t> w = applies ? r.integer("sliding_window") : std::nullopt)
    window = r.bounded("sliding_window", *w, 1, max_positions);
  else if (f.gemma != 0)
    window = 4096; // Gemma2Config's and Gemma3TextConfig's default
  const int layers = cfg.num_hidden_layers;
  std::vector<bool> sliding(static_cast<std::size_t>(layers), false);
  if (window) {
    // Qwen2Config and Qwen3Config both default max_window_layers to 28.
    const int first_sliding = qwen ? r.int_or("max_window_layers", 28, 0, max_layers) : 0;
    const int pattern = f.gemma == 3 ? r.int_or("sliding_window_pattern", 6, 1, max_layers) : f.gemma == 2 ? 2 : 0;
    for (int l = first_sliding; l < layers; ++l)
      sliding[static_cast<std::size_t>(l)] = pattern == 0 || (l + 1) % pattern != 0;
  }
  if (const json::value* types = r.find("layer_types")) {
    if (!types->is_array() || types->get_array().size() != static_cast<std::size_t>(layers))
      r.fail("layer_types",
             "must be a list of num_hidden_layers (" + std::to_string(layers) + ") strings, got " + show(*types));
    for (std::size_t l = 0; l < sliding.size(); ++l) {
      const json::value& kind = types->get_array()[l];
      const std::string field = "layer_types[" + std::to_string(l) + "]";
      const std::string_view name = kind.is_string() ? std::string_view(kind.get_string()) : std::string_view();
      if (name == "full_attention")
        sliding[l] = false;
      else if (name == "sliding_attention")
        sliding[l] = true;
      else
        r.fail(field, show(kind) + " is not supported (supported: full_attention, sliding_attention)");
      if (sliding[l] && !window)
        r.fail(field, "is sliding_attention but sliding_window is not set" +
                          std::string(qwen ? " (or use_sliding_window is false)" : ""));
    }
  }
  if (std::find(sliding.begin(), sliding.end(), true) == sliding.end())
    return;
  cfg.sliding_window = *window;
  cfg.sliding_layers = std::move(sliding);
}

void read_family(const field_reader& r, model_config& cfg) {
  const std::optional<std::string> model_type = r.string("model_type");
  std::optional<std::string> architecture;
  if (const json::value* archs = r.find("architectures")) {
    if (!archs->is_array())
      r.fail("architectures", "must be a list of strings, got " + show(*archs));
    if (!archs->get_array().empty()) {
      const json::value& first = archs->get_array()[0];
      if (!first.is_string())
        r.fail("architectures[0]", "must be a string, got " + show(first));
      architecture = std::string(first.get_string());
    }
  }
  const family* by_type = model_type ? family_by_type(*model_type) : nullptr;
  if (model_type && by_type == nullptr)
    r.fail("model_type", "'" + *model_type + "' is not supported (supported: " + std::string(supported_types) + ")");
  const family* by_architecture = architecture ? family_by_architecture(*architecture) : nullptr;
  if (architecture && by_architecture == nullptr)
    r.fail("architectures[0]",
           "'" + *architecture + "' is not supported (supported: " + std::string(supported_architectures) + ")");
  // The family decides defaults (Qwen2's biases), so two disagreeing answers are refused
  // rather than guessed between.
  if (by_type != nullptr && by_architecture != nullptr && by_type != by_architecture)
    r.fail("architectures[0]", "'" + *architecture + "' does not match model_type '" + *model_type + "'");
  const family* f = by_type != nullptr ? by_type : by_architecture;
  if (f == nullptr)
    r.fail("model_type", "is missing (and there is no architectures list)");
  cfg.model_type = std::string(f->model_type);
  cfg.architecture = std::string(f->architecture);
}

void read_shapes(const field_reader& r, const family& f, model_config& cfg) {
  // Gemma's config classes give every shape a default (Gemma 3's image-text configs leave out those
  // equal to it); the other families' files always carry them.
  const auto shape = [&](std::string_view field, int64_t gemma_default, int64_t high) {
    return f.gemma != 0 ? r.int_or(field, gemma_default, 1, high) : r.required_int(field, 1, high);
  };
  cfg.hidden_size = shape("hidden_size", 2304, max_hidden);
  // A mixture-of-experts model's widths are read by read_moe.
  if (!f.moe)
    cfg.intermediate_size = shape("intermediate_size", 9216, max_intermediate);
  cfg.num_hidden_layers = shape("num_hidden_layers", 26, max_layers);
  cfg.num_attention_heads = shape("num_attention_heads", 8, max_heads);
  cfg.vocab_size = shape("vocab_size", f.gemma == 2 ? 256000 : 262208, max_vocab);
  // The config classes' defaults: Gemma 4 (at most the heads), MixtralConfig 8, Qwen3MoeConfig 4, else the heads.
  const int default_kv_heads = f.gemma != 0                  ? std::min(4, cfg.num_attention_heads)
                               : f.model_type == "mixtral"   ? 8
                               : f.model_type == "qwen3_moe" ? 4
                                                             : cfg.num_attention_heads;
  cfg.num_key_value_heads = r.int_or("num_key_value_heads", default_kv_heads, 1, cfg.num_attention_heads);
  if (cfg.num_attention_heads % cfg.num_key_value_heads != 0)
    r.fail("num_key_value_heads", std::to_string(cfg.num_key_value_heads) + " does not divide num_attention_heads " +
                                      std::to_string(cfg.num_attention_heads));
  if (r.integer("head_dim") || f.gemma != 0) {
    // An explicit head_dim may make heads * head_dim differ from hidden_size (Mistral Nemo).
    cfg.head_dim = r.int_or("head_dim", 256, 1, max_head_dim); // 256: Gemma's default
  } else {
    if (cfg.hidden_size % cfg.num_attention_heads != 0)
      r.fail("hidden_size", std::to_string(cfg.hidden_size) + " is not divisible by num_attention_heads " +
                                std::to_string(cfg.num_attention_heads) + " (and head_dim is not given)");
    cfg.head_dim = cfg.hidden_size / cfg.num_attention_heads;
  }
  // rotate_half RoPE pairs dimension i with i + head_dim/2.
  if (cfg.head_dim % 2 != 0)
    r.fail("head_dim", std::to_string(cfg.head_dim) + " must be even for RoPE");
  cfg.max_position_embeddings = r.int_or("max_position_embeddings", f.default_max_positions, 1, max_positions);
}

// A rope_scaling object (or transformers v5's rope_parameters, which holds the same fields).
rope_scaling read_scaling(const field_reader& s) {
  // HF reads "rope_type" first and falls back to the older "type".
  std::string type_field = "rope_type";
  std::optional<std::string> type = s.string("rope_type");
  if (!type) {
    type_field = "type";
    type = s.string("type");
  }
  if (!type)
    s.fail("rope_type", "is missing");

  // The rotary tables are built from these as floats: each check is made on the float, so
  // that a value past a float's range (1e300 -> inf) or below its precision is refused too.
  const auto factor = [&s] {
    const double v = s.required_number("factor");
    if (v < 1.0 || !std::isfinite(static_cast<float>(v)))
      s.fail("factor", show_number(v) + " must be >= 1 and fit a float");
    return static_cast<float>(v);
  };
  rope_scaling rope;
  if (*type == "default") {
    return rope;
  } else if (*type == "linear") {
    rope.type = rope_scaling_type::linear;
    rope.factor = factor();
  } else if (*type == "llama3") {
    rope.type = rope_scaling_type::llama3;
    rope.factor = factor();
    // All required: a silent default here would quietly change every long-range position.
    const double low = s.required_number("low_freq_factor");
    const double high = s.required_number("high_freq_factor");
    // rope.cpp divides by low and by high - low: 1e-300 (0 as a float) or two values equal
    // as floats would fill the tables with inf and NaN.
    rope.low_freq_factor = static_cast<float>(low);
    rope.high_freq_factor = static_cast<float>(high);
    if (!(rope.low_freq_factor > 0.0f))
      s.fail("low_freq_factor", show_number(low) + " must be positive (as a float)");
    if (!(rope.high_freq_factor > rope.low_freq_factor) || !std::isfinite(rope.high_freq_factor))
      s.fail("high_freq_factor", show_number(high) + " must be greater than low_freq_factor " + show_number(low) +
                                     " (as a float) and fit a float");
    rope.original_max_position_embeddings = s.required_int("original_max_position_embeddings", 1, max_positions);
  } else {
    s.fail(type_field, "'" + *type + "' is not supported (supported: linear, llama3)");
  }
  return rope;
}

// A RoPE base read as the float the tables are built from.
float checked_theta(const field_reader& r, std::string_view field, double theta) {
  const auto value = static_cast<float>(theta);
  if (!(value > 0.0f) || !std::isfinite(value))
    r.fail(field, show_number(theta) + " must be positive and fit a float");
  return value;
}

// transformers v5's rope_parameters for models with kinds of layers: one entry per kind, each a base and a
// scaling. The full layers' is the model's rotation; the sliding layers' may only differ in its base.
void read_rope_per_layer_kind(const json::object& parameters, std::string_view source, double default_theta,
                              model_config& cfg) {
  const field_reader p(parameters, source, "rope_parameters.");
  for (const auto& entry : parameters)
    if (entry.key() != "full_attention" && entry.key() != "sliding_attention")
      p.fail(entry.key(), "is not a kind of layer (rope_parameters holds full_attention and sliding_attention)");
  const auto kind = [&](std::string_view name) -> std::optional<field_reader> {
    const json::value* v = p.find(name);
    if (v == nullptr)
      return std::nullopt;
    if (!v->is_object())
      p.fail(name, "must be an object, got " + show(*v));
    return field_reader(v->get_object(), source, "rope_parameters." + std::string(name) + ".");
  };
  cfg.rope_theta = static_cast<float>(default_theta);
  if (const std::optional<field_reader> full = kind("full_attention")) {
    cfg.rope_theta = checked_theta(*full, "rope_theta", full->number("rope_theta").value_or(default_theta));
    cfg.rope = read_scaling(*full);
  }
  if (const std::optional<field_reader> sliding = kind("sliding_attention")) {
    if (read_scaling(*sliding).type != rope_scaling_type::none)
      sliding->fail("rope_type", "is not supported on sliding layers (only their base, rope_theta, may differ)");
    if (const std::optional<double> theta = sliding->number("rope_theta"))
      cfg.sliding_rope_theta = checked_theta(*sliding, "rope_theta", *theta);
  }
}

void read_rope(const field_reader& r, std::string_view source, const family& f, model_config& cfg) {
  // Gemma3TextConfig's global base and MixtralConfig's; the others' 10,000.
  const double default_theta = f.gemma == 3 || f.model_type == "mixtral" ? 1e6 : 10000.0;
  // transformers v5 moved rope_theta and the scaling into "rope_parameters".
  const json::value* parameters = r.find("rope_parameters");
  if (parameters != nullptr && !parameters->is_object())
    r.fail("rope_parameters", "must be an object or null, got " + show(*parameters));
  // The per-kind form holds objects; the flat one only numbers, strings and lists.
  if (parameters != nullptr && std::any_of(parameters->get_object().begin(), parameters->get_object().end(),
                                           [](const auto& entry) { return entry.value().is_object(); })) {
    read_rope_per_layer_kind(parameters->get_object(), source, default_theta, cfg);
    return;
  }

  std::optional<double> theta = r.number("rope_theta");
  if (!theta && parameters != nullptr)
    theta = field_reader(parameters->get_object(), source, "rope_parameters.").number("rope_theta");
  cfg.rope_theta = checked_theta(r, "rope_theta", theta.value_or(default_theta));
  // Gemma 3 before v5: the local layers' base has a field of its own.
  if (f.gemma == 3)
    cfg.sliding_rope_theta =
        checked_theta(r, "rope_local_base_freq", r.number("rope_local_base_freq").value_or(10000.0));

  std::string field = "rope_scaling";
  const json::value* scaling = r.find("rope_scaling");
  if (scaling == nullptr && parameters != nullptr) {
    scaling = parameters;
    field = "rope_parameters";
  }
  if (scaling == nullptr)
    return;
  if (!scaling->is_object())
    r.fail(field, "must be an object or null, got " + show(*scaling));
  cfg.rope = read_scaling(field_reader(scaling->get_object(), source, field + "."));
}

// A soft cap as Gemma configs give it: a positive number, or null for none. Absent: the family's default.
float read_softcap(const field_reader& r, std::string_view field, float fallback) {
  const json::value* v = r.object().if_contains(field);
  if (v == nullptr)
    return fallback;
  if (v->is_null())
    return 0.0f;
  const double cap = *r.number(field);
  if (!(cap > 0.0) || !std::isfinite(static_cast<float>(cap)))
    r.fail(field, show_number(cap) + " must be positive and fit a float (or null for none)");
  return static_cast<float>(cap);
}

// Gemma 2 / 3: norms scale by (1 + weight), embeddings by sqrt(hidden), pre- and post-norms around
// attention and the MLP, scores scaled by query_pre_attn_scalar; Gemma 2 caps scores and logits.
void read_gemma(const field_reader& r, const family& f, model_config& cfg) {
  // EmbeddingGemma's encoder: every token sees every other, which no causal cache serves.
  if (r.boolean("use_bidirectional_attention").value_or(false))
    r.fail("use_bidirectional_attention", "true is not supported (troupe serves causal decoders)");
  cfg.norm_weight_offset = 1.0f;
  cfg.embedding_multiplier = std::sqrt(static_cast<float>(cfg.hidden_size));
  cfg.sandwich_norms = true;
  const double scalar = r.number("query_pre_attn_scalar").value_or(256.0); // both config classes' default
  if (!(scalar > 0.0) || !std::isfinite(static_cast<float>(scalar)))
    r.fail("query_pre_attn_scalar", show_number(scalar) + " must be positive and fit a float");
  cfg.query_pre_attn_scalar = static_cast<float>(scalar);
  // Gemma2Config defaults the caps to 50 and 30; Gemma3TextConfig to none.
  cfg.attention_logit_softcap = read_softcap(r, "attn_logit_softcapping", f.gemma == 2 ? 50.0f : 0.0f);
  cfg.final_logit_softcap = read_softcap(r, "final_logit_softcapping", f.gemma == 2 ? 30.0f : 0.0f);
}

constexpr int64_t max_experts = 1 << 16;

// Mixtral, Qwen2-MoE, Qwen3-MoE: the experts' numbers, with each config class's defaults. Only models
// whose every layer is a mixture of experts are served (Qwen's decoder_sparse_step 1, no mlp_only_layers).
void read_moe(const field_reader& r, const family& f, model_config& cfg) {
  const bool mixtral = f.model_type == "mixtral", qwen2 = f.model_type == "qwen2_moe";
  moe_config moe;
  // MixtralConfig: num_local_experts 8, top 2, each expert intermediate_size rows, always renormalized.
  // Qwen2MoeConfig: 60 experts, top 4, moe_intermediate_size 1408, a shared expert of 5632;
  // Qwen3MoeConfig: 128, top 8, 768; both norm_topk_prob false.
  // transformers maps each of these two names onto the other (attribute_map): the family's own first.
  std::string_view experts_field = mixtral ? "num_local_experts" : "num_experts";
  if (const std::string_view other = mixtral ? "num_experts" : "num_local_experts";
      r.find(experts_field) == nullptr && r.find(other) != nullptr)
    experts_field = other;
  const std::string_view width_field = mixtral ? "intermediate_size" : "moe_intermediate_size";
  moe.num_experts = r.int_or(experts_field, mixtral ? 8 : qwen2 ? 60 : 128, 1, max_experts);
  moe.expert_intermediate_size = mixtral ? r.required_int(width_field, 1, max_intermediate)
                                         : r.int_or(width_field, qwen2 ? 1408 : 768, 1, max_intermediate);
  const int64_t top_k = r.integer("num_experts_per_tok").value_or(mixtral ? 2 : qwen2 ? 4 : 8);
  if (top_k < 1 || top_k > moe.num_experts)
    r.fail("num_experts_per_tok", std::to_string(top_k) + " must be between 1 and " + std::string(experts_field) +
                                      " (" + std::to_string(moe.num_experts) + ")");
  moe.experts_per_token = static_cast<int>(top_k);
  moe.normalize_top_k = mixtral || r.boolean("norm_topk_prob").value_or(false);
  if (!mixtral) {
    const std::string all_moe = "(every layer must be a mixture-of-experts layer: troupe serves only such models)";
    if (const int64_t step = r.integer("decoder_sparse_step").value_or(1); step != 1)
      r.fail("decoder_sparse_step", std::to_string(step) + " is not supported " + all_moe);
    if (const json::value* dense = r.find("mlp_only_layers")) {
      if (!dense->is_array())
        r.fail("mlp_only_layers", "must be a list of layer indices, got " + show(*dense));
      if (!dense->get_array().empty())
        r.fail("mlp_only_layers", show(*dense) + " is not supported " + all_moe);
    }
  }
  // The shared expert's rows are the dense MLP's; Mixtral and Qwen3-MoE have none (their
  // intermediate_size is the experts' or a dense layer's troupe never builds).
  moe.shared_expert = qwen2;
  cfg.intermediate_size = qwen2 ? r.int_or("shared_expert_intermediate_size", 5632, 1, max_intermediate) : 0;
  cfg.moe = moe;
}

void read_features(const field_reader& r, const family& f, model_config& cfg) {
  const double eps = r.number("rms_norm_eps").value_or(f.model_type == "mixtral" ? 1e-5 : 1e-6);
  cfg.rms_norm_eps = static_cast<float>(eps);
  // Checked as the float RMSNorm adds: 1e-300 passes as a double but is 0 as a float.
  if (!(cfg.rms_norm_eps > 0.0f && cfg.rms_norm_eps < 1.0f))
    r.fail("rms_norm_eps", show_number(eps) + " is out of range (0..1, as a float)");

  // Gemma ties its LM head to the embeddings unless the file says otherwise.
  cfg.tie_word_embeddings = r.boolean("tie_word_embeddings").value_or(f.gemma != 0);

  cfg.qk_norm = f.qk_norm;
  cfg.fused_projections = f.fused_projections;
  // Phi-4-mini rotates only part of each head.
  if (const std::optional<double> partial = r.number("partial_rotary_factor"); partial && *partial != 1.0)
    r.fail("partial_rotary_factor", show_number(*partial) + " is not supported (RoPE over the whole head only)");
  const bool qkv_biases_only = f.model_type == "qwen2" || f.model_type == "qwen2_moe";
  // Qwen2-MoE's config names its q/k/v biases qkv_bias (transformers 5; 4.x always has them).
  const std::string_view bias_field = f.model_type == "qwen2_moe" ? "qkv_bias" : "attention_bias";
  cfg.attention_bias = r.boolean(bias_field).value_or(f.default_attention_bias);
  // Llama's (and Qwen3's) attention_bias also puts a bias on o_proj; only Qwen2's q/k/v biases
  // are implemented.
  if (cfg.attention_bias && !qkv_biases_only)
    r.fail(bias_field, "true is not supported for model_type '" + cfg.model_type +
                           "' (it adds an o_proj bias; only qwen2's q/k/v biases are implemented)");
  if (r.boolean("mlp_bias").value_or(false))
    r.fail("mlp_bias", "true is not supported (MLP biases are not implemented)");

  // Gemma's MLP reads hidden_activation (its configs may also carry a hidden_act that transformers ignores).
  const std::string_view act_field = f.gemma != 0 ? "hidden_activation" : "hidden_act";
  const std::string act = r.string(act_field).value_or(f.gemma != 0 ? "gelu_pytorch_tanh" : "silu");
  if (act == "silu" && f.gemma == 0)
    cfg.activation = mlp_activation::silu;
  else if (act == "gelu_pytorch_tanh" && f.gemma != 0)
    cfg.activation = mlp_activation::gelu_tanh;
  else
    r.fail(act_field, "'" + act + "' is not supported for model_type '" + cfg.model_type +
                          "' (supported: " + (f.gemma != 0 ? "gelu_pytorch_tanh" : "silu") + ")");

  if (f.gemma != 0)
    read_gemma(r, f, cfg);

  if (f.reads_sliding_window)
    read_attention_windows(r, f, cfg);

  // transformers v5 writes "dtype"; older versions "torch_dtype".
  std::string dtype_field = "torch_dtype";
  std::optional<std::string> dtype = r.string("torch_dtype");
  if (!dtype) {
    dtype_field = "dtype";
    dtype = r.string("dtype");
  }
  if (!dtype || *dtype == "float32") {
    cfg.torch_dtype = weight_dtype::f32;
  } else if (*dtype == "float16") {
    cfg.torch_dtype = weight_dtype::f16;
  } else if (*dtype == "bfloat16") {
    cfg.torch_dtype = weight_dtype::bf16;
  } else {
    r.fail(dtype_field, "'" + *dtype + "' is not supported (supported: float32, float16, bfloat16)");
  }
}

model_config parse_language_model(const json::object& object, std::string_view source_name, std::string prefix) {
  const field_reader r(object, source_name, std::move(prefix));

  model_config cfg;
  read_family(r, cfg);
  const family& f = *family_by_type(cfg.model_type);
  read_shapes(r, f, cfg);
  read_rope(r, source_name, f, cfg);
  read_features(r, f, cfg);
  if (f.moe)
    read_moe(r, f, cfg);
  if (const json::value* q = r.find("quantization_config")) {
    if (!q->is_object())
      r.fail("quantization_config", "must be an object or null, got " + show(*q));
    if (cfg.moe)
      r.fail("quantization_config", "is not supported for model_type '" + cfg.model_type +
                                        "' (quantized mixture-of-experts checkpoints are refused for now: "
                                        "serve the unquantized one)");
    cfg.quantization = parse_quantization_config(q->get_object(), source_name);
    if (cfg.fused_projections)
      r.fail("quantization_config", "is not supported for model_type '" + cfg.model_type +
                                        "' (its q/k/v and gate/up layers are stored fused)");
  }
  return cfg;
}

} // namespace

std::string_view to_string(rope_scaling_type type) noexcept {
  switch (type) {
    case rope_scaling_type::none:
      return "none";
    case rope_scaling_type::linear:
      return "linear";
    case rope_scaling_type::llama3:
      return "llama3";
  }
  return "?";
}

model_config parse_model_config(std::string_view json_text, std::string_view source_name) {
  std::error_code ec;
  const json::value root = json::parse(json_text, ec);
  if (ec)
    throw model_error(std::string(source_name) + ": not valid JSON (" + ec.message() + ")");
  if (!root.is_object())
    throw model_error(std::string(source_name) + ": not a JSON object");
  // Gemma 3's image-text checkpoints: the language model is text_config's (a gemma3_text config that
  // leaves out what equals the defaults), read with the file's dtype and quantization when it has none.
  const json::object& top = root.get_object();
  const json::value* type = top.if_contains("model_type");
  if (type != nullptr && type->is_string() && type->get_string() == "gemma3") {
    const field_reader outer(top, source_name);
    const json::value* text = outer.find("text_config");
    if (text == nullptr || !text->is_object())
      outer.fail("text_config", "must be the language model's config (an object) for model_type 'gemma3', got " +
                                    (text == nullptr ? std::string("none") : show(*text)));
    json::object language = text->get_object();
    if (const json::value* t = language.if_contains("model_type");
        t != nullptr && !(t->is_string() && t->get_string() == "gemma3_text"))
      outer.fail("text_config.model_type", show(*t) + " is not supported (supported: gemma3_text)");
    language["model_type"] = "gemma3_text";
    language.erase("architectures");
    for (const char* inherited : {"torch_dtype", "dtype", "quantization_config"})
      if (!language.contains(inherited) && top.contains(inherited))
        language[inherited] = top.at(inherited);
    model_config cfg = parse_language_model(language, source_name, "text_config.");
    cfg.architecture = "Gemma3ForConditionalGeneration";
    cfg.image_text_checkpoint = true;
    return cfg;
  }
  return parse_language_model(top, source_name, "");
}

model_config load_model_config(const std::filesystem::path& model_dir) {
  const std::filesystem::path path = model_dir / "config.json";
  return parse_model_config(read_text_file(path), path.string());
}

std::string read_text_file(const std::filesystem::path& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw model_error(path.string() + ": is a directory, not a file");
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw model_error(path.string() + ": cannot open (" + std::error_code(errno, std::generic_category()).message() +
                      ")");
  std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  if (in.bad())
    throw model_error(path.string() + ": read failed");
  return text;
}

} // namespace troupe::runtime
