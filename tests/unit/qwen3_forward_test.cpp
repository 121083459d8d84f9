// A tiny random Qwen3 written by the test as safetensors + config.json (head_dim 32, not
// hidden / heads; tied embeddings; the q/k norm weights stored as BF16 and F16), loaded through
// load_model_config / load_model_weights and run by the CPU runner: its logits equal a plain-loop
// forward pass written here (per-head q/k RMSNorm before RoPE), at 1 and 2 tensor-parallel ranks;
// changing a norm weight changes the logits; the loader refuses a missing or stray norm tensor.
#include <doctest/doctest.h>

#include <boost/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "runtime/collective.hpp"
#include "runtime/cpu/cpu_model_runner.hpp"
#include "runtime/cpu/shared_memory_collective.hpp"
#include "runtime/dummy_weights.hpp"
#include "runtime/model_config.hpp"
#include "runtime/model_weights.hpp"
#include "runtime/safetensors.hpp"
#include "runtime/shard_shape.hpp"
#include "runtime/step_batch_builder.hpp"
#include "runtime/weight_shard.hpp"
#include "tests/support/float_compare.hpp"
#include "tests/support/model_error_check.hpp"
#include "tests/support/sharded_logits.hpp"
#include "tests/support/temp_dir.hpp"

namespace {

namespace fs = std::filesystem;
namespace json = boost::json;
using namespace troupe;
using namespace troupe::runtime;
using namespace troupe::testing;

constexpr int hidden = 64, heads = 4, kv_heads = 2, head_dim = 32, layers = 2, vocab = 300, inter = 96;
constexpr double eps = 1e-6, theta = 1000000.0;

json::object qwen3_config_json() {
  return json::parse(R"({
    "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 64,
    "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
    "head_dim": 32, "vocab_size": 300, "max_position_embeddings": 512, "rms_norm_eps": 1e-06,
    "rope_theta": 1000000.0, "rope_scaling": null, "attention_bias": false, "tie_word_embeddings": true,
    "use_sliding_window": false, "sliding_window": null, "max_window_layers": 2, "hidden_act": "silu",
    "torch_dtype": "float32"})")
      .as_object();
}

// One stored tensor: its values as the model computes with them (after the dtype's rounding).
struct tensor {
  std::string name;
  weight_dtype dtype = weight_dtype::f32;
  std::vector<std::int64_t> shape;
  std::vector<float> values;
};

// The checkpoint, by name, as the naive forward pass reads it.
struct checkpoint {
  std::vector<tensor> tensors;
  const std::vector<float>& operator[](const std::string& name) const {
    for (const tensor& t : tensors)
      if (t.name == name)
        return t.values;
    FAIL("no tensor " << name);
    static const std::vector<float> none;
    return none;
  }
};

checkpoint random_qwen3(unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  checkpoint c;
  auto add = [&](std::string name, std::vector<std::int64_t> shape, float scale, float offset,
                 weight_dtype dtype = weight_dtype::f32) {
    std::size_t n = 1;
    for (auto d : shape)
      n *= static_cast<std::size_t>(d);
    std::vector<float> v(n);
    for (float& x : v) {
      x = offset + scale * normal(rng);
      if (dtype == weight_dtype::bf16)
        x = bf16_to_f32(f32_to_bf16(x));
      else if (dtype == weight_dtype::f16)
        x = f16_to_f32(f32_to_f16(x));
    }
    c.tensors.push_back({std::move(name), dtype, std::move(shape), std::move(v)});
  };
  add("model.embed_tokens.weight", {vocab, hidden}, 1.0f, 0.0f);
  add("model.norm.weight", {hidden}, 0.2f, 1.0f);
  for (int l = 0; l < layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    add(p + "input_layernorm.weight", {hidden}, 0.2f, 1.0f);
    add(p + "self_attn.q_proj.weight", {heads * head_dim, hidden}, 0.15f, 0.0f);
    add(p + "self_attn.k_proj.weight", {kv_heads * head_dim, hidden}, 0.15f, 0.0f);
    add(p + "self_attn.v_proj.weight", {kv_heads * head_dim, hidden}, 0.15f, 0.0f);
    // Norm weights far enough from 1 that leaving them out (or the norm) shows in the logits.
    add(p + "self_attn.q_norm.weight", {head_dim}, 0.5f, 1.0f, weight_dtype::bf16);
    add(p + "self_attn.k_norm.weight", {head_dim}, 0.5f, 1.0f, weight_dtype::f16);
    add(p + "self_attn.o_proj.weight", {hidden, heads * head_dim}, 0.1f, 0.0f);
    add(p + "post_attention_layernorm.weight", {hidden}, 0.2f, 1.0f);
    add(p + "mlp.gate_proj.weight", {inter, hidden}, 0.15f, 0.0f);
    add(p + "mlp.up_proj.weight", {inter, hidden}, 0.15f, 0.0f);
    add(p + "mlp.down_proj.weight", {hidden, inter}, 0.1f, 0.0f);
  }
  return c;
}

// Writes config.json and model.safetensors, each tensor in its dtype; `skip` is left out.
void write_checkpoint(const fs::path& dir, const checkpoint& c, const json::object& config,
                      const std::string& skip = {}) {
  std::ofstream(dir / "config.json") << json::serialize(config);
  std::vector<std::vector<std::byte>> bytes;
  std::vector<tensor_view> views;
  bytes.reserve(c.tensors.size());
  for (const tensor& t : c.tensors) {
    if (t.name == skip)
      continue;
    std::vector<std::byte> b;
    if (t.dtype == weight_dtype::f32) {
      b.resize(t.values.size() * 4);
      std::memcpy(b.data(), t.values.data(), b.size());
    } else {
      b.resize(t.values.size() * 2);
      for (std::size_t i = 0; i < t.values.size(); ++i) {
        const std::uint16_t h = t.dtype == weight_dtype::bf16 ? f32_to_bf16(t.values[i]) : f32_to_f16(t.values[i]);
        std::memcpy(b.data() + 2 * i, &h, 2);
      }
    }
    bytes.push_back(std::move(b));
    views.push_back({t.name, t.dtype, t.shape, bytes.back()});
  }
  write_safetensors(dir / "model.safetensors", views);
}

// --- the naive forward pass: one sequence, every position's logits, in double -----------------

using vec = std::vector<double>;

vec rms_norm(const vec& x, const std::vector<float>& w) {
  double sum_sq = 0;
  for (double v : x)
    sum_sq += v * v;
  const double inv = 1.0 / std::sqrt(sum_sq / static_cast<double>(x.size()) + eps);
  vec out(x.size());
  for (std::size_t i = 0; i < x.size(); ++i)
    out[i] = x[i] * inv * w[i];
  return out;
}

// y = W x for W [out, in] row-major.
vec matvec(const std::vector<float>& w, const vec& x, int out) {
  const std::size_t in = x.size();
  vec y(static_cast<std::size_t>(out), 0.0);
  for (int o = 0; o < out; ++o)
    for (std::size_t i = 0; i < in; ++i)
      y[o] += double{w[o * in + i]} * x[i];
  return y;
}

// Rotate-half RoPE of one head's vector at position pos.
void rope(double* v, int pos) {
  const int half = head_dim / 2;
  for (int i = 0; i < half; ++i) {
    // The runner's tables are fp32 (inv_freq, then the angle pos * inv_freq): the same here,
    // or a position in the hundreds would differ by more than the tolerance at theta 1e6.
    const float inv_freq = static_cast<float>(1.0 / std::pow(theta, 2.0 * i / head_dim));
    const double angle = static_cast<float>(static_cast<float>(pos) * inv_freq);
    const double c = std::cos(angle), s = std::sin(angle);
    const double a = v[i], b = v[i + half];
    v[i] = a * c - b * s;
    v[i + half] = b * c + a * s;
  }
}

// [tokens, vocab] logits of the sequence, by the textbook. windows[l] > 0: layer l's tokens see only
// their windows[l] last positions (empty: every layer full).
std::vector<float> naive_logits(const checkpoint& c, const std::vector<token_id>& tokens,
                                const std::vector<int>& windows = {}) {
  const std::size_t n = tokens.size();
  const auto& embed = c["model.embed_tokens.weight"];
  std::vector<vec> x(n, vec(hidden));
  for (std::size_t t = 0; t < n; ++t)
    for (int i = 0; i < hidden; ++i)
      x[t][i] = embed[static_cast<std::size_t>(tokens[t]) * hidden + i];
  for (int l = 0; l < layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    std::vector<vec> q(n), k(n), v(n);
    for (std::size_t t = 0; t < n; ++t) {
      const vec h = rms_norm(x[t], c[p + "input_layernorm.weight"]);
      q[t] = matvec(c[p + "self_attn.q_proj.weight"], h, heads * head_dim);
      k[t] = matvec(c[p + "self_attn.k_proj.weight"], h, kv_heads * head_dim);
      v[t] = matvec(c[p + "self_attn.v_proj.weight"], h, kv_heads * head_dim);
      // Qwen3: every head normalized by itself, then rotated.
      for (int hd = 0; hd < heads; ++hd) {
        vec head(q[t].begin() + hd * head_dim, q[t].begin() + (hd + 1) * head_dim);
        head = rms_norm(head, c[p + "self_attn.q_norm.weight"]);
        std::copy(head.begin(), head.end(), q[t].begin() + hd * head_dim);
        rope(q[t].data() + hd * head_dim, static_cast<int>(t));
      }
      for (int hd = 0; hd < kv_heads; ++hd) {
        vec head(k[t].begin() + hd * head_dim, k[t].begin() + (hd + 1) * head_dim);
        head = rms_norm(head, c[p + "self_attn.k_norm.weight"]);
        std::copy(head.begin(), head.end(), k[t].begin() + hd * head_dim);
        rope(k[t].data() + hd * head_dim, static_cast<int>(t));
      }
    }
    const std::size_t window = windows.empty() ? 0 : static_cast<std::size_t>(windows[static_cast<std::size_t>(l)]);
    for (std::size_t t = 0; t < n; ++t) {
      const std::size_t first = window > 0 && t + 1 > window ? t + 1 - window : 0;
      vec attn(static_cast<std::size_t>(heads) * head_dim, 0.0);
      for (int hd = 0; hd < heads; ++hd) {
        const int g = hd / (heads / kv_heads); // GQA: the kv head of this query head
        vec score(t + 1, 0.0);
        double top = -1e300;
        for (std::size_t s = first; s <= t; ++s) {
          double dot = 0;
          for (int d = 0; d < head_dim; ++d)
            dot += q[t][hd * head_dim + d] * k[s][g * head_dim + d];
          score[s] = dot / std::sqrt(static_cast<double>(head_dim));
          top = std::max(top, score[s]);
        }
        double total = 0;
        for (std::size_t s = first; s <= t; ++s)
          total += (score[s] = std::exp(score[s] - top));
        for (std::size_t s = first; s <= t; ++s)
          for (int d = 0; d < head_dim; ++d)
            attn[hd * head_dim + d] += score[s] / total * v[s][g * head_dim + d];
      }
      const vec o = matvec(c[p + "self_attn.o_proj.weight"], attn, hidden);
      for (int i = 0; i < hidden; ++i)
        x[t][i] += o[i];
      const vec h = rms_norm(x[t], c[p + "post_attention_layernorm.weight"]);
      const vec gate = matvec(c[p + "mlp.gate_proj.weight"], h, inter);
      const vec up = matvec(c[p + "mlp.up_proj.weight"], h, inter);
      vec act(inter);
      for (int i = 0; i < inter; ++i)
        act[i] = gate[i] / (1.0 + std::exp(-gate[i])) * up[i];
      const vec down = matvec(c[p + "mlp.down_proj.weight"], act, hidden);
      for (int i = 0; i < hidden; ++i)
        x[t][i] += down[i];
    }
  }
  std::vector<float> logits(n * vocab);
  for (std::size_t t = 0; t < n; ++t) {
    const vec h = rms_norm(x[t], c["model.norm.weight"]);
    const vec row = matvec(embed, h, vocab); // tied: the LM head is the embedding matrix
    for (int i = 0; i < vocab; ++i)
      logits[t * vocab + i] = static_cast<float>(row[i]);
  }
  return logits;
}

// --- the runner: a prefill of the first tokens, then one decode step a token ------------------

const std::vector<token_id> prompt{17, 250, 3, 99, 3, 140, 271, 8, 64, 200, 5, 17};
constexpr int prefill = 7;

std::vector<step_batch> steps() {
  const int block_size = 4, max_blocks = 4;
  const std::vector<std::int32_t> table{5, 0, 9, 2}; // scattered blocks
  std::vector<step_batch> out;
  step_batch_builder first(block_size, max_blocks);
  first.add(std::span(prompt).first(prefill), 0, table, prefill);
  out.push_back(first.take(0));
  for (int t = prefill; t < static_cast<int>(prompt.size()); ++t) {
    step_batch_builder step(block_size, max_blocks);
    step.add(std::span(prompt).subspan(static_cast<std::size_t>(t), 1), t, table, 1);
    out.push_back(step.take(static_cast<std::uint64_t>(t)));
  }
  return out;
}

constexpr kv_cache_config cache{.num_blocks = 12, .block_size = 4, .num_host_blocks = 0};

// Every position's logits, [tokens, vocab], from the steps above.
std::vector<float> runner_logits(model_runner& runner) {
  std::vector<float> all;
  for (const step_batch& b : steps()) {
    std::vector<float> logits(b.logits_rows.size() * vocab);
    runner.execute(b, logits);
    all.insert(all.end(), logits.begin(), logits.end());
  }
  return all;
}

// The same steps on `ranks` runners, each over the shard it loaded from `store`; rank 0's logits.
std::vector<float> tensor_parallel_logits(const model_config& cfg, const tensor_store& store, int ranks) {
  return sharded_cpu_logits(cfg, store, cache, ranks, [&](model_runner& runner) { return runner_logits(runner); });
}

} // namespace

TEST_CASE("a Qwen3 checkpoint's CPU logits equal the plain-loop forward pass, at 1 and 2 ranks") {
  temp_dir dir("troupe_qwen3");
  const checkpoint c = random_qwen3(43);
  write_checkpoint(dir.path, c, qwen3_config_json());

  const model_config cfg = load_model_config(dir.path);
  REQUIRE(cfg.qk_norm);
  REQUIRE(cfg.head_dim == head_dim);
  REQUIRE(cfg.tie_word_embeddings);
  const tensor_store store = tensor_store::open(dir.path);
  const model_weights weights = load_model_weights(store, cfg);
  REQUIRE(weights.layers[1].q_norm == c["model.layers.1.self_attn.q_norm.weight"]); // BF16, exactly
  REQUIRE(weights.layers[1].k_norm == c["model.layers.1.self_attn.k_norm.weight"]); // F16, exactly

  const std::vector<float> expected = naive_logits(c, prompt);
  cpu_model_runner runner(cfg, weights, cache, 2);
  const std::vector<float> got = runner_logits(runner);
  REQUIRE(got.size() == expected.size());
  const float scale = max_abs(expected);
  REQUIRE(scale > 1.0f);
  const float one_rank = max_abs_diff(got, expected) / scale;
  MESSAGE("qwen3 cpu vs plain loops: max |d| / max |logit| = " << one_rank);
  CHECK(one_rank <= 1e-4f);

  // Two ranks, each with its heads, its kv head, and both whole norm vectors.
  const auto shapes = shard_shapes(cfg, 2);
  for (int r = 0; r < 2; ++r) {
    const model_weights shard = load_model_weight_shard(store, cfg, shapes[r]);
    CHECK(shard.layers[0].q_norm == weights.layers[0].q_norm);
    CHECK(shard.layers[0].k_norm == weights.layers[0].k_norm);
    CHECK(shard.layers[0].q_proj == shard_weights(weights, cfg, shapes[r]).layers[0].q_proj);
  }
  const std::vector<float> two = tensor_parallel_logits(cfg, store, 2);
  REQUIRE(two.size() == got.size());
  const float two_ranks = max_abs_diff(two, got) / max_abs(got);
  MESSAGE("qwen3 cpu 2 ranks vs 1: max |d| / max |logit| = " << two_ranks);
  CHECK(two_ranks <= 1e-5f);
}

TEST_CASE("a sliding-window Qwen3 (layer 0 full, layer 1 a window of 3) equals the plain loops, at 1 and 2 ranks") {
  temp_dir dir("troupe_qwen3");
  const checkpoint c = random_qwen3(46);
  json::object config = qwen3_config_json();
  config["use_sliding_window"] = true;
  config["sliding_window"] = 3;
  config["max_window_layers"] = 1;
  write_checkpoint(dir.path, c, config);
  const model_config cfg = load_model_config(dir.path);
  REQUIRE(cfg.attention_window(0) == 0);
  REQUIRE(cfg.attention_window(1) == 3);
  const tensor_store store = tensor_store::open(dir.path);
  cpu_model_runner runner(cfg, load_model_weights(store, cfg), cache, 2);
  // The prompt's 12 tokens cross the window in the prefill (7 tokens) and in every decode step.
  const std::vector<float> got = runner_logits(runner);
  const std::vector<float> expected = naive_logits(c, prompt, {0, 3});
  REQUIRE(got.size() == expected.size());
  const float error = max_abs_diff(got, expected) / max_abs(expected);
  MESSAGE("sliding qwen3 cpu vs plain loops: max |d| / max |logit| = " << error);
  CHECK(error <= 1e-4f);
  // The window changes the answer past its first 3 positions, and only there.
  const std::vector<float> full = naive_logits(c, prompt);
  const std::size_t row = vocab;
  CHECK(max_abs_diff(std::span(full).first(3 * row), std::span(expected).first(3 * row)) == 0.0f);
  CHECK(max_abs_diff(std::span(full).subspan(3 * row), std::span(expected).subspan(3 * row)) > 1e-2f * max_abs(full));
  const std::vector<float> two = tensor_parallel_logits(cfg, store, 2);
  CHECK(max_abs_diff(two, got) / max_abs(got) <= 1e-5f);
}

TEST_CASE("Qwen3's q/k norm is applied: other norm weights give other logits") {
  temp_dir dir("troupe_qwen3");
  const checkpoint c = random_qwen3(44);
  write_checkpoint(dir.path, c, qwen3_config_json());
  const model_config cfg = load_model_config(dir.path);
  const model_weights weights = load_model_weights(tensor_store::open(dir.path), cfg);
  cpu_model_runner runner(cfg, weights, cache, 1);
  const std::vector<float> base = runner_logits(runner);

  for (const char* which : {"q", "k"}) {
    CAPTURE(which);
    model_weights changed = weights;
    // Half of one layer's weight vector doubled: the heads' directions change, not only their scale.
    auto& norm = std::string(which) == "q" ? changed.layers[1].q_norm : changed.layers[1].k_norm;
    for (int i = 0; i < head_dim / 2; ++i)
      norm[static_cast<std::size_t>(i)] *= 2.0f;
    cpu_model_runner other(cfg, changed, cache, 1);
    const std::vector<float> logits = runner_logits(other);
    CHECK(max_abs_diff(logits, base) > 1e-2f * max_abs(base));
  }
}

TEST_CASE("Qwen3 norm tensors: required for qwen3, refused for other families, whole in every rank") {
  temp_dir dir("troupe_qwen3");
  const checkpoint c = random_qwen3(45);

  write_checkpoint(dir.path, c, qwen3_config_json(), "model.layers.1.self_attn.k_norm.weight");
  CHECK_MODEL_ERROR(load_model_weights(tensor_store::open(dir.path), load_model_config(dir.path)),
                    "model.layers.1.self_attn.k_norm.weight");

  // The same tensors under a Qwen2 config (no q/k norm): the norms are strays, not ignored.
  json::object qwen2 = qwen3_config_json();
  qwen2["model_type"] = "qwen2";
  qwen2["architectures"] = json::array{"Qwen2ForCausalLM"};
  qwen2["attention_bias"] = false;
  write_checkpoint(dir.path, c, qwen2);
  CHECK_MODEL_ERROR(load_model_weights(tensor_store::open(dir.path), load_model_config(dir.path)),
                    "self_attn.k_norm.weight' is not used by a qwen2 model");

  // A norm of the hidden size instead of head_dim.
  checkpoint wrong = c;
  for (tensor& t : wrong.tensors)
    if (t.name == "model.layers.0.self_attn.q_norm.weight") {
      t.shape = {hidden};
      t.values.assign(hidden, 1.0f);
    }
  write_checkpoint(dir.path, wrong, qwen3_config_json());
  CHECK_MODEL_ERROR(load_model_weights(tensor_store::open(dir.path), load_model_config(dir.path)),
                    "tensor 'model.layers.0.self_attn.q_norm.weight' has shape [64], expected [32]");

  // Dummy weights: norms of ones, whole in a rank's shard as in the whole model.
  const model_config cfg = parse_model_config(json::serialize(qwen3_config_json()));
  const model_weights dummy = dummy_weights(cfg, 7);
  CHECK(dummy.layers[0].q_norm == std::vector<float>(head_dim, 1.0f));
  CHECK(dummy.layers[1].k_norm == std::vector<float>(head_dim, 1.0f));
  const model_weights rank1 = dummy_weight_shard(cfg, 7, shard_shapes(cfg, 2)[1]);
  CHECK(rank1.layers[1].q_norm.size() == static_cast<std::size_t>(head_dim));
  CHECK(rank1.layers[1].k_norm.size() == static_cast<std::size_t>(head_dim));
  CHECK(rank1.layers[1].q_proj == shard_weights(dummy, cfg, shard_shapes(cfg, 2)[1]).layers[1].q_proj);
  // And a llama model's weights have none.
  json::object llama = qwen3_config_json();
  llama["model_type"] = "llama";
  llama["architectures"] = json::array{"LlamaForCausalLM"};
  CHECK(dummy_weights(parse_model_config(json::serialize(llama)), 7).layers[0].q_norm.empty());
}
