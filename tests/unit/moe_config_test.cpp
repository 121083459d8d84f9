// config.json of the mixtures of experts (Mixtral, Qwen2-MoE, Qwen3-MoE) as their published checkpoints
// and transformers 5 write it: the experts' numbers, each config class's defaults, every refusal, and how
// tensor parallelism shares out each expert's rows.
#include "runtime/errors.hpp"
#include "runtime/model_config.hpp"
#include "runtime/shard_shape.hpp"

#include <doctest/doctest.h>

#include "tests/support/model_error_check.hpp"

#include <boost/json.hpp>

#include <string>

namespace {

namespace json = boost::json;
using namespace troupe::runtime;

// mistralai/Mixtral-8x7B-v0.1's config.json.
json::object mixtral_config() {
  return json::parse(R"({
    "architectures": ["MixtralForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 1, "eos_token_id": 2,
    "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 14336,
    "max_position_embeddings": 32768, "model_type": "mixtral", "num_attention_heads": 32,
    "num_experts_per_tok": 2, "num_hidden_layers": 32, "num_key_value_heads": 8, "num_local_experts": 8,
    "output_router_logits": false, "rms_norm_eps": 1e-05, "rope_theta": 1000000.0,
    "router_aux_loss_coef": 0.02, "sliding_window": null, "tie_word_embeddings": false,
    "torch_dtype": "bfloat16", "transformers_version": "4.36.0.dev0", "use_cache": true, "vocab_size": 32000})")
      .as_object();
}

// Qwen/Qwen1.5-MoE-A2.7B's config.json.
json::object qwen2_moe_config() {
  return json::parse(R"({
    "architectures": ["Qwen2MoeForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
    "eos_token_id": 151643, "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02,
    "intermediate_size": 5632, "max_position_embeddings": 8192, "max_window_layers": 21,
    "model_type": "qwen2_moe", "num_attention_heads": 16, "num_hidden_layers": 24, "num_key_value_heads": 16,
    "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "sliding_window": 32768, "tie_word_embeddings": false,
    "torch_dtype": "bfloat16", "transformers_version": "4.39.0.dev0", "use_cache": true,
    "use_sliding_window": false, "vocab_size": 151936, "decoder_sparse_step": 1, "moe_intermediate_size": 1408,
    "shared_expert_intermediate_size": 5632, "num_experts_per_tok": 4, "num_experts": 60,
    "norm_topk_prob": false, "output_router_logits": false, "router_aux_loss_coef": 0.001})")
      .as_object();
}

// Qwen/Qwen3-30B-A3B's config.json.
json::object qwen3_moe_config() {
  return json::parse(R"({
    "architectures": ["Qwen3MoeForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
    "bos_token_id": 151643, "decoder_sparse_step": 1, "eos_token_id": 151645, "head_dim": 128,
    "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02, "intermediate_size": 6144,
    "max_position_embeddings": 40960, "max_window_layers": 48, "mlp_only_layers": [], "model_type": "qwen3_moe",
    "moe_intermediate_size": 768, "norm_topk_prob": true, "num_attention_heads": 32, "num_experts": 128,
    "num_experts_per_tok": 8, "num_hidden_layers": 48, "num_key_value_heads": 4, "output_router_logits": false,
    "rms_norm_eps": 1e-06, "rope_scaling": null, "rope_theta": 1000000.0, "router_aux_loss_coef": 0.001,
    "sliding_window": null, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
    "transformers_version": "4.51.0", "use_cache": true, "use_sliding_window": false, "vocab_size": 151936})")
      .as_object();
}

model_config parse(const json::object& object) {
  return parse_model_config(json::serialize(object));
}

json::object with(json::object object, std::string_view key, json::value value) {
  object[key] = std::move(value);
  return object;
}

json::object without(json::object object, std::string_view key) {
  object.erase(key);
  return object;
}

std::string config_error_text(const model_config& cfg, int ranks) {
  try {
    (void)shard_shapes(cfg, ranks);
  } catch (const troupe::config_error& e) {
    return e.what();
  }
  return "(no config_error was thrown)";
}

} // namespace

TEST_CASE("Mixtral-8x7B's config: 8 experts, top 2 renormalized, intermediate_size is each expert's rows") {
  const model_config cfg = parse(mixtral_config());
  CHECK(cfg.model_type == "mixtral");
  CHECK(cfg.architecture == "MixtralForCausalLM");
  REQUIRE(cfg.moe);
  CHECK(*cfg.moe == moe_config{.num_experts = 8,
                               .experts_per_token = 2,
                               .expert_intermediate_size = 14336,
                               .normalize_top_k = true,
                               .shared_expert = false});
  CHECK(cfg.intermediate_size == 0); // no shared expert, no dense MLP
  CHECK(cfg.num_key_value_heads == 8);
  CHECK(cfg.head_dim == 128);
  CHECK(cfg.rms_norm_eps == doctest::Approx(1e-5));
  CHECK(cfg.rope_theta == 1000000.0f);
  CHECK_FALSE(cfg.attention_bias);
  CHECK_FALSE(cfg.qk_norm);
  CHECK_FALSE(cfg.sliding_window);
  CHECK(cfg.activation == mlp_activation::silu);

  // MixtralConfig's defaults for what a file leaves out; a sliding_window applies to every layer, as Mistral's.
  json::object sparse = mixtral_config();
  for (const char* field : {"num_local_experts", "num_experts_per_tok", "rms_norm_eps", "rope_theta",
                            "num_key_value_heads", "max_position_embeddings"})
    sparse.erase(field);
  sparse["sliding_window"] = 4096;
  const model_config defaults = parse(sparse);
  CHECK(defaults.moe->num_experts == 8);
  CHECK(defaults.moe->experts_per_token == 2);
  CHECK(defaults.rms_norm_eps == doctest::Approx(1e-5));
  CHECK(defaults.rope_theta == 1000000.0f);
  CHECK(defaults.num_key_value_heads == 8);
  CHECK(defaults.max_position_embeddings == 4096 * 32);
  CHECK(defaults.every_layer_window() == 4096);
  // transformers maps num_experts onto num_local_experts: either name is read.
  CHECK(parse(with(without(mixtral_config(), "num_local_experts"), "num_experts", 4)).moe->num_experts == 4);
  // The expert width has no default worth guessing: Mixtral's file always has it.
  CHECK_MODEL_ERROR(parse(without(mixtral_config(), "intermediate_size")), "config.json: intermediate_size is missing");
}

TEST_CASE("Qwen1.5-MoE's config: 60 experts, top 4 unnormalized, a shared expert of 5632 rows, q/k/v biases") {
  const model_config cfg = parse(qwen2_moe_config());
  CHECK(cfg.model_type == "qwen2_moe");
  CHECK(cfg.architecture == "Qwen2MoeForCausalLM");
  REQUIRE(cfg.moe);
  CHECK(*cfg.moe == moe_config{.num_experts = 60,
                               .experts_per_token = 4,
                               .expert_intermediate_size = 1408,
                               .normalize_top_k = false,
                               .shared_expert = true});
  CHECK(cfg.intermediate_size == 5632); // the shared expert's (shared_expert_intermediate_size)
  CHECK(cfg.attention_bias);            // Qwen2-MoE's q/k/v biases, always there in transformers 4.x
  CHECK_FALSE(cfg.qk_norm);
  CHECK_FALSE(cfg.sliding_window); // use_sliding_window false: sliding_window 32768 is not read
  CHECK(cfg.head_dim == 128);

  // Qwen2MoeConfig's defaults.
  json::object sparse = qwen2_moe_config();
  for (const char* field :
       {"num_experts", "num_experts_per_tok", "moe_intermediate_size", "shared_expert_intermediate_size",
        "norm_topk_prob", "decoder_sparse_step", "intermediate_size"})
    sparse.erase(field);
  const model_config defaults = parse(sparse);
  CHECK(*defaults.moe == moe_config{.num_experts = 60,
                                    .experts_per_token = 4,
                                    .expert_intermediate_size = 1408,
                                    .normalize_top_k = false,
                                    .shared_expert = true});
  CHECK(defaults.intermediate_size == 5632);
  CHECK(parse(with(qwen2_moe_config(), "norm_topk_prob", true)).moe->normalize_top_k);
}

TEST_CASE("a Qwen2-MoE config as transformers 5 saves it: qkv_bias, layer_types, sliding_window 0, rope_parameters") {
  json::object v5 = qwen2_moe_config();
  v5.erase("rope_theta");
  v5["rope_parameters"] = json::parse(R"({"rope_theta": 1000000.0, "rope_type": "default"})");
  v5["sliding_window"] = 0; // Qwen2MoeConfig's __post_init__ without use_sliding_window
  v5["qkv_bias"] = true;
  json::array types;
  for (int l = 0; l < 24; ++l)
    types.emplace_back("full_attention");
  v5["layer_types"] = types;
  v5["mlp_only_layers"] = json::array{};
  v5["dtype"] = "bfloat16";
  v5.erase("torch_dtype");
  const model_config cfg = parse(v5);
  CHECK(cfg.attention_bias);
  CHECK(cfg.rope_theta == 1000000.0f);
  CHECK_FALSE(cfg.sliding_window);
  CHECK(cfg.moe->num_experts == 60);
  CHECK(cfg.torch_dtype == weight_dtype::bf16);
  CHECK_FALSE(parse(with(v5, "qkv_bias", false)).attention_bias);
}

TEST_CASE("Qwen3-30B-A3B's config: 128 experts, top 8 renormalized, q/k norms, no shared expert") {
  const model_config cfg = parse(qwen3_moe_config());
  CHECK(cfg.model_type == "qwen3_moe");
  CHECK(cfg.architecture == "Qwen3MoeForCausalLM");
  REQUIRE(cfg.moe);
  CHECK(*cfg.moe == moe_config{.num_experts = 128,
                               .experts_per_token = 8,
                               .expert_intermediate_size = 768,
                               .normalize_top_k = true,
                               .shared_expert = false});
  CHECK(cfg.intermediate_size == 0); // 6144 is a dense layer's, and every layer is a mixture here
  CHECK(cfg.qk_norm);
  CHECK(cfg.head_dim == 128);
  CHECK(cfg.num_key_value_heads == 4);
  CHECK_FALSE(cfg.attention_bias);

  // Qwen3MoeConfig's defaults (norm_topk_prob false, 4 kv heads).
  json::object sparse = qwen3_moe_config();
  for (const char* field : {"num_experts", "num_experts_per_tok", "moe_intermediate_size", "norm_topk_prob",
                            "num_key_value_heads", "mlp_only_layers", "decoder_sparse_step"})
    sparse.erase(field);
  const model_config defaults = parse(sparse);
  CHECK(*defaults.moe == moe_config{.num_experts = 128,
                                    .experts_per_token = 8,
                                    .expert_intermediate_size = 768,
                                    .normalize_top_k = false,
                                    .shared_expert = false});
  CHECK(defaults.num_key_value_heads == 4);
  CHECK_MODEL_ERROR(parse(with(qwen3_moe_config(), "attention_bias", true)),
                    "config.json: attention_bias true is not supported for model_type 'qwen3_moe'");
}

TEST_CASE("mixture-of-experts refusals name the field: sparse steps, dense layers, top-k, sizes, quantization") {
  const std::string all_moe = "(every layer must be a mixture-of-experts layer: troupe serves only such models)";
  for (const json::object& c : {qwen2_moe_config(), qwen3_moe_config()}) {
    CAPTURE(json::serialize(c.at("model_type")));
    CHECK_MODEL_ERROR(parse(with(c, "decoder_sparse_step", 2)),
                      "config.json: decoder_sparse_step 2 is not supported " + all_moe);
    CHECK_MODEL_ERROR(parse(with(c, "mlp_only_layers", json::array{0, 3})),
                      "config.json: mlp_only_layers [0,3] is not supported " + all_moe);
    CHECK_MODEL_ERROR(parse(with(c, "mlp_only_layers", 3)),
                      "config.json: mlp_only_layers must be a list of layer indices, got 3");
    CHECK_MODEL_ERROR(parse(with(c, "num_experts_per_tok", 0)),
                      "config.json: num_experts_per_tok 0 must be between 1 and num_experts");
    CHECK_MODEL_ERROR(parse(with(c, "num_experts_per_tok", 200)),
                      "config.json: num_experts_per_tok 200 must be between 1 and num_experts");
    CHECK_MODEL_ERROR(parse(with(c, "num_experts", 0)), "config.json: num_experts 0 is out of range");
    CHECK_MODEL_ERROR(parse(with(c, "moe_intermediate_size", 0)),
                      "config.json: moe_intermediate_size 0 is out of range");
    CHECK_MODEL_ERROR(parse(with(c, "moe_intermediate_size", -8)),
                      "config.json: moe_intermediate_size -8 is out of range");
    CHECK_MODEL_ERROR(parse(with(c, "use_sliding_window", true)),
                      "config.json: use_sliding_window true is not supported for model_type");
    CHECK_MODEL_ERROR(parse(with(c, "quantization_config", json::parse(R"({"quant_method": "fp8", "fmt": "e4m3",
                                      "activation_scheme": "dynamic", "weight_block_size": [128, 128]})"))),
                      "config.json: quantization_config is not supported for model_type");
  }
  CHECK_MODEL_ERROR(parse(with(qwen2_moe_config(), "shared_expert_intermediate_size", 0)),
                    "config.json: shared_expert_intermediate_size 0 is out of range");
  CHECK_MODEL_ERROR(parse(with(mixtral_config(), "num_experts_per_tok", 9)),
                    "config.json: num_experts_per_tok 9 must be between 1 and num_local_experts (8)");
  CHECK_MODEL_ERROR(parse(with(mixtral_config(), "num_local_experts", -1)),
                    "config.json: num_local_experts -1 is out of range");
  CHECK_MODEL_ERROR(parse(with(mixtral_config(), "intermediate_size", 0)),
                    "config.json: intermediate_size 0 is out of range");
  CHECK_MODEL_ERROR(parse(with(mixtral_config(), "quantization_config",
                               json::parse(R"({"quant_method": "awq", "bits": 4, "group_size": 128,
                                               "zero_point": true, "version": "gemm"})"))),
                    "config.json: quantization_config is not supported for model_type 'mixtral' (quantized "
                    "mixture-of-experts checkpoints are refused for now");
  CHECK_MODEL_ERROR(parse(with(qwen2_moe_config(), "architectures", json::array{"MixtralForCausalLM"})),
                    "architectures[0] 'MixtralForCausalLM' does not match model_type 'qwen2_moe'");
  // An architecture alone names the family.
  CHECK(parse(without(mixtral_config(), "model_type")).moe->num_experts == 8);
  // The dense families have no experts.
  json::object llama = without(without(mixtral_config(), "num_local_experts"), "num_experts_per_tok");
  llama["model_type"] = "mistral";
  llama["architectures"] = json::array{"MistralForCausalLM"};
  CHECK_FALSE(parse(llama).moe);
}

TEST_CASE("tensor parallelism splits every expert's rows, and names the expert width that does not divide") {
  const model_config mixtral = parse(mixtral_config());
  const auto shapes = shard_shapes(mixtral, 4);
  for (int r = 0; r < 4; ++r) {
    CHECK(shapes[r].expert_intermediate == 14336 / 4);
    CHECK(shapes[r].expert_intermediate_begin == r * 14336 / 4);
    CHECK(shapes[r].intermediate == 0);
  }
  CHECK(whole_model_shard(mixtral).expert_intermediate == 14336);
  CHECK(shard_shapes(mixtral, 1).front() == whole_model_shard(mixtral));

  const model_config qwen2 = parse(qwen2_moe_config());
  const auto two = shard_shapes(qwen2, 2);
  CHECK(two[1].expert_intermediate_begin == 704);
  CHECK(two[1].expert_intermediate == 704);
  CHECK(two[1].intermediate_begin == 2816); // the shared expert, as the dense MLP
  CHECK(two[1].intermediate == 2816);

  model_config odd = qwen2;
  odd.moe->expert_intermediate_size = 1410;
  CHECK(config_error_text(odd, 4) ==
        "engine.tensor-parallel-size 4 does not divide the model's moe_intermediate_size "
        "1410 (every expert's gate and up are split by rows among the ranks)");
  odd = qwen2;
  odd.intermediate_size = 5630;
  CHECK(config_error_text(odd, 4) ==
        "engine.tensor-parallel-size 4 does not divide the model's shared_expert_intermediate_size 5630 (gate_proj "
        "and up_proj are split by rows among the ranks)");
  model_config wide = mixtral;
  wide.moe->expert_intermediate_size = 14338;
  CHECK(config_error_text(wide, 4) ==
        "engine.tensor-parallel-size 4 does not divide the model's intermediate_size "
        "14338 (every expert's gate and up are split by rows among the ranks)");
}
