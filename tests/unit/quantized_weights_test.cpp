// Quantized checkpoints (FP8 compressed-tensors per-tensor and per-channel, HF FP8 block-wise,
// AWQ int4) load to exactly the test's own dequantization of what it wrote, whole and as
// tensor-parallel slices, every weight within its format's rounding of the fp32 one; the runner's
// logits over them are those of the reference weights (their distance from the fp32 model's is
// reported: the quantization's own error); every unsupported quantization_config and
// every malformed quantized tensor is refused naming the field or the tensor and its shapes.
#include "runtime/errors.hpp"
#include "runtime/fp8_quantization.hpp"
#include "runtime/model_config.hpp"
#include "runtime/model_weights.hpp"
#include "runtime/quantization_config.hpp"
#include "runtime/safetensors.hpp"
#include "runtime/step_batch_builder.hpp"
#include "runtime/weight_shard.hpp"

#include <doctest/doctest.h>

#include "tests/support/quantized_checkpoint.hpp"
#include "tests/support/temp_dir.hpp"

#include <cmath>
#include <functional>
#include <string>
#include <tuple>
#include <vector>

namespace {

namespace fs = std::filesystem;
namespace json = boost::json;
using namespace troupe::runtime;
using namespace troupe::testing;

const quant_format fp8_tensor{"fp8 per-tensor", quant_kind::fp8_tensor};
const quant_format fp8_channel{"fp8 per-channel", quant_kind::fp8_channel};
const quant_format fp8_block_128{"fp8 block 128x128", quant_kind::fp8_block, 128, 128};
const quant_format fp8_block_16x32{"fp8 block 16x32", quant_kind::fp8_block, 16, 32};
const quant_format awq_32{"awq group 32", quant_kind::awq, 0, 0, 32};
const quant_format awq_64{"awq group 64", quant_kind::awq, 0, 0, 64};
const quant_format all_formats[] = {fp8_tensor, fp8_channel, fp8_block_128, fp8_block_16x32, awq_32, awq_64};

model_weights load_folder(const fs::path& dir) {
  const model_config cfg = load_model_config(dir);
  const tensor_store store = tensor_store::open(dir);
  return load_model_weights(store, cfg);
}

std::vector<const std::vector<float>*> all_vectors(const model_weights& w) {
  std::vector<const std::vector<float>*> out{&w.embed_tokens, &w.final_norm, &w.lm_head};
  for (const layer_weights& l : w.layers)
    for (const std::vector<float>* v : {&l.input_norm, &l.q_proj, &l.k_proj, &l.v_proj, &l.q_bias, &l.k_bias, &l.v_bias,
                                        &l.o_proj, &l.post_attention_norm, &l.gate_proj, &l.up_proj, &l.down_proj})
      out.push_back(v);
  return out;
}

// Bit-for-bit equality, tensor by tensor (NaN-free weights: == is exact).
void check_equal(const model_weights& a, const model_weights& b) {
  const auto va = all_vectors(a), vb = all_vectors(b);
  REQUIRE(va.size() == vb.size());
  for (std::size_t i = 0; i < va.size(); ++i) {
    CAPTURE(i);
    CHECK(*va[i] == *vb[i]);
  }
}

// Logits of every position of a golden story (prompt and generated ids), [tokens, vocab].
std::vector<float> story_logits(const model_weights& weights) {
  const model_config& cfg = stories_model().config;
  const auto golden = read_json(stories_dir() / "golden_greedy.json");
  const auto& c = golden.at("cases").as_array().at(0);
  auto tokens = json_array<token_id>(c.at("prompt_ids"));
  const auto generated = json_array<token_id>(c.at("generated_ids"));
  tokens.insert(tokens.end(), generated.begin(), generated.end());
  const int block_size = 16, blocks = static_cast<int>(tokens.size()) / block_size + 1;
  cpu_model_runner runner(cfg, weights, kv_cache_config{blocks, block_size}, 1);
  std::vector<std::int32_t> table(static_cast<std::size_t>(blocks));
  for (int b = 0; b < blocks; ++b)
    table[static_cast<std::size_t>(b)] = b;
  step_batch_builder builder(block_size, blocks);
  builder.add(tokens, 0, table, false);
  auto batch = builder.take(0);
  for (std::size_t r = 0; r < tokens.size(); ++r)
    batch.logits_rows.push_back(static_cast<int>(r));
  std::vector<float> logits(tokens.size() * static_cast<std::size_t>(cfg.vocab_size));
  runner.execute(batch, logits);
  return logits;
}

// A copy of `stored` with `edit` applied to the tensor named `name` (nothing when it returns false: drop it).
std::vector<stored_tensor> edited(std::vector<stored_tensor> stored, const std::string& name,
                                  const std::function<bool(stored_tensor&)>& edit) {
  std::vector<stored_tensor> out;
  bool found = false;
  for (stored_tensor& t : stored) {
    if (t.name == name) {
      found = true;
      if (!edit(t))
        continue;
    }
    out.push_back(std::move(t));
  }
  REQUIRE_MESSAGE(found, name);
  return out;
}

// dir/config.json with one edit to its quantization_config.
void edit_quantization(const fs::path& dir, const std::function<void(json::object&)>& edit) {
  json::object cfg = read_json(dir / "config.json").as_object();
  edit(cfg["quantization_config"].as_object());
  std::ofstream(dir / "config.json", std::ios::trunc) << json::serialize(cfg);
}

model_config parse_with(const quant_format& f, const std::function<void(json::object&)>& edit) {
  json::object cfg = read_json(stories_dir() / "config.json").as_object();
  json::object q = quantization_json(f).as_object();
  edit(q);
  cfg["quantization_config"] = q;
  return parse_model_config(json::serialize(cfg), "config.json");
}

} // namespace

TEST_CASE("fp8_e4m3_to_f32 gives each of the 256 e4m3fn codes the value of its bit fields") {
  for (int code = 0; code < 256; ++code) {
    CAPTURE(code);
    const float expected = reference_e4m3(static_cast<std::uint8_t>(code));
    const float got = fp8_e4m3_to_f32(static_cast<std::uint8_t>(code));
    if (std::isnan(expected))
      CHECK(std::isnan(got));
    else
      CHECK(std::bit_cast<std::uint32_t>(got) == std::bit_cast<std::uint32_t>(expected)); // -0 too
  }
  CHECK(fp8_e4m3_to_f32(0x7e) == 448.0f);
  CHECK(fp8_e4m3_to_f32(0x01) == std::ldexp(1.0f, -9));
}

TEST_CASE("each quantized format loads to exactly the test's dequantization, and the runner computes its logits") {
  const std::vector<float> original = story_logits(stories_model().weights);
  float largest = 0;
  for (const float x : original)
    largest = std::max(largest, std::fabs(x));
  for (const quant_format& f : all_formats) {
    CAPTURE(f.label);
    temp_dir dir("troupe_quantized");
    const quantized_reference ref = write_quantized_stories(dir.path, f);
    CHECK(ref.worst_error_ratio <= 1.0); // every weight within its format's bound
    const model_config cfg = load_model_config(dir.path);
    REQUIRE(cfg.quantization.has_value());
    const model_weights loaded = load_folder(dir.path);
    check_equal(loaded, ref.weights);

    const std::vector<float> logits = story_logits(loaded);
    CHECK(logits == story_logits(ref.weights));
    // The quantization's own error, reported: a worst-case bound on the logits (each of a layer's
    // 7 projections moving its output by eps, adding up over the layers) exceeds the largest logit
    // here, so it would check nothing; the per-weight bound above is the one checked.
    const float diff = max_abs_diff(logits, original);
    MESSAGE(f.label << ": largest logit difference from the fp32 model " << diff << " (largest logit " << largest
                    << ")");
    CHECK(diff > 0.0f); // the weights really were quantized
  }
}

TEST_CASE("layers named in compressed-tensors' ignore stay as stored, by name or by re: pattern") {
  temp_dir dir("troupe_quantized_ignore");
  quantized_reference ref = write_quantized_stories(dir.path, fp8_channel);
  // Layer 0's attention and layer 1's q_proj stored as the original fp32 weights, their scales gone.
  const model_weights& original = stories_model().weights;
  std::vector<stored_tensor> stored;
  for (stored_tensor& t : ref.stored) {
    const bool layer0_attention = t.name.starts_with("model.layers.0.self_attn.");
    const bool layer1_q = t.name.starts_with("model.layers.1.self_attn.q_proj.");
    if ((layer0_attention || layer1_q) && !t.name.ends_with(".weight"))
      continue;
    if (layer0_attention || layer1_q) {
      const std::string projection = t.name.substr(t.name.find("self_attn.") + 10, 6); // "q_proj" ...
      const layer_weights& l = original.layers[layer0_attention ? 0 : 1];
      const std::vector<float>& w = projection == "q_proj"   ? l.q_proj
                                    : projection == "k_proj" ? l.k_proj
                                    : projection == "v_proj" ? l.v_proj
                                                             : l.o_proj;
      t = stored_tensor{t.name, weight_dtype::f32, t.shape, bytes_of(w)};
    }
    stored.push_back(std::move(t));
  }
  write_tensors(dir.path / "model.safetensors", stored);
  edit_quantization(dir.path, [](json::object& q) {
    q["ignore"] = json::array{"lm_head", "re:model\\.layers\\.0\\.self_attn\\.", "model.layers.1.self_attn.q_proj"};
  });
  for (const int i : {0, 1}) {
    layer_weights& l = ref.weights.layers[static_cast<std::size_t>(i)];
    l.q_proj = original.layers[static_cast<std::size_t>(i)].q_proj;
    if (i == 0) {
      l.k_proj = original.layers[0].k_proj;
      l.v_proj = original.layers[0].v_proj;
      l.o_proj = original.layers[0].o_proj;
    }
  }
  check_equal(load_folder(dir.path), ref.weights);
}

TEST_CASE("to_string names the scheme for the engine's log") {
  CHECK(to_string(*parse_with(fp8_channel, [](json::object&) {}).quantization) ==
        "fp8 (compressed-tensors, per-channel)");
  CHECK(to_string(*parse_with(fp8_tensor, [](json::object&) {}).quantization) ==
        "fp8 (compressed-tensors, per-tensor)");
  CHECK(to_string(*parse_with(fp8_block_16x32, [](json::object&) {}).quantization) == "fp8 (block-wise 16x32)");
  CHECK(to_string(*parse_with(awq_32, [](json::object&) {}).quantization) == "awq int4 (gemm, group 32)");
  CHECK_FALSE(parse_model_config(json::serialize(read_json(stories_dir() / "config.json")), "config.json")
                  .quantization.has_value());
  json::object plain = read_json(stories_dir() / "config.json").as_object();
  plain["quantization_config"] = nullptr; // null: not quantized, as HF reads it
  CHECK_FALSE(parse_model_config(json::serialize(plain), "config.json").quantization.has_value());
}

TEST_CASE("a tensor-parallel rank dequantizes only its slices, equal to the reference's shard") {
  const model_config& stories = stories_model().config;
  for (const quant_format& f : {fp8_tensor, fp8_channel, fp8_block_16x32, fp8_block_128, awq_32}) {
    CAPTURE(f.label);
    temp_dir dir("troupe_quantized_tp");
    const quantized_reference ref = write_quantized_stories(dir.path, f);
    const model_config cfg = load_model_config(dir.path);
    const tensor_store store = tensor_store::open(dir.path);
    for (const int ranks : {2, 4}) {
      CAPTURE(ranks);
      if (f.kind == quant_kind::awq && ranks == 4)
        continue; // 16 input columns of o_proj per rank: not whole groups of 32 (refused below)
      for (const shard_shape& shape : shard_shapes(stories, ranks)) {
        CAPTURE(shape.rank);
        check_equal(load_model_weight_shard(store, cfg, shape), shard_weights(ref.weights, stories, shape));
      }
    }
  }
  SUBCASE("AWQ row-parallel slices must cut whole groups") {
    temp_dir dir("troupe_quantized_tp");
    write_quantized_stories(dir.path, awq_64);
    const model_config cfg = load_model_config(dir.path);
    const tensor_store store = tensor_store::open(dir.path);
    CHECK_THROWS_WITH_AS(load_model_weight_shard(store, cfg, shard_shapes(stories, 2)[0]),
                         doctest::Contains("model.layers.0.self_attn.o_proj [64, 64]: this tensor-parallel rank's "
                                           "input columns [0, 32) do not start and end on AWQ groups of 64"),
                         model_error);
    temp_dir dir32("troupe_quantized_tp");
    write_quantized_stories(dir32.path, awq_32);
    const model_config cfg32 = load_model_config(dir32.path);
    const tensor_store store32 = tensor_store::open(dir32.path);
    CHECK_THROWS_WITH_AS(load_model_weight_shard(store32, cfg32, shard_shapes(stories, 4)[1]),
                         doctest::Contains("input columns [16, 32) do not start and end on AWQ groups of 32"),
                         model_error);
  }
}

TEST_CASE("an FP8 checkpoint's scales come with its linear layers, whole and per rank: value / scale is the code") {
  const model_config& stories = stories_model().config;
  const std::size_t hidden = static_cast<std::size_t>(stories.hidden_size);
  for (const quant_format& f : {fp8_tensor, fp8_channel, fp8_block_16x32, fp8_block_128, awq_32}) {
    CAPTURE(f.label);
    temp_dir dir("troupe_quantized_scales");
    write_quantized_stories(dir.path, f);
    const model_config cfg = load_model_config(dir.path);
    const tensor_store store = tensor_store::open(dir.path);
    for (const int ranks : {1, 2, 4}) {
      CAPTURE(ranks);
      for (const shard_shape& shape : shard_shapes(stories, ranks)) {
        if (f.kind == quant_kind::awq && ranks > 1)
          continue;
        const model_weights w = load_model_weight_shard(store, cfg, shape);
        for (const layer_weights& l : w.layers) {
          const std::tuple<const std::vector<float>*, const fp8_scales*, std::size_t> linears[] = {
              {&l.q_proj, &l.q_proj_fp8, hidden},
              {&l.k_proj, &l.k_proj_fp8, hidden},
              {&l.v_proj, &l.v_proj_fp8, hidden},
              {&l.o_proj, &l.o_proj_fp8, l.o_proj.size() / hidden},
              {&l.gate_proj, &l.gate_proj_fp8, hidden},
              {&l.up_proj, &l.up_proj_fp8, hidden},
              {&l.down_proj, &l.down_proj_fp8, l.down_proj.size() / hidden}};
          for (const auto& [values, scales, columns] : linears) {
            if (f.kind == quant_kind::awq) { // AWQ is not FP8: no scales
              CHECK(scales->empty());
              continue;
            }
            REQUIRE_FALSE(scales->empty());
            CHECK(columns % scales->group == 0);
            if (f.kind != quant_kind::fp8_block)
              CHECK(scales->group == columns);
            const std::vector<std::uint8_t> codes = fp8_codes(*values, columns, *scales);
            std::size_t differ = 0;
            for (std::size_t i = 0; i < values->size(); ++i) {
              const std::size_t r = i / columns, g = (i % columns) / scales->group;
              differ += fp8_e4m3_to_f32(codes[i]) * scales->values[r * (columns / scales->group) + g] != (*values)[i];
            }
            CHECK(differ == 0);
          }
        }
      }
    }
  }
}

TEST_CASE("a quantization_config troupe cannot read is refused, naming the field, the value and what is accepted") {
  struct refusal {
    const char* what;
    const quant_format* format;
    std::function<void(json::object&)> edit;
    const char* message;
  };
  const refusal refusals[] = {
      {"another method", &awq_32, [](json::object& q) { q["quant_method"] = "gptq"; },
       "config.json: quantization_config.quant_method 'gptq' is not supported (accepted: compressed-tensors, fp8, "
       "awq)"},
      {"awq 8 bits", &awq_32, [](json::object& q) { q["bits"] = 8; },
       "quantization_config.bits 8 is not supported (accepted: 4)"},
      {"awq group 16", &awq_32, [](json::object& q) { q["group_size"] = 16; },
       "quantization_config.group_size 16 is not supported (accepted: 128, 64, 32)"},
      {"awq gemv", &awq_32, [](json::object& q) { q["version"] = "gemv"; },
       "quantization_config.version 'gemv' is not supported (accepted: gemm)"},
      {"awq marlin", &awq_32, [](json::object& q) { q["version"] = "marlin"; }, "version 'marlin' is not supported"},
      {"awq exllama", &awq_32, [](json::object& q) { q["version"] = "exllama"; }, "version 'exllama' is not supported"},
      {"awq without zero point", &awq_32, [](json::object& q) { q["zero_point"] = false; },
       "quantization_config.zero_point false is not supported (accepted: true)"},
      {"awq without bits", &awq_32, [](json::object& q) { q.erase("bits"); }, "quantization_config.bits is missing"},
      {"ct 4 bits", &fp8_channel,
       [](json::object& q) { q["config_groups"].at("group_0").at("weights").as_object()["num_bits"] = 4; },
       "quantization_config.config_groups.group_0.weights.num_bits 4 is not supported (accepted: 8)"},
      {"ct int weights", &fp8_channel,
       [](json::object& q) { q["config_groups"].at("group_0").at("weights").as_object()["type"] = "int"; },
       "weights.type 'int' is not supported (accepted: float)"},
      {"ct group strategy", &fp8_channel,
       [](json::object& q) { q["config_groups"].at("group_0").at("weights").as_object()["strategy"] = "group"; },
       "weights.strategy 'group' is not supported (accepted: tensor, channel)"},
      {"ct block strategy", &fp8_channel,
       [](json::object& q) { q["config_groups"].at("group_0").at("weights").as_object()["strategy"] = "block"; },
       "weights.strategy 'block' is not supported"},
      {"ct asymmetric", &fp8_channel,
       [](json::object& q) { q["config_groups"].at("group_0").at("weights").as_object()["symmetric"] = false; },
       "weights.symmetric false is not supported (accepted: true)"},
      {"ct dynamic weights", &fp8_channel,
       [](json::object& q) { q["config_groups"].at("group_0").at("weights").as_object()["dynamic"] = true; },
       "weights.dynamic true is not supported (accepted: false)"},
      {"ct weight group size", &fp8_channel,
       [](json::object& q) { q["config_groups"].at("group_0").at("weights").as_object()["group_size"] = 128; },
       "weights.group_size 128 is not supported"},
      {"ct activations per group", &fp8_channel,
       [](json::object& q) {
         q["config_groups"].at("group_0").at("input_activations").as_object()["strategy"] = "group";
       },
       "input_activations.strategy 'group' is not supported (accepted: tensor, token)"},
      {"ct two groups", &fp8_channel,
       [](json::object& q) { q["config_groups"].as_object()["group_1"] = q["config_groups"].at("group_0"); },
       "quantization_config.config_groups must hold exactly one group"},
      {"ct attention targets", &fp8_channel,
       [](json::object& q) { q["config_groups"].at("group_0").as_object()["targets"] = json::array{"Attention"}; },
       "targets [\"Attention\"] is not supported (accepted: [\"Linear\"])"},
      {"ct packed format", &fp8_channel, [](json::object& q) { q["format"] = "pack-quantized"; },
       "quantization_config.format 'pack-quantized' is not supported (accepted: float-quantized, naive-quantized)"},
      {"ct kv cache scheme", &fp8_channel,
       [](json::object& q) {
         q["kv_cache_scheme"] = json::object{{"num_bits", 8}};
       },
       "quantization_config.kv_cache_scheme {\"num_bits\":8} is not supported"},
      {"ct sparsity", &fp8_channel,
       [](json::object& q) {
         q["sparsity_config"] = json::object{{"format", "dense"}};
       },
       "quantization_config.sparsity_config {\"format\":\"dense\"} is not supported (accepted: null or {})"},
      {"ct unknown key", &fp8_channel, [](json::object& q) { q["mystery"] = 1; },
       "quantization_config.mystery 1 is not supported"},
      {"ct bad regex", &fp8_channel, [](json::object& q) { q["ignore"] = json::array{"re:("}; },
       "quantization_config.ignore entry 're:(' is not a valid regular expression"},
      {"fp8 e5m2", &fp8_block_128, [](json::object& q) { q["fmt"] = "e5m2"; },
       "quantization_config.fmt 'e5m2' is not supported (accepted: e4m3)"},
      {"fp8 activation scheme", &fp8_block_128, [](json::object& q) { q["activation_scheme"] = "sometimes"; },
       "quantization_config.activation_scheme 'sometimes' is not supported (accepted: dynamic, static)"},
      {"fp8 one-number block", &fp8_block_128, [](json::object& q) { q["weight_block_size"] = json::array{128}; },
       "quantization_config.weight_block_size [128] is not supported (accepted: [rows, columns] of positive integers)"},
      {"fp8 zero block", &fp8_block_128,
       [](json::object& q) {
         q["weight_block_size"] = json::array{0, 128};
       },
       "quantization_config.weight_block_size [0,128] is not supported"},
  };
  for (const refusal& r : refusals) {
    CAPTURE(r.what);
    CHECK_THROWS_WITH_AS(parse_with(*r.format, r.edit), doctest::Contains(r.message), model_error);
  }
  json::object cfg = read_json(stories_dir() / "config.json").as_object();
  cfg["quantization_config"] = "fp8";
  CHECK_THROWS_WITH_AS(parse_model_config(json::serialize(cfg), "config.json"),
                       doctest::Contains("config.json: quantization_config must be an object or null, got \"fp8\""),
                       model_error);

  // Accepted as well: naive-quantized, case-insensitive GEMM, harmless bookkeeping, null fields.
  CHECK_NOTHROW(parse_with(fp8_tensor, [](json::object& q) {
    q["format"] = "naive-quantized";
    q["global_compression_ratio"] = 1.5;
    q["config_groups"].at("group_0").as_object()["input_activations"] = nullptr;
    q["config_groups"].at("group_0").as_object()["output_activations"] = nullptr;
  }));
  CHECK_NOTHROW(parse_with(awq_32, [](json::object& q) {
    q["version"] = "gemm";
    q["modules_to_not_convert"] = nullptr;
  }));
  CHECK(parse_with(fp8_block_16x32, [](json::object& q) {
          q["activation_scheme"] = "static";
        }).quantization->activations == "static");
  CHECK(parse_with(fp8_channel, [](json::object&) {}).quantization->activations == "dynamic per-token");
}

TEST_CASE("malformed quantized tensors are refused, naming the tensor and the shapes") {
  const std::string q_proj = "model.layers.0.self_attn.q_proj";
  const auto rewrite = [](const fs::path& dir, const std::vector<stored_tensor>& tensors) {
    write_tensors(dir / "model.safetensors", tensors);
  };
  const auto reshape = [](std::vector<std::int64_t> shape) {
    return [shape](stored_tensor& t) {
      t.shape = shape;
      return true;
    };
  };
  const auto drop = [](stored_tensor&) { return false; };

  SUBCASE("fp8") {
    temp_dir dir("troupe_quantized_bad");
    const quantized_reference channel = write_quantized_stories(dir.path, fp8_channel);
    rewrite(dir.path, edited(channel.stored, q_proj + ".weight_scale", reshape({64})));
    CHECK_THROWS_WITH_AS(load_folder(dir.path),
                         doctest::Contains("tensor 'model.layers.0.self_attn.q_proj.weight_scale' has shape [64], "
                                           "expected [64, 1] (per-channel scales of "
                                           "model.layers.0.self_attn.q_proj [64, 64])"),
                         model_error);
    rewrite(dir.path, edited(channel.stored, q_proj + ".weight_scale", drop));
    CHECK_THROWS_WITH_AS(load_folder(dir.path),
                         doctest::Contains("tensor 'model.layers.0.self_attn.q_proj.weight_scale' is missing "
                                           "(quantization_config fp8 (compressed-tensors, per-channel) needs it)"),
                         model_error);
    rewrite(dir.path, edited(channel.stored, q_proj + ".weight", [](stored_tensor& t) {
              t.dtype = weight_dtype::f32;
              t.shape = {16, 64}; // the same bytes as F32
              return true;
            }));
    CHECK_THROWS_WITH_AS(load_folder(dir.path),
                         doctest::Contains("tensor 'model.layers.0.self_attn.q_proj.weight' has dtype F32, expected "
                                           "F8_E4M3"),
                         model_error);
    rewrite(dir.path, edited(channel.stored, q_proj + ".weight", reshape({32, 128})));
    CHECK_THROWS_WITH_AS(load_folder(dir.path),
                         doctest::Contains("tensor 'model.layers.0.self_attn.q_proj.weight' has shape [32, 128], "
                                           "expected [64, 64]"),
                         model_error);

    temp_dir tensor_dir("troupe_quantized_bad");
    const quantized_reference tensor = write_quantized_stories(tensor_dir.path, fp8_tensor);
    rewrite(tensor_dir.path, edited(tensor.stored, q_proj + ".weight_scale", [](stored_tensor& t) {
              t.shape = {2};
              t.bytes.resize(8);
              return true;
            }));
    CHECK_THROWS_WITH_AS(load_folder(tensor_dir.path),
                         doctest::Contains("tensor 'model.layers.0.self_attn.q_proj.weight_scale' has shape [2], "
                                           "expected [] or [1] (per-tensor scale of "
                                           "model.layers.0.self_attn.q_proj [64, 64])"),
                         model_error);
    // A layer the config leaves unquantized must hold a float weight.
    rewrite(tensor_dir.path, tensor.stored);
    edit_quantization(tensor_dir.path, [&](json::object& q) { q["ignore"] = json::array{"lm_head", q_proj}; });
    CHECK_THROWS_WITH_AS(load_folder(tensor_dir.path),
                         doctest::Contains("tensor 'model.layers.0.self_attn.q_proj.weight' has dtype F8_E4M3, "
                                           "expected F32, F16 or BF16 (quantization_config fp8 (compressed-tensors, "
                                           "per-tensor) does not quantize it)"),
                         model_error);
    edit_quantization(tensor_dir.path,
                      [](json::object& q) { q["ignore"] = json::array{"re:model\\.layers\\.[0-9]+\\.mlp"}; });
    CHECK_THROWS_WITH_AS(load_folder(tensor_dir.path),
                         doctest::Contains("tensor 'model.layers.0.mlp.gate_proj.weight' has dtype F8_E4M3"),
                         model_error);

    temp_dir block_dir("troupe_quantized_bad");
    const quantized_reference block = write_quantized_stories(block_dir.path, fp8_block_16x32);
    rewrite(block_dir.path, edited(block.stored, "model.layers.0.mlp.down_proj.weight_scale_inv", [](stored_tensor& t) {
              t.shape = {4, 5};
              t.bytes.resize(4 * 5 * 4);
              return true;
            }));
    CHECK_THROWS_WITH_AS(load_folder(block_dir.path),
                         doctest::Contains("tensor 'model.layers.0.mlp.down_proj.weight_scale_inv' has shape [4, 5], "
                                           "expected [4, 6] (one scale per 16x32 block of "
                                           "model.layers.0.mlp.down_proj [64, 172])"),
                         model_error);
  }

  SUBCASE("awq") {
    temp_dir dir("troupe_quantized_bad");
    const quantized_reference awq = write_quantized_stories(dir.path, awq_32);
    rewrite(dir.path, edited(awq.stored, q_proj + ".qweight", reshape({32, 16})));
    CHECK_THROWS_WITH_AS(load_folder(dir.path),
                         doctest::Contains("tensor 'model.layers.0.self_attn.q_proj.qweight' has shape [32, 16], "
                                           "expected [64, 8] ([in_features, out_features / 8] of "
                                           "model.layers.0.self_attn.q_proj [64, 64])"),
                         model_error);
    rewrite(dir.path, edited(awq.stored, q_proj + ".qzeros", reshape({1, 16})));
    CHECK_THROWS_WITH_AS(load_folder(dir.path),
                         doctest::Contains("tensor 'model.layers.0.self_attn.q_proj.qzeros' has shape [1, 16], "
                                           "expected [2, 8]"),
                         model_error);
    rewrite(dir.path, edited(awq.stored, q_proj + ".scales", reshape({1, 128})));
    CHECK_THROWS_WITH_AS(load_folder(dir.path),
                         doctest::Contains("tensor 'model.layers.0.self_attn.q_proj.scales' has shape [1, 128], "
                                           "expected [2, 64]"),
                         model_error);
    rewrite(dir.path, edited(awq.stored, q_proj + ".scales", drop));
    CHECK_THROWS_WITH_AS(load_folder(dir.path),
                         doctest::Contains("tensor 'model.layers.0.self_attn.q_proj.scales' is missing"), model_error);
    rewrite(dir.path, edited(awq.stored, q_proj + ".qzeros", [](stored_tensor& t) {
              t.dtype = weight_dtype::f32;
              return true;
            }));
    CHECK_THROWS_WITH_AS(
        load_folder(dir.path),
        doctest::Contains("tensor 'model.layers.0.self_attn.q_proj.qzeros' has dtype F32, expected I32"), model_error);
    // A stray unquantized weight beside the packed one: config.json and the file disagree.
    std::vector<stored_tensor> stray = awq.stored;
    stray.push_back({q_proj + ".weight", weight_dtype::f32, {64, 64}, std::vector<std::byte>(64 * 64 * 4)});
    rewrite(dir.path, stray);
    CHECK_THROWS_WITH_AS(load_folder(dir.path),
                         doctest::Contains("tensor 'model.layers.0.self_attn.q_proj.weight' is not used"), model_error);

    // A truncated qweight: the header promises more bytes than the file holds.
    std::vector<stored_tensor> last = edited(awq.stored, q_proj + ".qweight", drop);
    last.push_back(*std::find_if(awq.stored.begin(), awq.stored.end(),
                                 [&](const stored_tensor& t) { return t.name == q_proj + ".qweight"; }));
    rewrite(dir.path, last);
    fs::resize_file(dir.path / "model.safetensors", fs::file_size(dir.path / "model.safetensors") - 4);
    CHECK_THROWS_WITH_AS(load_folder(dir.path),
                         doctest::Contains("tensor 'model.layers.0.self_attn.q_proj.qweight' data_offsets"),
                         model_error);

    // stories' MLP does not fit AWQ: 172 output columns are not whole int32s, 172 inputs not whole groups.
    rewrite(dir.path, awq.stored);
    edit_quantization(dir.path, [](json::object& q) { q["modules_to_not_convert"] = nullptr; });
    CHECK_THROWS_WITH_AS(load_folder(dir.path),
                         doctest::Contains("model.layers.0.mlp.gate_proj [172, 64]: out_features 172 is not divisible "
                                           "by 8 (AWQ packs 8 output columns per int32)"),
                         model_error);
    temp_dir dir64("troupe_quantized_bad");
    write_quantized_stories(dir64.path, awq_64);
    edit_quantization(dir64.path, [](json::object& q) {
      q["modules_to_not_convert"] = json::array{"gate_proj", "up_proj"};
    });
    CHECK_THROWS_WITH_AS(load_folder(dir64.path),
                         doctest::Contains("model.layers.0.mlp.down_proj [64, 172]: in_features 172 is not divisible "
                                           "by group_size 64"),
                         model_error);
  }
}
