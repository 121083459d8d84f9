// Fuzzes parse_model_config (runtime/model_config) on any bytes as config.json: either
// model_error, or a config whose shapes the runtime can use as they are (the ranges and
// divisibility its header and its checks promise).
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "fuzz_support.hpp"
#include "runtime/errors.hpp"
#include "runtime/model_config.hpp"

using troupe::fuzz::check;
using namespace troupe::runtime;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  model_config c;
  try {
    c = parse_model_config(troupe::fuzz::as_text(data, size));
  } catch (const model_error&) {
    return 0;
  }
  // A mixture of experts' intermediate_size is its shared expert's, 0 when it has none.
  check(c.hidden_size >= 1 && c.intermediate_size >= (c.moe ? 0 : 1) && c.num_hidden_layers >= 1 &&
            c.vocab_size >= 1,
        "sizes are positive");
  if (c.moe) {
    check(c.moe->num_experts >= 1 && c.moe->expert_intermediate_size >= 1, "expert sizes are positive");
    check(c.moe->experts_per_token >= 1 && c.moe->experts_per_token <= c.moe->num_experts,
          "a token's experts are among the experts");
    check(c.moe->shared_expert == (c.intermediate_size > 0), "a shared expert has a width, and only it");
    check(!c.quantization, "a quantized mixture of experts is refused");
  }
  check(c.num_attention_heads >= 1 && c.num_key_value_heads >= 1 && c.num_attention_heads % c.num_key_value_heads == 0,
        "kv heads divide the heads");
  check(c.head_dim >= 2 && c.head_dim % 2 == 0, "head_dim is even (RoPE)");
  check(c.max_position_embeddings >= 1, "a context of at least one position");
  check(std::isfinite(c.rope_theta) && c.rope_theta > 0.0f, "rope_theta is a positive float");
  check(std::isfinite(c.rms_norm_eps) && c.rms_norm_eps > 0.0f && c.rms_norm_eps < 1.0f,
        "rms_norm_eps is in (0, 1) as a float");
  check(std::isfinite(c.rope.factor) && c.rope.factor >= 1.0f, "rope factor is a float >= 1");
  check(std::isfinite(c.rope.low_freq_factor) && std::isfinite(c.rope.high_freq_factor),
        "rope frequency factors are finite floats");
  if (c.rope.type == rope_scaling_type::llama3)
    check(c.rope.low_freq_factor > 0.0f && c.rope.high_freq_factor > c.rope.low_freq_factor,
          "llama3 frequency factors are ordered");
  check(c.sliding_window.has_value() != c.sliding_layers.empty(), "a window comes with its layers");
  if (c.sliding_window) {
    check(*c.sliding_window >= 1, "a window of at least one position");
    check(c.sliding_layers.size() == static_cast<std::size_t>(c.num_hidden_layers), "one flag per layer");
    check(std::find(c.sliding_layers.begin(), c.sliding_layers.end(), true) != c.sliding_layers.end(),
          "some layer slides");
  }
  for (int l = 0; l < c.num_hidden_layers; ++l)
    check(c.attention_window(l) == 0 || c.attention_window(l) == c.sliding_window,
          "a layer's window is none or the model's");
  check((c.activation == mlp_activation::gelu_tanh) == (c.norm_weight_offset == 1.0f),
        "GeGLU only with Gemma's (1 + w) norms");
  check(c.attention_logit_softcap >= 0.0f && c.final_logit_softcap >= 0.0f, "soft caps are none or positive");
  check(std::isfinite(c.attention_scale()) && c.attention_scale() > 0.0f, "a finite positive attention scale");
  if (c.sliding_rope_theta)
    check(*c.sliding_rope_theta > 0.0f && std::isfinite(*c.sliding_rope_theta), "a positive sliding RoPE base");
  return 0;
}
