// Every supported family on the CPU backend against transformers: tiny random checkpoints
// (tests/data/families/<name>: bf16 safetensors and config.json as save_pretrained wrote them) and
// transformers' fp32 logits of a 24-token prompt, computed on a CPU by tests/gpu/hf_reference.py
// --tiny (see tests/data/families/README.md). The prompt runs past every sliding window; Gemma's norm
// weights are random and its soft caps bend the scores and logits. troupe's fp32 logits must match
// to rounding, every position's argmax equal; and again prefilled in two chunks and decoded a token
// at a time, through a block table that is not in order.
#include <doctest/doctest.h>

#include <boost/json.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/cpu/cpu_model_runner.hpp"
#include "runtime/model_config.hpp"
#include "runtime/model_weights.hpp"
#include "runtime/safetensors.hpp"
#include "runtime/step_batch_builder.hpp"
#include "tests/support/data_root.hpp"
#include "tests/support/model_error_check.hpp"
#include "tests/support/temp_dir.hpp"

namespace {

namespace fs = std::filesystem;
using namespace troupe;
using namespace troupe::runtime;

struct golden {
  std::vector<token_id> ids;
  std::vector<float> logits; // [ids, vocab]
};

golden read_golden(const fs::path& folder, int vocab) {
  std::ifstream json_in(folder / "golden.json");
  REQUIRE_MESSAGE(json_in.good(), "missing " << (folder / "golden.json").string());
  std::stringstream text;
  text << json_in.rdbuf();
  golden g;
  const boost::json::value parsed = boost::json::parse(text.str());
  for (const auto& v : parsed.as_object().at("ids").as_array())
    g.ids.push_back(static_cast<token_id>(v.as_int64()));
  g.logits.resize(g.ids.size() * static_cast<std::size_t>(vocab));
  std::ifstream in(folder / "golden.f32", std::ios::binary);
  in.read(reinterpret_cast<char*>(g.logits.data()), static_cast<std::streamsize>(g.logits.size() * sizeof(float)));
  REQUIRE_MESSAGE(in.gcount() == static_cast<std::streamsize>(g.logits.size() * sizeof(float)),
                  "short file " << (folder / "golden.f32").string());
  return g;
}

// The largest |ours - theirs| over the largest |theirs|, and whether every row's argmax agrees.
void check_close(const std::vector<float>& ours, const golden& g, int vocab) {
  double largest = 0, worst = 0;
  int argmax_differ = 0;
  for (std::size_t r = 0; r < g.ids.size(); ++r) {
    const float* o = ours.data() + r * vocab;
    const float* t = g.logits.data() + r * vocab;
    for (int v = 0; v < vocab; ++v) {
      largest = std::max(largest, std::abs(static_cast<double>(t[v])));
      worst = std::max(worst, std::isfinite(o[v]) ? std::abs(static_cast<double>(o[v]) - t[v]) : INFINITY);
    }
    argmax_differ += std::max_element(o, o + vocab) - o != std::max_element(t, t + vocab) - t ? 1 : 0;
  }
  MESSAGE("worst |ours - transformers| / max |logit| " << worst / largest << ", argmax differs in " << argmax_differ
                                                       << " of " << g.ids.size() << " rows");
  CHECK(worst / largest < 2e-5);
  CHECK(argmax_differ == 0);
}

fs::path family_folder(const std::string& name) {
  return testing::data_root() / "tests" / "data" / "families" / name;
}

// `name`'s checkpoint, or (folder given) another layout of it with `name`'s golden.
void check_family(const std::string& name, const fs::path& checkpoint = {}) {
  const fs::path folder = checkpoint.empty() ? family_folder(name) : checkpoint;
  const model_config cfg = load_model_config(folder);
  const model_weights weights = load_model_weights(tensor_store::open(folder), cfg);
  const golden g = read_golden(family_folder(name), cfg.vocab_size);
  const int n = static_cast<int>(g.ids.size()), vocab = cfg.vocab_size, block = 4;
  std::vector<std::int32_t> table;
  for (int b = 0; b < (n + block - 1) / block; ++b)
    table.push_back(15 - 2 * b); // scattered, descending

  SUBCASE("one prefill") {
    cpu_model_runner runner(cfg, weights, kv_cache_config{16, block}, 2);
    step_batch_builder builder(block, static_cast<int>(table.size()));
    builder.add(g.ids, 0, table, n);
    std::vector<float> logits(static_cast<std::size_t>(n) * vocab, NAN);
    runner.execute(builder.take(0), logits);
    check_close(logits, g, vocab);
  }
  SUBCASE("two prefill chunks, then a token a step") {
    cpu_model_runner runner(cfg, weights, kv_cache_config{16, block}, 2);
    std::vector<float> logits(static_cast<std::size_t>(n) * vocab, NAN);
    std::uint64_t step = 0;
    const auto run = [&](int begin, int count) {
      step_batch_builder builder(block, static_cast<int>(table.size()));
      builder.add(std::span(g.ids).subspan(static_cast<std::size_t>(begin), static_cast<std::size_t>(count)), begin,
                  table, count);
      runner.execute(builder.take(step++), std::span(logits).subspan(static_cast<std::size_t>(begin) * vocab,
                                                                     static_cast<std::size_t>(count) * vocab));
    };
    run(0, 5);
    run(5, 7);
    for (int t = 12; t < n; ++t)
      run(t, 1);
    check_close(logits, g, vocab);
  }
}

// The tiny Gemma 3 as an image-text checkpoint (Gemma3ForConditionalGeneration) would store it: its config
// under text_config, its tensors under the language model's prefix, a vision tower beside them.
void write_image_text_gemma3(const fs::path& dir, std::string_view model_prefix, std::string_view lm_head_name) {
  const fs::path source = family_folder("gemma3");
  std::ifstream in(source / "config.json");
  std::stringstream text;
  text << in.rdbuf();
  boost::json::object language = boost::json::parse(text.str()).as_object();
  for (const char* key : {"architectures", "dtype", "torch_dtype", "transformers_version"})
    language.erase(key);
  boost::json::object top{{"architectures", boost::json::array{"Gemma3ForConditionalGeneration"}},
                          {"model_type", "gemma3"},
                          {"torch_dtype", "bfloat16"},
                          {"text_config", language},
                          {"vision_config", boost::json::object{{"model_type", "siglip_vision_model"}}}};
  std::ofstream(dir / "config.json") << boost::json::serialize(top);

  const tensor_store store = tensor_store::open(source);
  std::vector<tensor_view> tensors;
  for (const std::string& n : store.names()) {
    tensor_view t = store.get(n);
    t.name = n.starts_with("model.") ? std::string(model_prefix) + n.substr(6) : n;
    tensors.push_back(std::move(t));
  }
  // A tied LM head stored anyway, and a vision tower: both left unread.
  tensor_view head = store.get("model.embed_tokens.weight");
  head.name = std::string(lm_head_name);
  tensors.push_back(head);
  tensor_view vision = store.get("model.norm.weight");
  vision.name = std::string(model_prefix.starts_with("model.") ? "model." : "") + "vision_tower.post_layernorm.weight";
  tensors.push_back(vision);
  write_safetensors(dir / "model.safetensors", tensors);
}

} // namespace

TEST_CASE("family goldens: Llama") {
  check_family("llama");
}
TEST_CASE("family goldens: Qwen2 (q/k/v biases, tied embeddings)") {
  check_family("qwen2");
}
TEST_CASE("family goldens: Qwen3 (per-head q/k norms, head_dim != hidden / heads)") {
  check_family("qwen3");
}
TEST_CASE("family goldens: Mistral with a sliding window of 8") {
  check_family("mistral_sliding");
}
TEST_CASE("family goldens: Qwen2 sliding from max_window_layers") {
  check_family("qwen2_sliding");
}
TEST_CASE("family goldens: Phi-3 (fused projections, a window of 8)") {
  check_family("phi3_sliding");
}
TEST_CASE("family goldens: Gemma 2 (soft caps, sandwich norms, GeGLU, every other layer sliding)") {
  check_family("gemma2");
}
TEST_CASE("family goldens: Gemma 3 (q/k norms, local and global RoPE bases, linear scaling)") {
  check_family("gemma3");
}

TEST_CASE("family goldens: Mixtral (8 experts, top 2, stored per expert)") {
  check_family("mixtral");
}

TEST_CASE("family goldens: Qwen2-MoE (top 2 of 8 unnormalized, a gated shared expert)") {
  check_family("qwen2_moe");
}

TEST_CASE("family goldens: Qwen3-MoE (top 4 of 16 renormalized, q/k norms)") {
  check_family("qwen3_moe");
}

TEST_CASE("family goldens: Gemma 3 as an image-text checkpoint, in transformers 4.5x's layout and in 5.x's") {
  for (auto [model_prefix, lm_head] : {std::pair{"language_model.model.", "language_model.lm_head.weight"},
                                       std::pair{"model.language_model.", "lm_head.weight"}}) {
    CAPTURE(model_prefix);
    testing::temp_dir dir("troupe_gemma3_image_text");
    write_image_text_gemma3(dir.path, model_prefix, lm_head);
    const model_config cfg = load_model_config(dir.path);
    CHECK(cfg.image_text_checkpoint);
    CHECK(cfg.architecture == "Gemma3ForConditionalGeneration");
    check_family("gemma3", dir.path);
  }
  // The same files read as the text-only model find tensors they cannot place.
  testing::temp_dir dir("troupe_gemma3_image_text");
  write_image_text_gemma3(dir.path, "language_model.model.", "language_model.lm_head.weight");
  model_config text_only = load_model_config(family_folder("gemma3"));
  CHECK_MODEL_ERROR(load_model_weights(tensor_store::open(dir.path), text_only), "model.embed_tokens.weight");
}
