// config.json and generation_config.json parsing: the real stories260k files, the
// Llama/Mistral/Qwen2/Qwen3/Phi-3/Gemma variants, every refusal, and the default stop token ids
// (the mixtures of experts: moe_config_test.cpp).
#include "runtime/model_config.hpp"
#include "runtime/errors.hpp"
#include "runtime/generation_config.hpp"

#include <doctest/doctest.h>

#include "tests/support/data_root.hpp"
#include "tests/support/model_error_check.hpp"
#include "tests/support/temp_dir.hpp"

#include <boost/json.hpp>

#include <stdlib.h>

#include <cmath>
#include <fstream>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;
namespace json = boost::json;
using namespace troupe::runtime;
using namespace troupe::testing;

// A small valid Llama config to edit one field at a time.
json::object llama_config() {
  return json::parse(R"({
    "architectures": ["LlamaForCausalLM"], "model_type": "llama",
    "hidden_size": 256, "intermediate_size": 688, "num_hidden_layers": 2,
    "num_attention_heads": 8, "num_key_value_heads": 2, "vocab_size": 1000,
    "max_position_embeddings": 4096, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
    "hidden_act": "silu", "torch_dtype": "bfloat16", "some_future_field": {"x": [1, 2]}
  })")
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

} // namespace

TEST_CASE("the stories260k config.json") {
  const model_config cfg = load_model_config(stories_dir());
  CHECK(cfg.architecture == "LlamaForCausalLM");
  CHECK(cfg.model_type == "llama");
  CHECK(cfg.hidden_size == 64);
  CHECK(cfg.intermediate_size == 172);
  CHECK(cfg.num_hidden_layers == 5);
  CHECK(cfg.num_attention_heads == 8);
  CHECK(cfg.num_key_value_heads == 4);
  CHECK(cfg.head_dim == 8);
  CHECK(cfg.vocab_size == 512);
  CHECK(cfg.max_position_embeddings == 512);
  CHECK(cfg.rms_norm_eps == doctest::Approx(1e-5).epsilon(1e-6));
  CHECK(cfg.rope_theta == 10000.0f);
  CHECK(cfg.rope.type == rope_scaling_type::none);
  CHECK(cfg.tie_word_embeddings);
  CHECK_FALSE(cfg.attention_bias);
  CHECK_FALSE(cfg.sliding_window.has_value());
  CHECK(cfg.torch_dtype == weight_dtype::f32);
  CHECK(cfg.activation == mlp_activation::silu);
}

TEST_CASE("defaults: head_dim, num_key_value_heads, architecture, eps, theta, tie") {
  const json::object minimal = json::parse(R"({"model_type": "llama", "hidden_size": 128,
      "intermediate_size": 256, "num_hidden_layers": 1, "num_attention_heads": 4, "vocab_size": 32})")
                                   .as_object();
  const model_config cfg = parse(minimal);
  CHECK(cfg.architecture == "LlamaForCausalLM");
  CHECK(cfg.head_dim == 32);
  CHECK(cfg.num_key_value_heads == 4);
  CHECK(cfg.max_position_embeddings == 2048);
  CHECK(cfg.rms_norm_eps == doctest::Approx(1e-6));
  CHECK(cfg.rope_theta == 10000.0f);
  CHECK_FALSE(cfg.tie_word_embeddings);
  CHECK_FALSE(cfg.attention_bias);
  CHECK(cfg.activation == mlp_activation::silu);
  CHECK(cfg.torch_dtype == weight_dtype::f32);

  // null means "default" for optional fields.
  const model_config nulls = parse(with(with(minimal, "num_key_value_heads", nullptr), "head_dim", nullptr));
  CHECK(nulls.num_key_value_heads == 4);
  CHECK(nulls.head_dim == 32);

  // model_type can come from the architecture alone.
  const model_config from_arch =
      parse(with(without(minimal, "model_type"), "architectures", json::array{"Qwen2ForCausalLM"}));
  CHECK(from_arch.model_type == "qwen2");

  // An explicit head_dim need not equal hidden / heads (Mistral Nemo style).
  CHECK(parse(with(minimal, "head_dim", 64)).head_dim == 64);
  // A whole number written as 128.0 is still an integer.
  CHECK(parse(with(minimal, "hidden_size", 128.0)).hidden_size == 128);
}

TEST_CASE("a Llama 3.2 style config with llama3 rope scaling") {
  json::object c = llama_config();
  c["tie_word_embeddings"] = true;
  c["rope_scaling"] = json::parse(R"({"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
      "original_max_position_embeddings": 8192, "rope_type": "llama3"})");
  const model_config cfg = parse(c);
  CHECK(cfg.rope.type == rope_scaling_type::llama3);
  CHECK(cfg.rope.factor == 32.0f);
  CHECK(cfg.rope.low_freq_factor == 1.0f);
  CHECK(cfg.rope.high_freq_factor == 4.0f);
  CHECK(cfg.rope.original_max_position_embeddings == 8192);
  CHECK(cfg.rope_theta == 500000.0f);
  CHECK(cfg.torch_dtype == weight_dtype::bf16);
  CHECK(cfg.tie_word_embeddings);
  CHECK(cfg.head_dim == 32);
  CHECK(to_string(cfg.rope.type) == "llama3");
}

TEST_CASE("linear and default rope scaling, old 'type' key and transformers v5 rope_parameters") {
  const model_config linear =
      parse(with(llama_config(), "rope_scaling", json::parse(R"({"type": "linear", "factor": 4})")));
  CHECK(linear.rope.type == rope_scaling_type::linear);
  CHECK(linear.rope.factor == 4.0f);
  const model_config plain = parse(with(llama_config(), "rope_scaling", json::parse(R"({"rope_type": "default"})")));
  CHECK(plain.rope.type == rope_scaling_type::none);

  json::object v5 = without(llama_config(), "rope_theta");
  v5["rope_parameters"] = json::parse(R"({"rope_type": "linear", "factor": 2.0, "rope_theta": 1000000.0})");
  const model_config from_v5 = parse(v5);
  CHECK(from_v5.rope_theta == 1000000.0f);
  CHECK(from_v5.rope.type == rope_scaling_type::linear);
  CHECK(from_v5.rope.factor == 2.0f);
}

TEST_CASE("a Qwen2 config: q/k/v biases by default and an inactive sliding window") {
  const model_config cfg = parse_model_config(R"({
    "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 896,
    "intermediate_size": 4864, "num_hidden_layers": 24, "num_attention_heads": 14,
    "num_key_value_heads": 2, "vocab_size": 151936, "max_position_embeddings": 32768,
    "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "sliding_window": 32768,
    "use_sliding_window": false, "max_window_layers": 21, "tie_word_embeddings": true,
    "torch_dtype": "bfloat16", "hidden_act": "silu", "rope_scaling": null})");
  CHECK(cfg.model_type == "qwen2");
  CHECK(cfg.attention_bias);
  CHECK(cfg.tie_word_embeddings);
  CHECK(cfg.head_dim == 64);
  CHECK_FALSE(cfg.sliding_window.has_value());
  CHECK(cfg.num_key_value_heads == 2);

  CHECK(cfg.sliding_layers.empty());
  CHECK(cfg.attention_window(0) == 0);
  CHECK(cfg.attention_window(23) == 0);
}

TEST_CASE("Qwen2 with use_sliding_window: the layers from max_window_layers on slide, as in transformers") {
  const json::object active = json::parse(R"({"model_type": "qwen2", "hidden_size": 64, "intermediate_size": 128,
      "num_hidden_layers": 4, "num_attention_heads": 4, "vocab_size": 10, "max_position_embeddings": 8192,
      "use_sliding_window": true, "sliding_window": 4096, "max_window_layers": 2})")
                                  .as_object();
  const model_config cfg = parse(active);
  CHECK(cfg.sliding_window == 4096);
  CHECK(cfg.sliding_layers == std::vector<bool>{false, false, true, true});
  CHECK(cfg.attention_window(1) == 0);
  CHECK(cfg.attention_window(2) == 4096);
  CHECK(cfg.attention_window(3) == 4096);
  // max_window_layers defaults to 28 (Qwen2Config), past these 4 layers: no layer slides.
  CHECK_FALSE(parse(without(active, "max_window_layers")).sliding_window.has_value());
  CHECK(parse(with(active, "max_window_layers", 0)).sliding_layers == std::vector<bool>(4, true));
  // The window set but switched off: nothing slides.
  CHECK_FALSE(parse(with(active, "use_sliding_window", false)).sliding_window.has_value());
  // A layer_types list names each layer's kind and wins over the rule.
  const model_config listed =
      parse(with(active, "layer_types",
                 json::array{"sliding_attention", "full_attention", "sliding_attention", "full_attention"}));
  CHECK(listed.sliding_layers == std::vector<bool>{true, false, true, false});
  CHECK(listed.attention_window(0) == 4096);
  CHECK(listed.attention_window(1) == 0);
  CHECK_FALSE(parse(with(active, "layer_types", json::array(4, "full_attention"))).sliding_window.has_value());

  CHECK_MODEL_ERROR(
      parse(with(active, "layer_types", json::array{"full_attention"})),
      "config.json: layer_types must be a list of num_hidden_layers (4) strings, got [\"full_attention\"]");
  CHECK_MODEL_ERROR(parse(with(active, "layer_types",
                               json::array{"full_attention", "chunked_attention", "full_attention", "full_attention"})),
                    "config.json: layer_types[1] \"chunked_attention\" is not supported (supported: full_attention, "
                    "sliding_attention)");
  CHECK_MODEL_ERROR(parse(with(with(active, "use_sliding_window", false), "layer_types",
                               json::array{"sliding_attention", "full_attention", "full_attention", "full_attention"})),
                    "config.json: layer_types[0] is sliding_attention but sliding_window is not set (or "
                    "use_sliding_window is false)");
  CHECK_MODEL_ERROR(parse(with(active, "sliding_window", 0)), "config.json: sliding_window 0 is out of range");
  CHECK_MODEL_ERROR(parse(with(active, "max_window_layers", -1)), "config.json: max_window_layers -1 is out of range");
}

TEST_CASE("a Qwen3 config: q/k norms, an explicit head_dim, no biases, the window when on") {
  // Qwen3-0.6B's config.json: 16 heads of 128 in a hidden size of 1024.
  const json::object qwen3 = json::parse(R"({
    "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "attention_bias": false,
    "attention_dropout": 0.0, "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128,
    "hidden_act": "silu", "hidden_size": 1024, "initializer_range": 0.02, "intermediate_size": 3072,
    "max_position_embeddings": 40960, "max_window_layers": 28, "num_attention_heads": 16,
    "num_hidden_layers": 28, "num_key_value_heads": 8, "rms_norm_eps": 1e-06, "rope_scaling": null,
    "rope_theta": 1000000, "sliding_window": null, "tie_word_embeddings": true, "torch_dtype": "bfloat16",
    "use_cache": true, "use_sliding_window": false, "vocab_size": 151936})")
                                 .as_object();
  const model_config cfg = parse(qwen3);
  CHECK(cfg.model_type == "qwen3");
  CHECK(cfg.architecture == "Qwen3ForCausalLM");
  CHECK(cfg.qk_norm);
  CHECK_FALSE(cfg.attention_bias);
  CHECK(cfg.head_dim == 128);
  CHECK(cfg.hidden_size == 1024);
  CHECK(cfg.num_attention_heads * cfg.head_dim == 2048);
  CHECK(cfg.num_key_value_heads == 8);
  CHECK(cfg.tie_word_embeddings);
  CHECK(cfg.rope_theta == 1000000.0f);
  CHECK(cfg.rms_norm_eps == doctest::Approx(1e-6).epsilon(1e-6));
  CHECK_FALSE(cfg.sliding_window.has_value());
  // Found by the architecture alone, and no other family has the norms.
  CHECK(parse(without(qwen3, "model_type")).qk_norm);
  CHECK_FALSE(parse(llama_config()).qk_norm);
  CHECK_FALSE(parse(with(with(llama_config(), "model_type", "qwen2"), "architectures",
                         json::array{"Qwen2ForCausalLM"}))
                  .qk_norm);
  // A sliding_window value with use_sliding_window false does nothing, as in transformers.
  CHECK_FALSE(parse(with(qwen3, "sliding_window", 4096)).sliding_window.has_value());
  CHECK(parse(without(qwen3, "use_sliding_window")).model_type == "qwen3");

  // On, with a window: the layers from max_window_layers (28 here: none of the 28) slide.
  const json::object windowed = with(with(qwen3, "use_sliding_window", true), "sliding_window", 4096);
  CHECK_FALSE(parse(windowed).sliding_window.has_value());
  const model_config sliding = parse(with(windowed, "max_window_layers", 20));
  CHECK(sliding.sliding_window == 4096);
  CHECK(sliding.attention_window(19) == 0);
  CHECK(sliding.attention_window(20) == 4096);
  CHECK(sliding.attention_window(27) == 4096);
  // Qwen3's attention_bias also puts a bias on o_proj, which troupe does not implement.
  CHECK_MODEL_ERROR(parse(with(qwen3, "attention_bias", true)),
                    "config.json: attention_bias true is not supported for model_type 'qwen3'");
  CHECK_MODEL_ERROR(parse(with(qwen3, "architectures", json::array{"Qwen2ForCausalLM"})),
                    "architectures[0] 'Qwen2ForCausalLM' does not match model_type 'qwen3'");
  CHECK_MODEL_ERROR(parse(with(qwen3, "head_dim", 127)), "config.json: head_dim 127 must be even for RoPE");
  CHECK_MODEL_ERROR(parse(with(qwen3, "rope_scaling", json::parse(R"({"rope_type": "yarn", "factor": 4.0})"))),
                    "config.json: rope_scaling.rope_type 'yarn' is not supported");
}

TEST_CASE("Mistral: sliding_window null is full attention, a window applies to every layer") {
  json::object c =
      with(with(llama_config(), "model_type", "mistral"), "architectures", json::array{"MistralForCausalLM"});
  c["sliding_window"] = nullptr;
  CHECK_FALSE(parse(c).sliding_window.has_value());
  CHECK(parse(c).attention_window(0) == 0);
  c["sliding_window"] = 4096;
  CHECK(parse(c).sliding_window == 4096);
  c["sliding_window"] = 1024; // Mistral-7B-v0.1's 4096 of 32768, smaller
  const model_config cfg = parse(c);
  CHECK(cfg.sliding_window == 1024);
  CHECK(cfg.sliding_layers == std::vector<bool>{true, true});
  CHECK(cfg.attention_window(0) == 1024);
  CHECK(cfg.attention_window(1) == 1024);
  // Mistral has no use_sliding_window or max_window_layers: they do nothing.
  CHECK(parse(with(with(c, "use_sliding_window", false), "max_window_layers", 1)).attention_window(0) == 1024);
  c["sliding_window"] = "4096";
  CHECK_MODEL_ERROR(parse(c), "config.json: sliding_window must be an integer, got \"4096\"");
  // Llama has no window: the field is not read.
  CHECK_FALSE(parse(with(llama_config(), "sliding_window", 1024)).sliding_window.has_value());
}

TEST_CASE("unsupported values are refused with the field and the value") {
  const json::object c = llama_config();
  CHECK_MODEL_ERROR(parse(with(c, "rope_scaling", json::parse(R"({"rope_type": "yarn", "factor": 4.0})"))),
                    "config.json: rope_scaling.rope_type 'yarn' is not supported (supported: linear, llama3)");
  CHECK_MODEL_ERROR(parse(with(c, "rope_scaling", json::parse(R"({"type": "dynamic", "factor": 2.0})"))),
                    "rope_scaling.type 'dynamic' is not supported");
  CHECK_MODEL_ERROR(parse(with(c, "rope_scaling", json::parse(R"({"factor": 2.0})"))),
                    "rope_scaling.rope_type is missing");
  CHECK_MODEL_ERROR(parse(with(c, "rope_scaling", json::parse(R"({"rope_type": "linear"})"))),
                    "rope_scaling.factor is missing");
  CHECK_MODEL_ERROR(parse(with(c, "rope_scaling", json::parse(R"({"rope_type": "linear", "factor": 0.5})"))),
                    "rope_scaling.factor 0.5 must be >= 1");
  CHECK_MODEL_ERROR(parse(with(c, "rope_scaling", json::parse(R"({"rope_type": "llama3", "factor": 8.0,
                          "high_freq_factor": 4.0, "original_max_position_embeddings": 8192})"))),
                    "rope_scaling.low_freq_factor is missing");
  CHECK_MODEL_ERROR(parse(with(c, "rope_scaling", "linear")), "rope_scaling must be an object or null, got \"linear\"");
  CHECK_MODEL_ERROR(parse(with(c, "hidden_act", "gelu")),
                    "config.json: hidden_act 'gelu' is not supported for model_type 'llama' (supported: silu)");
  CHECK_MODEL_ERROR(parse(with(c, "mlp_bias", true)), "config.json: mlp_bias true is not supported");
  CHECK(parse(with(c, "mlp_bias", false)).hidden_size == 256);
  CHECK_MODEL_ERROR(parse(with(c, "attention_bias", true)),
                    "attention_bias true is not supported for model_type 'llama'");
  CHECK_MODEL_ERROR(parse(with(c, "model_type", "gpt2")),
                    "config.json: model_type 'gpt2' is not supported (supported: llama, mistral, qwen2, qwen3, phi3, "
                    "gemma2, gemma3_text, mixtral, qwen2_moe, qwen3_moe)");
  CHECK_MODEL_ERROR(parse(with(c, "architectures", json::array{"LlamaForSequenceClassification"})),
                    "architectures[0] 'LlamaForSequenceClassification' is not supported");
  CHECK_MODEL_ERROR(parse(with(c, "architectures", json::array{"Qwen2ForCausalLM"})),
                    "architectures[0] 'Qwen2ForCausalLM' does not match model_type 'llama'");
  CHECK_MODEL_ERROR(parse(without(without(c, "architectures"), "model_type")), "model_type is missing");
  CHECK_MODEL_ERROR(parse(with(c, "torch_dtype", "float64")), "torch_dtype 'float64' is not supported");
}

TEST_CASE("missing and mistyped required fields") {
  const json::object c = llama_config();
  for (const char* field :
       {"hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size", "intermediate_size"}) {
    CAPTURE(field);
    CHECK_MODEL_ERROR(parse(without(c, field)), std::string("config.json: ") + field + " is missing");
    CHECK_MODEL_ERROR(parse(with(c, field, nullptr)), std::string(field) + " is missing");
  }
  CHECK_MODEL_ERROR(parse(with(c, "hidden_size", "64")), "config.json: hidden_size must be an integer, got \"64\"");
  CHECK_MODEL_ERROR(parse(with(c, "hidden_size", 64.5)), "hidden_size must be an integer, got 64.5");
  CHECK_MODEL_ERROR(parse(with(c, "num_hidden_layers", json::array{2})),
                    "num_hidden_layers must be an integer, got [2]");
  CHECK_MODEL_ERROR(parse(with(c, "rms_norm_eps", "small")), "rms_norm_eps must be a number, got \"small\"");
  CHECK_MODEL_ERROR(parse(with(c, "tie_word_embeddings", "yes")),
                    "tie_word_embeddings must be true or false, got \"yes\"");
  CHECK_MODEL_ERROR(parse(with(c, "hidden_act", 3)), "hidden_act must be a string, got 3");
  CHECK_MODEL_ERROR(parse(with(c, "architectures", "LlamaForCausalLM")), "architectures must be a list of strings");
}

TEST_CASE("sanity bounds") {
  const json::object c = llama_config();
  CHECK_MODEL_ERROR(parse(with(c, "hidden_size", 0)), "hidden_size 0 is out of range (1..1048576)");
  CHECK_MODEL_ERROR(parse(with(c, "vocab_size", -5)), "vocab_size -5 is out of range");
  CHECK_MODEL_ERROR(parse(with(c, "num_hidden_layers", 100000)), "num_hidden_layers 100000 is out of range");
  CHECK_MODEL_ERROR(parse(with(c, "hidden_size", 18446744073709551615ull)), "hidden_size must be an integer");
  CHECK_MODEL_ERROR(parse(with(c, "num_key_value_heads", 3)),
                    "num_key_value_heads 3 does not divide num_attention_heads 8");
  CHECK_MODEL_ERROR(parse(with(c, "num_key_value_heads", 16)), "num_key_value_heads 16 is out of range (1..8)");
  CHECK_MODEL_ERROR(parse(with(c, "hidden_size", 250)), "hidden_size 250 is not divisible by num_attention_heads 8");
  CHECK_MODEL_ERROR(parse(with(c, "head_dim", 31)), "head_dim 31 must be even");
  CHECK_MODEL_ERROR(parse(with(c, "rms_norm_eps", 0)), "rms_norm_eps 0 is out of range");
  CHECK_MODEL_ERROR(parse(with(c, "rope_theta", -1.0)), "rope_theta -1 must be positive");
  CHECK_MODEL_ERROR(parse(with(c, "rope_theta", 1e300)), "rope_theta 1e+300 must be positive and fit a float");
  // Checked as the floats the model computes with (found by tests/fuzz, model_config target):
  // each of these passes as a double, and is 0, equal or inf as a float.
  CHECK_MODEL_ERROR(parse(with(c, "rms_norm_eps", 1e-300)), "rms_norm_eps 1e-300 is out of range");
  CHECK_MODEL_ERROR(parse(with(c, "rope_scaling", json::parse(R"({"rope_type": "linear", "factor": 1e300})"))),
                    "rope_scaling.factor 1e+300 must be >= 1 and fit a float");
  const auto llama3 = [&](double low, double high) {
    return parse(with(c, "rope_scaling",
                      json::object{{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", low},
                                   {"high_freq_factor", high}, {"original_max_position_embeddings", 8192}}));
  };
  CHECK_MODEL_ERROR(llama3(1e-300, 4.0), "rope_scaling.low_freq_factor 1e-300 must be positive");
  CHECK_MODEL_ERROR(llama3(1.0, 1.00000000001), "rope_scaling.high_freq_factor 1.00000000001 must be greater");
  CHECK_MODEL_ERROR(llama3(1.0, 1e300), "rope_scaling.high_freq_factor 1e+300 must be greater");
  CHECK(llama3(1.0, 4.0).rope.high_freq_factor == 4.0f);
}

TEST_CASE("malformed files") {
  CHECK_MODEL_ERROR(parse_model_config("{\"hidden_size\": ", "my.json"), "my.json: not valid JSON");
  CHECK_MODEL_ERROR(parse_model_config("[1]"), "config.json: not a JSON object");
  CHECK_MODEL_ERROR(parse_model_config(""), "config.json: not valid JSON");
  temp_dir dir{"troupe_config"};
  CHECK_MODEL_ERROR(load_model_config(dir.path), "config.json: cannot open");
  fs::create_directory(dir.path / "config.json");
  CHECK_MODEL_ERROR(load_model_config(dir.path), "config.json: is a directory");
}

TEST_CASE("generation config: stories260k, and the default stop ids include BOS for it") {
  const generation_config gen = load_generation_config(stories_dir());
  REQUIRE(gen.bos_token_id.has_value());
  CHECK(*gen.bos_token_id == 1);
  CHECK(gen.eos_token_ids == std::vector<int32_t>{2});

  const model_config cfg = load_model_config(stories_dir());
  const std::optional<known_stop_rule> rule = find_known_stop_rule(gen, cfg);
  REQUIRE(rule.has_value());
  CHECK(rule->model.find("stories260K") != std::string_view::npos);
  CHECK(default_stop_token_ids(gen, cfg) == std::vector<int32_t>{2, 1});

  // The caller's explicit list wins, exactly (an empty list means no stop ids).
  const std::vector<int32_t> mine{7, 2, 7};
  CHECK(default_stop_token_ids(gen, cfg, std::span<const int32_t>(mine)) == std::vector<int32_t>{7, 2});
  CHECK(default_stop_token_ids(gen, cfg, std::span<const int32_t>()).empty());

  // A different model (same family, other shapes) gets only its eos ids.
  model_config other = cfg;
  other.hidden_size = 128;
  CHECK_FALSE(find_known_stop_rule(gen, other).has_value());
  CHECK(default_stop_token_ids(gen, other) == std::vector<int32_t>{2});
  // The same shapes with another bos id is not the llama2.c model either.
  generation_config other_bos = gen;
  other_bos.bos_token_id = 0;
  CHECK_FALSE(find_known_stop_rule(other_bos, cfg).has_value());
}

TEST_CASE("generation config: lists, nulls, fallback to config.json, errors") {
  const generation_config list =
      parse_generation_config(R"({"bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009, 128001]})");
  CHECK(list.bos_token_id == 128000);
  CHECK(list.eos_token_ids == std::vector<int32_t>{128001, 128008, 128009});
  const generation_config nulls =
      parse_generation_config(R"({"bos_token_id": null, "eos_token_id": null, "do_sample": true})");
  CHECK_FALSE(nulls.bos_token_id.has_value());
  CHECK(nulls.eos_token_ids.empty());
  CHECK_MODEL_ERROR(
      parse_generation_config(R"({"eos_token_id": "2"})"),
      "generation_config.json: eos_token_id must be a non-negative 32-bit integer, a list of them, or null, got \"2\"");
  CHECK_MODEL_ERROR(parse_generation_config(R"({"eos_token_id": [2, -1]})"), "eos_token_id must be");
  CHECK_MODEL_ERROR(parse_generation_config(R"({"bos_token_id": 1.5})"),
                    "bos_token_id must be a non-negative 32-bit integer");
  CHECK_MODEL_ERROR(parse_generation_config("nope"), "generation_config.json: not valid JSON");

  temp_dir dir{"troupe_config"};
  // Neither file: nothing known.
  CHECK(load_generation_config(dir.path).eos_token_ids.empty());
  // Only config.json: its ids are used.
  std::ofstream(dir.path / "config.json") << R"({"bos_token_id": 5, "eos_token_id": [6, 7]})";
  generation_config g = load_generation_config(dir.path);
  CHECK(g.bos_token_id == 5);
  CHECK(g.eos_token_ids == std::vector<int32_t>{6, 7});
  // generation_config.json wins field by field.
  std::ofstream(dir.path / "generation_config.json") << R"({"eos_token_id": 9})";
  g = load_generation_config(dir.path);
  CHECK(g.bos_token_id == 5);
  CHECK(g.eos_token_ids == std::vector<int32_t>{9});
  // A present but broken file is an error naming it.
  std::ofstream(dir.path / "generation_config.json") << "{";
  CHECK_MODEL_ERROR(load_generation_config(dir.path), "generation_config.json: not valid JSON");
}

TEST_CASE("a Phi-3 config: fused projections, its sliding window on every layer, longrope and partial rotary refused") {
  // Phi-3-mini-4k-instruct's config.json (the fields troupe reads, and a few it ignores).
  const json::object phi3 = json::parse(R"({
    "architectures": ["Phi3ForCausalLM"], "model_type": "phi3", "attention_dropout": 0.0, "bos_token_id": 1,
    "embd_pdrop": 0.0, "eos_token_id": 32000, "hidden_act": "silu", "hidden_size": 3072,
    "initializer_range": 0.02, "intermediate_size": 8192, "max_position_embeddings": 4096,
    "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 32,
    "original_max_position_embeddings": 4096, "pad_token_id": 32000, "resid_pdrop": 0.0, "rms_norm_eps": 1e-05,
    "rope_scaling": null, "rope_theta": 10000.0, "sliding_window": 2047, "tie_word_embeddings": false,
    "torch_dtype": "bfloat16", "use_cache": true, "vocab_size": 32064})")
                                .as_object();
  const model_config cfg = parse(phi3);
  CHECK(cfg.model_type == "phi3");
  CHECK(cfg.architecture == "Phi3ForCausalLM");
  CHECK(cfg.fused_projections);
  CHECK(cfg.head_dim == 96);
  CHECK_FALSE(cfg.attention_bias);
  CHECK(cfg.sliding_window == 2047);
  CHECK(cfg.every_layer_window() == 2047);
  CHECK(cfg.attention_window(31) == 2047);
  CHECK_FALSE(parse(llama_config()).fused_projections);
  CHECK(parse(without(phi3, "model_type")).fused_projections); // found by its architecture
  CHECK(parse(with(phi3, "sliding_window", nullptr)).attention_window(0) == 0);
  CHECK(parse(with(phi3, "partial_rotary_factor", 1.0)).model_type == "phi3");

  // Phi-3-mini-128k's longrope, Phi-4-mini's partial rotation and quantized fused layers are refused by name.
  CHECK_MODEL_ERROR(parse(with(phi3, "rope_scaling", json::parse(R"({"type": "longrope", "short_factor": [1.0],
                                                                      "long_factor": [1.0]})"))),
                    "config.json: rope_scaling.type 'longrope' is not supported");
  CHECK_MODEL_ERROR(parse(with(phi3, "partial_rotary_factor", 0.75)),
                    "config.json: partial_rotary_factor 0.75 is not supported (RoPE over the whole head only)");
  CHECK_MODEL_ERROR(parse(with(phi3, "quantization_config", json::parse(R"({"quant_method": "fp8", "fmt": "e4m3",
                                      "activation_scheme": "dynamic", "weight_block_size": [128, 128]})"))),
                    "config.json: quantization_config is not supported for model_type 'phi3'");
  CHECK_MODEL_ERROR(
      parse(with(phi3, "model_type", "phi")),
      "model_type 'phi' is not supported (supported: llama, mistral, qwen2, qwen3, phi3, gemma2, gemma3_text, "
      "mixtral, qwen2_moe, qwen3_moe)");
}

TEST_CASE("a Gemma 2 config: (1 + w) norms, GeGLU, sandwich norms, soft caps, every other layer sliding") {
  // google/gemma-2-9b's config.json (the fields troupe reads, and a few it ignores).
  const json::object gemma2 = json::parse(R"({
    "architectures": ["Gemma2ForCausalLM"], "model_type": "gemma2", "attention_bias": false,
    "attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0, "head_dim": 256,
    "hidden_act": "gelu_pytorch_tanh", "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 3584,
    "intermediate_size": 14336, "max_position_embeddings": 8192, "num_attention_heads": 16, "num_hidden_layers": 42,
    "num_key_value_heads": 8, "query_pre_attn_scalar": 256, "rms_norm_eps": 1e-06, "rope_theta": 10000.0,
    "sliding_window": 4096, "torch_dtype": "float32", "vocab_size": 256000, "cache_implementation": "hybrid"})")
                                  .as_object();
  const model_config cfg = parse(gemma2);
  CHECK(cfg.model_type == "gemma2");
  CHECK(cfg.architecture == "Gemma2ForCausalLM");
  CHECK(cfg.activation == mlp_activation::gelu_tanh);
  CHECK(cfg.norm_weight_offset == 1.0f);
  CHECK(cfg.embedding_multiplier == doctest::Approx(std::sqrt(3584.0)));
  CHECK(cfg.sandwich_norms);
  CHECK(cfg.tie_word_embeddings); // Gemma's default
  CHECK_FALSE(cfg.qk_norm);
  CHECK(cfg.attention_scale() == doctest::Approx(1.0 / 16.0));
  CHECK(cfg.attention_logit_softcap == 50.0f);
  CHECK(cfg.final_logit_softcap == 30.0f);
  CHECK_FALSE(cfg.sliding_rope_theta);
  // Layers 0, 2, 4, ... slide (transformers' layer_types default for Gemma 2).
  CHECK(cfg.attention_window(0) == 4096);
  CHECK(cfg.attention_window(1) == 0);
  CHECK(cfg.attention_window(40) == 4096);
  CHECK(cfg.attention_window(41) == 0);
  CHECK(cfg.every_layer_window() == 0);

  // The caps: absent is Gemma2Config's default, null is none; a query_pre_attn_scalar of its own.
  const model_config uncapped =
      parse(with(without(gemma2, "attn_logit_softcapping"), "final_logit_softcapping", nullptr));
  CHECK(uncapped.attention_logit_softcap == 50.0f);
  CHECK(uncapped.final_logit_softcap == 0.0f);
  CHECK(parse(with(gemma2, "query_pre_attn_scalar", 144)).attention_scale() == doctest::Approx(1.0 / 12.0));
  CHECK(parse(without(gemma2, "sliding_window")).attention_window(0) == 4096);
  CHECK_FALSE(parse(llama_config()).sandwich_norms);
  CHECK(parse(llama_config()).attention_scale() == doctest::Approx(1.0 / std::sqrt(32.0)));
  CHECK(parse(llama_config()).norm_weight_offset == 0.0f);
  CHECK(parse(llama_config()).activation == mlp_activation::silu);

  // Refusals name the field.
  CHECK_MODEL_ERROR(parse(with(gemma2, "hidden_activation", "gelu")),
                    "config.json: hidden_activation 'gelu' is not supported for model_type 'gemma2' (supported: "
                    "gelu_pytorch_tanh)");
  CHECK_MODEL_ERROR(parse(with(gemma2, "attn_logit_softcapping", -1.0)),
                    "config.json: attn_logit_softcapping -1 must be positive");
  CHECK_MODEL_ERROR(parse(with(gemma2, "final_logit_softcapping", "30")),
                    "config.json: final_logit_softcapping must be a number");
  CHECK_MODEL_ERROR(parse(with(gemma2, "query_pre_attn_scalar", 0)),
                    "config.json: query_pre_attn_scalar 0 must be positive");
  CHECK(parse(with(gemma2, "use_bidirectional_attention", nullptr)).sandwich_norms);
  CHECK_MODEL_ERROR(parse(with(gemma2, "use_bidirectional_attention", true)),
                    "config.json: use_bidirectional_attention true is not supported");
}

TEST_CASE("a Gemma 3 config: q/k norms, five sliding layers to a full one, a local RoPE base, v5's rope_parameters") {
  // google/gemma-3-1b-it's config.json (text-only Gemma 3).
  const json::object gemma3 = json::parse(R"({
    "architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text", "attention_bias": false,
    "attn_logit_softcapping": null, "final_logit_softcapping": null, "head_dim": 256,
    "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 1152, "intermediate_size": 6912,
    "max_position_embeddings": 32768, "num_attention_heads": 4, "num_hidden_layers": 26, "num_key_value_heads": 1,
    "query_pre_attn_scalar": 256, "rms_norm_eps": 1e-06, "rope_local_base_freq": 10000, "rope_scaling": null,
    "rope_theta": 1000000, "sliding_window": 512, "sliding_window_pattern": 6, "torch_dtype": "bfloat16",
    "vocab_size": 262144})")
                                  .as_object();
  const model_config cfg = parse(gemma3);
  CHECK(cfg.model_type == "gemma3_text");
  CHECK(cfg.qk_norm);
  CHECK(cfg.sandwich_norms);
  CHECK(cfg.attention_logit_softcap == 0.0f);
  CHECK(cfg.final_logit_softcap == 0.0f);
  CHECK(cfg.rope_theta == 1e6f);
  REQUIRE(cfg.sliding_rope_theta);
  CHECK(*cfg.sliding_rope_theta == 10000.0f);
  for (int l = 0; l < 26; ++l) {
    CAPTURE(l);
    CHECK(cfg.attention_window(l) == ((l + 1) % 6 == 0 ? 0 : 512));
    CHECK(cfg.uses_sliding_rope(l) == ((l + 1) % 6 != 0));
  }
  CHECK(parse(with(gemma3, "sliding_window_pattern", 2)).attention_window(1) == 0);

  // Gemma 3 4B-27B: linear scaling on the global layers only.
  const model_config scaled =
      parse(with(gemma3, "rope_scaling", json::parse(R"({"rope_type": "linear", "factor": 8.0})")));
  CHECK(scaled.rope.type == rope_scaling_type::linear);
  CHECK(scaled.rope.factor == 8.0f);
  CHECK(*scaled.sliding_rope_theta == 10000.0f);

  // transformers v5: layer_types and one rope_parameters entry per kind of layer.
  json::object v5 = without(without(without(without(gemma3, "rope_theta"), "rope_local_base_freq"), "rope_scaling"),
                            "sliding_window_pattern");
  v5["layer_types"] = json::parse(R"(["sliding_attention", "full_attention", "sliding_attention", "full_attention",
                                     "sliding_attention", "full_attention", "sliding_attention", "full_attention",
                                     "sliding_attention", "full_attention", "sliding_attention", "full_attention",
                                     "sliding_attention", "full_attention", "sliding_attention", "full_attention",
                                     "sliding_attention", "full_attention", "sliding_attention", "full_attention",
                                     "sliding_attention", "full_attention", "sliding_attention", "full_attention",
                                     "sliding_attention", "full_attention"])");
  v5["rope_parameters"] =
      json::parse(R"({"full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0},
                                          "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}})");
  const model_config from_v5 = parse(v5);
  CHECK(from_v5.rope_theta == 1e6f);
  CHECK(from_v5.rope.type == rope_scaling_type::linear);
  CHECK(*from_v5.sliding_rope_theta == 10000.0f);
  CHECK(from_v5.attention_window(0) == 512);
  CHECK(from_v5.attention_window(1) == 0);

  CHECK_MODEL_ERROR(parse(with(v5, "rope_parameters", json::parse(R"({"sliding_attention": {"rope_type": "linear",
                                                                      "factor": 2.0}})"))),
                    "config.json: rope_parameters.sliding_attention.rope_type is not supported on sliding layers");
  CHECK_MODEL_ERROR(parse(with(v5, "rope_parameters", json::parse(R"({"full_attention": {"rope_type": "yarn",
                                                                      "factor": 2.0}})"))),
                    "config.json: rope_parameters.full_attention.rope_type 'yarn' is not supported");
  CHECK_MODEL_ERROR(parse(with(v5, "rope_parameters", json::parse(R"({"chunked_attention": {}})"))),
                    "config.json: rope_parameters.chunked_attention is not a kind of layer");
  CHECK_MODEL_ERROR(parse(with(gemma3, "rope_local_base_freq", -1)),
                    "config.json: rope_local_base_freq -1 must be positive");
  // An image-text checkpoint without its language model's config.
  CHECK_MODEL_ERROR(
      parse(with(with(gemma3, "model_type", "gemma3"), "architectures", json::array{"Gemma3ForConditionalGeneration"})),
      "config.json: text_config must be the language model's config (an object) for model_type "
      "'gemma3', got none");
}

TEST_CASE("a Gemma 3 image-text config (gemma-3-4b-it's): text_config with Gemma3TextConfig's defaults filled in") {
  // google/gemma-3-4b-it's config.json: text_config leaves out what equals the defaults.
  const json::object image_text = json::parse(R"({
    "architectures": ["Gemma3ForConditionalGeneration"], "boi_token_index": 255999, "eoi_token_index": 256000,
    "eos_token_id": [1, 106], "image_token_index": 262144, "initializer_range": 0.02, "mm_tokens_per_image": 256,
    "model_type": "gemma3",
    "text_config": {"hidden_size": 2560, "intermediate_size": 10240, "model_type": "gemma3_text",
                    "num_hidden_layers": 34, "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
                    "sliding_window": 1024},
    "torch_dtype": "bfloat16", "transformers_version": "4.50.0.dev0",
    "vision_config": {"hidden_size": 1152, "image_size": 896, "intermediate_size": 4304, "model_type": "siglip_vision_model",
                      "num_attention_heads": 16, "num_hidden_layers": 27, "patch_size": 14, "vision_use_head": false}})")
                                      .as_object();
  const model_config cfg = parse(image_text);
  CHECK(cfg.image_text_checkpoint);
  CHECK(cfg.model_type == "gemma3_text");
  CHECK(cfg.architecture == "Gemma3ForConditionalGeneration");
  CHECK(cfg.hidden_size == 2560);
  CHECK(cfg.num_hidden_layers == 34);
  CHECK(cfg.num_attention_heads == 8);
  CHECK(cfg.num_key_value_heads == 4);
  CHECK(cfg.head_dim == 256);
  CHECK(cfg.vocab_size == 262208);
  CHECK(cfg.torch_dtype == weight_dtype::bf16); // the file's, inherited
  CHECK(cfg.tie_word_embeddings);
  CHECK(cfg.qk_norm);
  CHECK(cfg.rope.type == rope_scaling_type::linear);
  CHECK(cfg.rope_theta == 1e6f);
  CHECK(*cfg.sliding_rope_theta == 10000.0f);
  CHECK(cfg.attention_window(0) == 1024);
  CHECK(cfg.attention_window(5) == 0);
  CHECK(cfg.attention_scale() == doctest::Approx(1.0 / 16.0));
  CHECK_FALSE(parse(json::parse(R"({"model_type": "gemma3_text"})").as_object()).image_text_checkpoint);

  // Errors name the field inside text_config.
  json::object bad = image_text;
  bad["text_config"].as_object()["hidden_act"] = "silu";
  bad["text_config"].as_object()["hidden_activation"] = "silu";
  CHECK_MODEL_ERROR(parse(bad), "config.json: text_config.hidden_activation 'silu' is not supported");
  bad = image_text;
  bad["text_config"].as_object()["model_type"] = "gemma2";
  CHECK_MODEL_ERROR(parse(bad), "config.json: text_config.model_type \"gemma2\" is not supported");
  CHECK_MODEL_ERROR(parse(with(image_text, "text_config", 3)),
                    "config.json: text_config must be the language model's config (an object) for model_type "
                    "'gemma3', got 3");
}
