// A tensor-parallel rank's weights read straight from safetensors (load_model_weight_shard) or
// drawn as dummies (dummy_weight_shard) are, bit for bit, the slices shard_weights cuts from the
// whole model: on stories260k (tied LM head) and on a random GQA model with q/k/v biases stored
// as F32, F16 and BF16, untied and tied, at every width up to 8 that each model serves. A rank's
// load fails with the whole load's messages, reads no page of the file outside its slices, and
// dummy_weights still draws the values it drew before ranks could draw their own.
#include "runtime/dummy_weights.hpp"
#include "runtime/model_weights.hpp"
#include "runtime/safetensors.hpp"
#include "runtime/shard_shape.hpp"
#include "runtime/weight_plan.hpp"
#include "runtime/weight_shard.hpp"

#include <doctest/doctest.h>

#include "tests/support/data_root.hpp"
#include "tests/support/model_error_check.hpp"
#include "tests/support/temp_dir.hpp"

#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <random>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace {

namespace fs = std::filesystem;
using namespace troupe::runtime;
using namespace troupe::testing;

// A small Qwen2-like model: GQA (8 query heads, 2 kv heads, so 4 and 8 ranks keep copies of a kv
// head), q/k/v biases, and a vocabulary that 4 and 8 ranks split unevenly.
model_config gqa_config(bool tied) {
  model_config c;
  c.architecture = "Qwen2ForCausalLM";
  c.model_type = "qwen2";
  c.hidden_size = 64;
  c.intermediate_size = 96;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 8;
  c.num_key_value_heads = 2;
  c.head_dim = 8;
  c.vocab_size = 250;
  c.max_position_embeddings = 256;
  c.attention_bias = true;
  c.tie_word_embeddings = tied;
  return c;
}

constexpr int gqa_widths[] = {1, 2, 4, 8};
constexpr int stories_widths[] = {1, 2, 4}; // its intermediate size 172 refuses 8

// Every tensor of a model or a shard with a name for messages, lm_head included.
std::vector<std::pair<std::string, const std::vector<float>*>> named_tensors(const model_weights& w) {
  std::vector<std::pair<std::string, const std::vector<float>*>> out{
      {"embed_tokens", &w.embed_tokens}, {"final_norm", &w.final_norm}, {"lm_head", &w.lm_head}};
  for (std::size_t l = 0; l < w.layers.size(); ++l) {
    const layer_weights& x = w.layers[l];
    const std::pair<const char*, const std::vector<float>*> tensors[] = {
        {"input_norm", &x.input_norm}, {"q_proj", &x.q_proj},   {"k_proj", &x.k_proj},
        {"v_proj", &x.v_proj},         {"q_bias", &x.q_bias},   {"k_bias", &x.k_bias},
        {"v_bias", &x.v_bias},         {"o_proj", &x.o_proj},   {"post_attention_norm", &x.post_attention_norm},
        {"gate_proj", &x.gate_proj},   {"up_proj", &x.up_proj}, {"down_proj", &x.down_proj}};
    for (const auto& [name, tensor] : tensors)
      out.emplace_back("layers." + std::to_string(l) + "." + name, tensor);
  }
  return out;
}

// Bit for bit: == on floats would take -0 for 0 and refuse NaN for NaN.
bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

void check_same_bits(const model_weights& got, const model_weights& want) {
  const auto g = named_tensors(got), w = named_tensors(want);
  REQUIRE(g.size() == w.size());
  for (std::size_t i = 0; i < g.size(); ++i) {
    CAPTURE(g[i].first);
    CHECK(g[i].second->size() == w[i].second->size());
    CHECK(same_bits(*g[i].second, *w[i].second));
  }
}

// Every rank of every width: its slices read from `store` are those of the whole model.
void check_loaded_shards(const tensor_store& store, const model_config& cfg, std::span<const int> widths) {
  const model_weights whole = load_model_weights(store, cfg);
  for (const int ranks : widths)
    for (const shard_shape& shard : shard_shapes(cfg, ranks)) {
      CAPTURE(ranks);
      CAPTURE(shard.rank);
      check_same_bits(load_model_weight_shard(store, cfg, shard), shard_weights(whole, cfg, shard));
    }
}

// A tensor as written to the file: fp32 values, stored in the file's dtype.
struct stored_tensor {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> values;
};

// Random values for every tensor of `c`, named and shaped as HF stores them (written out here,
// not from the weight plan, so that the plan is checked against an independent list).
std::vector<stored_tensor> random_tensors(const model_config& c, bool with_lm_head, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<stored_tensor> out;
  const auto add = [&](std::string name, std::vector<int64_t> shape) {
    int64_t count = 1;
    for (const int64_t d : shape)
      count *= d;
    std::vector<float> values(static_cast<std::size_t>(count));
    for (float& v : values)
      v = uniform(rng);
    out.push_back({std::move(name), std::move(shape), std::move(values)});
  };
  const int64_t h = c.hidden_size, q = int64_t{c.num_attention_heads} * c.head_dim,
                kv = int64_t{c.num_key_value_heads} * c.head_dim, i = c.intermediate_size, v = c.vocab_size;
  add("model.embed_tokens.weight", {v, h});
  add("model.norm.weight", {h});
  if (with_lm_head)
    add("lm_head.weight", {v, h});
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    add(p + "input_layernorm.weight", {h});
    add(p + "post_attention_layernorm.weight", {h});
    add(p + "self_attn.q_proj.weight", {q, h});
    add(p + "self_attn.k_proj.weight", {kv, h});
    add(p + "self_attn.v_proj.weight", {kv, h});
    add(p + "self_attn.o_proj.weight", {h, q});
    if (c.attention_bias) {
      add(p + "self_attn.q_proj.bias", {q});
      add(p + "self_attn.k_proj.bias", {kv});
      add(p + "self_attn.v_proj.bias", {kv});
    }
    add(p + "mlp.gate_proj.weight", {i, h});
    add(p + "mlp.up_proj.weight", {i, h});
    add(p + "mlp.down_proj.weight", {h, i});
  }
  return out;
}

void write_tensors(const fs::path& path, const std::vector<stored_tensor>& tensors, weight_dtype dtype) {
  std::vector<std::vector<std::byte>> bytes;
  for (const stored_tensor& t : tensors) {
    std::vector<std::byte>& b = bytes.emplace_back(t.values.size() * dtype_size(dtype));
    for (std::size_t i = 0; i < t.values.size(); ++i) {
      if (dtype == weight_dtype::f32) {
        std::memcpy(b.data() + 4 * i, &t.values[i], 4);
      } else {
        const uint16_t bits = dtype == weight_dtype::f16 ? f32_to_f16(t.values[i]) : f32_to_bf16(t.values[i]);
        std::memcpy(b.data() + 2 * i, &bits, 2);
      }
    }
  }
  std::vector<tensor_view> views;
  for (std::size_t i = 0; i < tensors.size(); ++i)
    views.push_back({tensors[i].name, dtype, tensors[i].shape, bytes[i]});
  write_safetensors(path, views);
}

// dummy_weights as it was written before ranks drew their own: kept here, not shared, so that
// a change to the generator's order or draws shows (other tests depend on its values).
model_weights dummy_weights_before_shards(const model_config& cfg, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  auto matrix = [&](int rows, int cols) {
    std::vector<float> m(static_cast<std::size_t>(rows) * static_cast<std::size_t>(cols));
    for (auto& x : m)
      x = normal(rng);
    return m;
  };
  auto ones = [](int n) { return std::vector<float>(static_cast<std::size_t>(n), 1.0f); };
  const int h = cfg.hidden_size, q = cfg.num_attention_heads * cfg.head_dim,
            kv = cfg.num_key_value_heads * cfg.head_dim;
  model_weights w;
  w.embed_tokens = matrix(cfg.vocab_size, h);
  w.final_norm = ones(h);
  if (!cfg.tie_word_embeddings)
    w.lm_head = matrix(cfg.vocab_size, h);
  for (int l = 0; l < cfg.num_hidden_layers; ++l) {
    layer_weights lw;
    lw.input_norm = ones(h);
    lw.q_proj = matrix(q, h);
    lw.k_proj = matrix(kv, h);
    lw.v_proj = matrix(kv, h);
    if (cfg.attention_bias) {
      lw.q_bias.assign(static_cast<std::size_t>(q), 0.0f);
      lw.k_bias.assign(static_cast<std::size_t>(kv), 0.0f);
      lw.v_bias.assign(static_cast<std::size_t>(kv), 0.0f);
    }
    lw.o_proj = matrix(h, q);
    lw.post_attention_norm = ones(h);
    lw.gate_proj = matrix(cfg.intermediate_size, h);
    lw.up_proj = matrix(cfg.intermediate_size, h);
    lw.down_proj = matrix(h, cfg.intermediate_size);
    w.layers.push_back(std::move(lw));
  }
  return w;
}

// The pages of the file's data that hold none of a rank's bytes: [first, last] of its tensors'
// data, less every page its planned blocks touch.
std::vector<std::uintptr_t> pages_outside_slices(const tensor_store& store, const model_config& cfg,
                                                 const shard_shape& shard) {
  const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  model_weights scratch;
  std::set<std::uintptr_t> touched;
  std::uintptr_t data_begin = UINTPTR_MAX, data_end = 0;
  for (const std::string& name : store.names()) {
    const tensor_view t = store.get(name);
    data_begin = std::min(data_begin, reinterpret_cast<std::uintptr_t>(t.data.data()));
    data_end = std::max(data_end, reinterpret_cast<std::uintptr_t>(t.data.data() + t.data.size()));
  }
  for (const planned_tensor& p : plan_weights(cfg, shard, scratch)) {
    const tensor_view t = store.get(p.name);
    const std::size_t element = dtype_size(t.dtype);
    for (std::size_t r = 0; r < p.rows; ++r) {
      const auto begin = reinterpret_cast<std::uintptr_t>(t.data.data()) +
                         ((p.row_begin + r) * p.whole_columns() + p.column_begin) * element;
      const std::uintptr_t end = begin + p.columns * element;
      for (std::uintptr_t at = begin / page * page; at < end; at += page)
        touched.insert(at);
    }
  }
  std::vector<std::uintptr_t> out;
  for (std::uintptr_t at = (data_begin + page - 1) / page * page; at + page <= data_end; at += page)
    if (touched.count(at) == 0)
      out.push_back(at);
  return out;
}

// Runs `load` in a child process whose file mapping has `pages` unreadable: a read of one of
// them kills the child (SIGSEGV). The child's exit status comes back: 0 when `load` returned
// true. A child, so that a stray read fails this test instead of ending the test binary.
template <class F>
int status_with_pages_unreadable(const std::vector<std::uintptr_t>& pages, F&& load) {
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    // The default action, not doctest's handler: the parent reports, the child just dies.
    std::signal(SIGSEGV, SIG_DFL);
    std::signal(SIGBUS, SIG_DFL);
    const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
    for (const std::uintptr_t at : pages)
      if (::mprotect(reinterpret_cast<void*>(at), page, PROT_NONE) != 0)
        ::_exit(3);
    bool ok = false;
    try {
      ok = load();
    } catch (...) {
      ::_exit(4);
    }
    ::_exit(ok ? 0 : 1); // _exit: no doctest or sanitizer teardown in the child
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  return status;
}

} // namespace

TEST_CASE("stories260k: every rank's slices read from the file are the whole model's (tied LM head)") {
  const model_config cfg = load_model_config(stories_dir());
  REQUIRE(cfg.tie_word_embeddings);
  CHECK_THROWS(shard_shapes(cfg, 8));
  const tensor_store store = tensor_store::open(stories_dir());
  check_loaded_shards(store, cfg, stories_widths);

  // The tied LM head is each rank's rows of embed_tokens; the stored lm_head.weight is not read.
  const model_weights whole = load_model_weights(store, cfg);
  CHECK(whole.lm_head.empty());
  const shard_shape last = shard_shapes(cfg, 4)[3];
  const model_weights shard = load_model_weight_shard(store, cfg, last);
  const auto hidden = static_cast<std::size_t>(cfg.hidden_size);
  REQUIRE(shard.lm_head.size() == static_cast<std::size_t>(last.vocab) * hidden);
  CHECK(std::equal(shard.lm_head.begin(), shard.lm_head.end(),
                   whole.embed_tokens.begin() + static_cast<std::ptrdiff_t>(last.vocab_begin * hidden)));
}

TEST_CASE("a random GQA model in F32, F16 and BF16, untied and tied: every rank's slices are the whole model's") {
  for (const bool tied : {false, true})
    for (const weight_dtype dtype : {weight_dtype::f32, weight_dtype::f16, weight_dtype::bf16}) {
      CAPTURE(tied);
      CAPTURE(dtype_name(dtype));
      const model_config cfg = gqa_config(tied);
      temp_dir dir{"troupe_weight_shard"};
      // Tied, an lm_head.weight of its own values is stored anyway (exporters keep a copy): a
      // rank must take its LM head from embed_tokens, as the whole load ignores this one.
      write_tensors(dir.path / "model.safetensors", random_tensors(cfg, true, tied ? 11 : 12), dtype);
      const tensor_store store = tensor_store::open(dir.path);
      CHECK(store.get("model.layers.1.mlp.down_proj.weight").dtype == dtype);
      check_loaded_shards(store, cfg, gqa_widths);
    }
}

TEST_CASE("a rank's load fails with the whole load's message: missing tensor, wrong shape, stray tensor") {
  const model_config cfg = gqa_config(false);
  temp_dir dir{"troupe_weight_shard"};
  const fs::path file = dir.path / "model.safetensors";
  auto tensors = random_tensors(cfg, true, 13);
  model_config read_as = cfg;
  std::string needle;

  SUBCASE("a missing tensor") {
    std::erase_if(tensors, [](const stored_tensor& t) { return t.name == "model.layers.1.self_attn.v_proj.bias"; });
    needle = "tensor 'model.layers.1.self_attn.v_proj.bias' is missing";
  }
  SUBCASE("a shape that differs from config.json") {
    read_as.intermediate_size = 80;
    needle = "tensor 'model.layers.0.mlp.gate_proj.weight' has shape [96, 64], expected [80, 64]";
  }
  SUBCASE("a stray tensor the config has no use for") {
    tensors.push_back({"model.layers.0.self_attn.o_proj.bias", {64}, std::vector<float>(64, 0.5f)});
    needle = "tensor 'model.layers.0.self_attn.o_proj.bias' is not used by a qwen2 model";
  }
  write_tensors(file, tensors, weight_dtype::f32);
  const tensor_store store = tensor_store::open(file);
  const std::string whole = model_error_text([&] { (void)load_model_weights(store, read_as); });
  INFO("whole load: " << whole);
  CHECK(whole.find(needle) != std::string::npos);
  for (const shard_shape& shard : shard_shapes(read_as, 2))
    CHECK(model_error_text([&] { (void)load_model_weight_shard(store, read_as, shard); }) == whole);
}

TEST_CASE("a rank reads no page of the file outside its slices") {
  // Rows of 4 KiB (hidden 1024 in F32) so that the rows a rank skips fill whole pages.
  model_config cfg = gqa_config(false);
  cfg.hidden_size = 1024;
  for (const weight_dtype dtype : {weight_dtype::f32, weight_dtype::bf16}) {
    CAPTURE(dtype_name(dtype));
    temp_dir dir{"troupe_weight_shard"};
    write_tensors(dir.path / "model.safetensors", random_tensors(cfg, true, 17), dtype);
    const tensor_store store = tensor_store::open(dir.path);
    const model_weights whole = load_model_weights(store, cfg);
    for (const int ranks : {2, 4})
      for (const shard_shape& shard : shard_shapes(cfg, ranks)) {
        CAPTURE(ranks);
        CAPTURE(shard.rank);
        const std::vector<std::uintptr_t> pages = pages_outside_slices(store, cfg, shard);
        // The skipped q/k/v, gate/up and LM head rows: a good part of the file.
        const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
        CHECK(pages.size() * page * 4 > fs::file_size(dir.path / "model.safetensors"));
        const int status = status_with_pages_unreadable(pages, [&] {
          const model_weights w = load_model_weight_shard(store, cfg, shard);
          const model_weights want = shard_weights(whole, cfg, shard);
          const auto a = named_tensors(w), b = named_tensors(want);
          for (std::size_t i = 0; i < a.size(); ++i)
            if (!same_bits(*a[i].second, *b[i].second))
              return false;
          return true;
        });
        INFO("child status " << status);
        CHECK((WIFEXITED(status) && WEXITSTATUS(status) == 0));
      }
    // The trap is armed: the whole model, read with rank 0's other pages unreadable, dies.
    const auto pages = pages_outside_slices(store, cfg, shard_shapes(cfg, 2)[0]);
    const int status = status_with_pages_unreadable(pages, [&] {
      (void)load_model_weights(store, cfg);
      return true;
    });
    INFO("child status " << status);
    CHECK_FALSE((WIFEXITED(status) && WEXITSTATUS(status) == 0));
  }
}

TEST_CASE("dummy_weights draws the values it drew before ranks drew their own") {
  for (const model_config& cfg : {load_model_config(stories_dir()), gqa_config(false), gqa_config(true)}) {
    CAPTURE(cfg.tie_word_embeddings);
    check_same_bits(dummy_weights(cfg, 7), dummy_weights_before_shards(cfg, 7));
  }
}

TEST_CASE("a rank's dummy weights are its slices of the whole dummy model") {
  const std::pair<model_config, std::vector<int>> models[] = {
      {load_model_config(stories_dir()), {stories_widths, stories_widths + std::size(stories_widths)}},
      {gqa_config(false), {gqa_widths, gqa_widths + std::size(gqa_widths)}},
      {gqa_config(true), {gqa_widths, gqa_widths + std::size(gqa_widths)}}};
  for (const auto& [cfg, widths] : models) {
    CAPTURE(cfg.model_type);
    CAPTURE(cfg.tie_word_embeddings);
    const model_weights whole = dummy_weights(cfg, 38);
    for (const int ranks : widths)
      for (const shard_shape& shard : shard_shapes(cfg, ranks)) {
        CAPTURE(ranks);
        CAPTURE(shard.rank);
        check_same_bits(dummy_weight_shard(cfg, 38, shard), shard_weights(whole, cfg, shard));
      }
  }
}
