// load_model_weights on the real stories260k model and on broken copies of it, sharded
// and F16/BF16 copies, synthetic Qwen2/untied models, and the dtype conversions.
#include "runtime/model_weights.hpp"
#include "runtime/errors.hpp"
#include "runtime/generation_config.hpp"
#include "runtime/model_config.hpp"
#include "runtime/safetensors.hpp"
#include "runtime/shard_shape.hpp"

#include <doctest/doctest.h>

#include "tests/support/data_root.hpp"
#include "tests/support/model_error_check.hpp"
#include "tests/support/temp_dir.hpp"

#include <boost/json.hpp>

#include <stdlib.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;
namespace json = boost::json;
using namespace troupe::runtime;
using namespace troupe::testing;

// Everything the engine does with a model folder at start-up.
model_weights load_folder(const fs::path& dir) {
  const model_config cfg = load_model_config(dir);
  const tensor_store store = tensor_store::open(dir);
  return load_model_weights(store, cfg);
}

void copy_model(const fs::path& to) {
  for (const char* name : {"config.json", "generation_config.json", "model.safetensors"})
    fs::copy_file(stories_dir() / name, to / name);
}

// The header and data section of a safetensors file, parsed here independently of runtime/.
struct raw_file {
  json::object header;
  std::vector<char> data;
};

raw_file read_raw(const fs::path& path) {
  const std::vector<char> bytes = read_bytes(path);
  uint64_t length = 0;
  std::memcpy(&length, bytes.data(), 8);
  raw_file raw;
  raw.header = json::parse(std::string_view(bytes.data() + 8, length)).as_object();
  raw.data.assign(bytes.begin() + 8 + static_cast<std::ptrdiff_t>(length), bytes.end());
  return raw;
}

void write_raw(const fs::path& path, const raw_file& raw) {
  const std::string header = json::serialize(raw.header);
  std::vector<char> bytes(8);
  const uint64_t length = header.size();
  std::memcpy(bytes.data(), &length, 8);
  bytes.insert(bytes.end(), header.begin(), header.end());
  bytes.insert(bytes.end(), raw.data.begin(), raw.data.end());
  write_bytes(path, bytes);
}

// Rewrites dir/model.safetensors with one edit to its header.
template <class F>
void edit_header(const fs::path& dir, F&& edit) {
  raw_file raw = read_raw(dir / "model.safetensors");
  edit(raw.header);
  write_raw(dir / "model.safetensors", raw);
}

// Rewrites dir/config.json with one edit.
template <class F>
void edit_config(const fs::path& dir, F&& edit) {
  const std::vector<char> text = read_bytes(dir / "config.json");
  json::object cfg = json::parse(std::string_view(text.data(), text.size())).as_object();
  edit(cfg);
  std::ofstream(dir / "config.json", std::ios::trunc) << json::serialize(cfg);
}

std::vector<float> floats_of(const raw_file& raw, std::string_view name) {
  const json::object& info = raw.header.at(name).as_object();
  const auto begin = static_cast<std::size_t>(info.at("data_offsets").as_array()[0].to_number<int64_t>());
  const auto end = static_cast<std::size_t>(info.at("data_offsets").as_array()[1].to_number<int64_t>());
  std::vector<float> out((end - begin) / 4);
  std::memcpy(out.data(), raw.data.data() + begin, end - begin);
  return out;
}

// All tensors of a loaded model in a fixed order, for whole-model comparisons.
std::vector<const std::vector<float>*> all_vectors(const model_weights& w) {
  std::vector<const std::vector<float>*> out{&w.embed_tokens, &w.final_norm, &w.lm_head};
  for (const layer_weights& l : w.layers)
    for (const std::vector<float>* v : {&l.input_norm, &l.q_proj, &l.k_proj, &l.v_proj, &l.q_bias, &l.k_bias, &l.v_bias,
                                        &l.o_proj, &l.post_attention_norm, &l.gate_proj, &l.up_proj, &l.down_proj})
      out.push_back(v);
  return out;
}

// A tensor to write, owning its bytes.
struct owned_tensor {
  std::string name;
  weight_dtype dtype;
  std::vector<int64_t> shape;
  std::vector<std::byte> bytes;
};

void write_owned(const fs::path& path, const std::vector<owned_tensor>& tensors) {
  std::vector<tensor_view> views;
  for (const owned_tensor& t : tensors)
    views.push_back({t.name, t.dtype, t.shape, t.bytes});
  write_safetensors(path, views);
}

owned_tensor convert_tensor(const tensor_view& t, weight_dtype dtype) {
  const std::vector<float> values = to_f32(t);
  owned_tensor out{t.name, dtype, t.shape, {}};
  out.bytes.resize(values.size() * dtype_size(dtype));
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (dtype == weight_dtype::f32) {
      std::memcpy(out.bytes.data() + 4 * i, &values[i], 4);
    } else {
      const uint16_t bits = dtype == weight_dtype::f16 ? f32_to_f16(values[i]) : f32_to_bf16(values[i]);
      std::memcpy(out.bytes.data() + 2 * i, &bits, 2);
    }
  }
  return out;
}

owned_tensor random_tensor(std::string name, std::vector<int64_t> shape, std::mt19937& rng) {
  int64_t count = 1;
  for (const int64_t d : shape)
    count *= d;
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> values(static_cast<std::size_t>(count));
  for (float& v : values)
    v = dist(rng);
  owned_tensor t{std::move(name), weight_dtype::f32, std::move(shape), {}};
  t.bytes.resize(values.size() * 4);
  std::memcpy(t.bytes.data(), values.data(), t.bytes.size());
  return t;
}

// A synthetic model folder of the given shapes (random weights).
std::vector<owned_tensor> synthetic_tensors(const model_config& c, bool with_bias, bool with_lm_head,
                                            std::mt19937& rng) {
  const int64_t h = c.hidden_size, q = int64_t{c.num_attention_heads} * c.head_dim,
                kv = int64_t{c.num_key_value_heads} * c.head_dim, i = c.intermediate_size, v = c.vocab_size;
  std::vector<owned_tensor> t;
  t.push_back(random_tensor("model.embed_tokens.weight", {v, h}, rng));
  t.push_back(random_tensor("model.norm.weight", {h}, rng));
  if (with_lm_head)
    t.push_back(random_tensor("lm_head.weight", {v, h}, rng));
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    t.push_back(random_tensor(p + "input_layernorm.weight", {h}, rng));
    t.push_back(random_tensor(p + "post_attention_layernorm.weight", {h}, rng));
    t.push_back(random_tensor(p + "self_attn.q_proj.weight", {q, h}, rng));
    t.push_back(random_tensor(p + "self_attn.k_proj.weight", {kv, h}, rng));
    t.push_back(random_tensor(p + "self_attn.v_proj.weight", {kv, h}, rng));
    t.push_back(random_tensor(p + "self_attn.o_proj.weight", {h, q}, rng));
    if (with_bias) {
      t.push_back(random_tensor(p + "self_attn.q_proj.bias", {q}, rng));
      t.push_back(random_tensor(p + "self_attn.k_proj.bias", {kv}, rng));
      t.push_back(random_tensor(p + "self_attn.v_proj.bias", {kv}, rng));
    }
    t.push_back(random_tensor(p + "mlp.gate_proj.weight", {i, h}, rng));
    t.push_back(random_tensor(p + "mlp.up_proj.weight", {i, h}, rng));
    t.push_back(random_tensor(p + "mlp.down_proj.weight", {h, i}, rng));
  }
  return t;
}

uint16_t f16_bits_of(float f) {
  return f32_to_f16(f);
}

} // namespace

// --- conversions -----------------------------------------------------------------

TEST_CASE("f16 -> f32 on known bit patterns, subnormals, infinities and NaN") {
  CHECK(f16_to_f32(0x0000) == 0.0f);
  CHECK_FALSE(std::signbit(f16_to_f32(0x0000)));
  CHECK(f16_to_f32(0x8000) == 0.0f);
  CHECK(std::signbit(f16_to_f32(0x8000)));
  CHECK(f16_to_f32(0x3c00) == 1.0f);
  CHECK(f16_to_f32(0xc000) == -2.0f);
  CHECK(f16_to_f32(0x3555) == 0.333251953125f);
  CHECK(f16_to_f32(0x7bff) == 65504.0f);
  CHECK(f16_to_f32(0xfbff) == -65504.0f);
  CHECK(f16_to_f32(0x0400) == std::ldexp(1.0f, -14));    // smallest normal
  CHECK(f16_to_f32(0x0001) == std::ldexp(1.0f, -24));    // smallest subnormal
  CHECK(f16_to_f32(0x03ff) == std::ldexp(1023.0f, -24)); // largest subnormal
  CHECK(f16_to_f32(0x8001) == -std::ldexp(1.0f, -24));
  CHECK(f16_to_f32(0x7c00) == std::numeric_limits<float>::infinity());
  CHECK(f16_to_f32(0xfc00) == -std::numeric_limits<float>::infinity());
  CHECK(std::isnan(f16_to_f32(0x7e00)));
  CHECK(std::isnan(f16_to_f32(0x7c01))); // a signalling-pattern NaN stays NaN, not infinity
  CHECK(std::isnan(f16_to_f32(0xfe00)));

  // Every one of the 65536 patterns against an independent formula.
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const auto bits = static_cast<uint16_t>(h);
    const float got = f16_to_f32(bits);
    const int exponent = (h >> 10) & 0x1f;
    const int mantissa = h & 0x3ff;
    const float sign = (h & 0x8000) != 0 ? -1.0f : 1.0f;
    if (exponent == 0x1f) {
      CHECK(std::isnan(got) == (mantissa != 0));
      continue;
    }
    const float expected = exponent == 0 ? sign * std::ldexp(static_cast<float>(mantissa), -24)
                                         : sign * std::ldexp(static_cast<float>(1024 + mantissa), exponent - 25);
    if (got != expected || std::signbit(got) != std::signbit(expected)) {
      INFO("pattern " << h);
      CHECK(got == expected);
    }
    // And back, exactly.
    if (f32_to_f16(got) != bits) {
      INFO("pattern " << h);
      CHECK(f32_to_f16(got) == bits);
    }
  }
}

TEST_CASE("bf16 -> f32 on known patterns, and every pattern round-trips") {
  CHECK(bf16_to_f32(0x3f80) == 1.0f);
  CHECK(bf16_to_f32(0xc000) == -2.0f);
  CHECK(bf16_to_f32(0x4049) == 3.140625f);
  CHECK(bf16_to_f32(0x7f80) == std::numeric_limits<float>::infinity());
  CHECK(bf16_to_f32(0xff80) == -std::numeric_limits<float>::infinity());
  CHECK(std::isnan(bf16_to_f32(0x7fc0)));
  CHECK(bf16_to_f32(0x0001) == std::ldexp(1.0f, -133)); // an f32 subnormal, exact
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const float f = bf16_to_f32(static_cast<uint16_t>(h));
    CHECK(std::bit_cast<uint32_t>(f) == h << 16);
    if (!std::isnan(f) && f32_to_bf16(f) != h) {
      INFO("pattern " << h);
      CHECK(f32_to_bf16(f) == h);
    }
  }
}

TEST_CASE("f32 -> f16 / bf16 round to nearest, ties to even") {
  // f16 near 1: ulp 2^-10.
  CHECK(f16_bits_of(1.0f + std::ldexp(1.0f, -11)) == 0x3c00);     // tie -> even (down)
  CHECK(f16_bits_of(1.0f + 3 * std::ldexp(1.0f, -11)) == 0x3c02); // tie -> even (up)
  CHECK(f16_bits_of(1.0f + std::ldexp(1.2f, -11)) == 0x3c01);
  CHECK(f16_bits_of(65519.0f) == 0x7bff);
  CHECK(f16_bits_of(65520.0f) == 0x7c00); // the tie above 65504 rounds to infinity
  CHECK(f16_bits_of(1e10f) == 0x7c00);
  CHECK(f16_bits_of(-1e10f) == 0xfc00);
  CHECK(f16_bits_of(-std::numeric_limits<float>::infinity()) == 0xfc00);
  CHECK(f16_bits_of(-0.0f) == 0x8000);
  // Subnormal range: ulp 2^-24.
  CHECK(f16_bits_of(std::ldexp(1.0f, -25)) == 0x0000); // tie -> even 0
  CHECK(f16_bits_of(std::nextafter(std::ldexp(1.0f, -25), 1.0f)) == 0x0001);
  CHECK(f16_bits_of(3 * std::ldexp(1.0f, -25)) == 0x0002);                     // 1.5 ulp: tie -> even 2
  CHECK(f16_bits_of(std::ldexp(1.0f, -14) - std::ldexp(1.0f, -25)) == 0x0400); // carries into the smallest normal
  CHECK(f16_bits_of(std::ldexp(1.0f, -30)) == 0x0000);
  CHECK(f16_bits_of(std::numeric_limits<float>::denorm_min()) == 0x0000);
  const uint16_t nan16 = f16_bits_of(std::numeric_limits<float>::quiet_NaN());
  CHECK((nan16 & 0x7c00) == 0x7c00);
  CHECK((nan16 & 0x03ff) != 0);

  CHECK(f32_to_bf16(1.0f + std::ldexp(1.0f, -8)) == 0x3f80);     // tie -> even
  CHECK(f32_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)) == 0x3f82); // tie -> even
  CHECK(f32_to_bf16(std::numeric_limits<float>::max()) == 0x7f80);
  CHECK(std::isnan(bf16_to_f32(f32_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  CHECK(std::isnan(bf16_to_f32(f32_to_bf16(std::bit_cast<float>(0x7f800001u))))); // tiny payload stays NaN

  // Random values: the result is one of the two neighbours and the nearer one.
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> exponent(-26.0f, 16.0f);
  for (int i = 0; i < 20000; ++i) {
    const float x = std::exp2(exponent(rng)) * ((rng() & 1) != 0 ? -1.0f : 1.0f);
    if (std::fabs(x) >= 65504.0f)
      continue;
    const uint16_t h = f32_to_f16(x);
    const double err = std::fabs(static_cast<double>(f16_to_f32(h)) - x);
    for (const int step : {-1, 1}) {
      const float neighbour = f16_to_f32(static_cast<uint16_t>(h + step));
      if (std::isfinite(neighbour) && std::signbit(neighbour) == std::signbit(x))
        CHECK(err <= std::fabs(static_cast<double>(neighbour) - x));
    }
  }
}

// --- the real model ---------------------------------------------------------------

TEST_CASE("stories260k loads: every shape, tied output, spot values read independently") {
  const model_config cfg = load_model_config(stories_dir());
  const tensor_store store = tensor_store::open(stories_dir());
  CHECK(store.tensor_count() == 48);
  const model_weights w = load_model_weights(store, cfg);

  CHECK(w.embed_tokens.size() == 512 * 64);
  CHECK(w.final_norm.size() == 64);
  CHECK(w.lm_head.empty()); // tied
  REQUIRE(w.layers.size() == 5);
  for (const layer_weights& l : w.layers) {
    CHECK(l.input_norm.size() == 64);
    CHECK(l.q_proj.size() == 64 * 64);
    CHECK(l.k_proj.size() == 32 * 64);
    CHECK(l.v_proj.size() == 32 * 64);
    CHECK(l.o_proj.size() == 64 * 64);
    CHECK(l.q_bias.empty());
    CHECK(l.k_bias.empty());
    CHECK(l.v_bias.empty());
    CHECK(l.post_attention_norm.size() == 64);
    CHECK(l.gate_proj.size() == 172 * 64);
    CHECK(l.up_proj.size() == 172 * 64);
    CHECK(l.down_proj.size() == 64 * 172);
  }
  CHECK(w.output_projection().data() == w.embed_tokens.data());
  CHECK(w.output_projection().size() == w.embed_tokens.size());

  // Independent read of the file (own header parse + memcpy) against the loader.
  const raw_file raw = read_raw(stories_dir() / "model.safetensors");
  CHECK(floats_of(raw, "model.norm.weight") == w.final_norm);
  CHECK(floats_of(raw, "model.embed_tokens.weight") == w.embed_tokens);
  CHECK(floats_of(raw, "model.layers.3.self_attn.k_proj.weight") == w.layers[3].k_proj);
  CHECK(floats_of(raw, "model.layers.4.mlp.down_proj.weight") == w.layers[4].down_proj);
  // Values also read with python's struct module when the test was written.
  CHECK(w.final_norm[0] == 2.4583089351654053f);
  CHECK(w.final_norm[1] == 1.3673226833343506f);
  CHECK(w.embed_tokens[0] == -0.29474878311157227f);
  CHECK(w.layers[4].down_proj[3] == 0.20311811566352844f);
  for (const std::vector<float>* v : all_vectors(w))
    for (const float x : *v)
      REQUIRE(std::isfinite(x));

  // The README says lm_head.weight is stored as an exact copy of the embedding.
  CHECK(to_f32(store.get("lm_head.weight")) == w.embed_tokens);

  // Loading twice gives identical weights.
  const model_weights again = load_model_weights(store, cfg);
  CHECK(all_vectors(again).size() == all_vectors(w).size());
  for (std::size_t i = 0; i < all_vectors(w).size(); ++i)
    CHECK(*all_vectors(again)[i] == *all_vectors(w)[i]);
}

TEST_CASE("stories260k untied: lm_head.weight is then loaded and used") {
  temp_dir dir{"troupe_weights"};
  copy_model(dir.path);
  edit_config(dir.path, [](json::object& c) { c["tie_word_embeddings"] = false; });
  const model_weights w = load_folder(dir.path);
  CHECK(w.lm_head == w.embed_tokens);
  CHECK(w.output_projection().data() == w.lm_head.data());
}

TEST_CASE("broken model folders give model_errors that name the problem") {
  temp_dir dir{"troupe_weights"};
  copy_model(dir.path);
  const fs::path st = dir.path / "model.safetensors";

  SUBCASE("missing config.json") {
    fs::remove(dir.path / "config.json");
    CHECK_MODEL_ERROR(load_folder(dir.path), "config.json: cannot open");
  }
  SUBCASE("missing model.safetensors") {
    fs::remove(st);
    CHECK_MODEL_ERROR(load_folder(dir.path), "has neither model.safetensors nor model.safetensors.index.json");
  }
  SUBCASE("truncated inside the header") {
    fs::resize_file(st, 2000);
    CHECK_MODEL_ERROR(load_folder(dir.path), "model.safetensors: header length 4944 exceeds file size 2000");
  }
  SUBCASE("truncated inside the data") {
    fs::resize_file(st, 1176152 - 1000);
    CHECK_MODEL_ERROR(load_folder(dir.path), "exceed the data section of 1170200 bytes");
  }
  SUBCASE("header length out of range") {
    std::vector<char> bytes = read_bytes(st);
    const uint64_t length = 1'000'000'000'000ull;
    std::memcpy(bytes.data(), &length, 8);
    write_bytes(st, bytes);
    CHECK_MODEL_ERROR(load_folder(dir.path),
                      "model.safetensors: header length 1000000000000 exceeds file size 1176152");
  }
  SUBCASE("header not JSON") {
    std::vector<char> bytes = read_bytes(st);
    bytes[8 + 40] = '\x01';
    write_bytes(st, bytes);
    CHECK_MODEL_ERROR(load_folder(dir.path), "model.safetensors: header is not valid JSON");
  }
  SUBCASE("data_offsets out of range") {
    edit_header(dir.path, [](json::object& h) {
      h["model.norm.weight"].as_object()["data_offsets"] = json::array{1171000, 1171256};
    });
    CHECK_MODEL_ERROR(
        load_folder(dir.path),
        "tensor 'model.norm.weight' data_offsets [1171000, 1171256] exceed the data section of 1171200 bytes");
  }
  SUBCASE("overlapping offsets") {
    edit_header(dir.path, [](json::object& h) {
      h["model.norm.weight"].as_object()["data_offsets"] = json::array{131000, 131256};
    });
    CHECK_MODEL_ERROR(load_folder(dir.path), "overlap");
  }
  SUBCASE("offsets and shape size mismatch") {
    edit_header(dir.path, [](json::object& h) { h["model.norm.weight"].as_object()["shape"] = json::array{65}; });
    CHECK_MODEL_ERROR(
        load_folder(dir.path),
        "tensor 'model.norm.weight' data_offsets [1170944, 1171200] hold 256 bytes, but shape [65] of F32 needs 260");
  }
  SUBCASE("unknown dtype I8") {
    edit_header(dir.path, [](json::object& h) { h["model.norm.weight"].as_object()["dtype"] = "I8"; });
    CHECK_MODEL_ERROR(load_folder(dir.path), "tensor 'model.norm.weight' has dtype 'I8', which is not supported");
  }
  SUBCASE("unsupported dtype F64") {
    edit_header(dir.path, [](json::object& h) {
      json::object& t = h["model.norm.weight"].as_object();
      t["dtype"] = "F64";
      t["shape"] = json::array{32};
    });
    CHECK_MODEL_ERROR(load_folder(dir.path), "has dtype 'F64'");
  }
  SUBCASE("shape differs from config.json (intermediate_size 171)") {
    edit_config(dir.path, [](json::object& c) { c["intermediate_size"] = 171; });
    CHECK_MODEL_ERROR(
        load_folder(dir.path),
        "model.safetensors: tensor 'model.layers.0.mlp.gate_proj.weight' has shape [172, 64], expected [171, 64]");
  }
  SUBCASE("shape differs from config.json (num_key_value_heads 8)") {
    edit_config(dir.path, [](json::object& c) { c["num_key_value_heads"] = 8; });
    CHECK_MODEL_ERROR(load_folder(dir.path),
                      "tensor 'model.layers.0.self_attn.k_proj.weight' has shape [32, 64], expected [64, 64]");
  }
  SUBCASE("a missing tensor") {
    const safetensors_file original = safetensors_file::open(stories_dir() / "model.safetensors");
    std::vector<tensor_view> kept;
    for (const std::string& name : original.names())
      if (name != "model.layers.3.self_attn.v_proj.weight")
        kept.push_back(original.get(name));
    write_safetensors(st, kept);
    CHECK_MODEL_ERROR(load_folder(dir.path), "tensor 'model.layers.3.self_attn.v_proj.weight' is missing");
  }
  SUBCASE("a stray tensor the config has no use for") {
    const safetensors_file original = safetensors_file::open(stories_dir() / "model.safetensors");
    std::vector<tensor_view> tensors;
    for (const std::string& name : original.names())
      tensors.push_back(original.get(name));
    const std::vector<float> bias(64, 0.5f);
    tensors.push_back(
        {"model.layers.2.self_attn.o_proj.bias", weight_dtype::f32, {64}, std::as_bytes(std::span(bias))});
    write_safetensors(st, tensors);
    CHECK_MODEL_ERROR(load_folder(dir.path),
                      "tensor 'model.layers.2.self_attn.o_proj.bias' is not used by a llama model");
  }
  SUBCASE("fewer layers in config.json than in the weights") {
    edit_config(dir.path, [](json::object& c) { c["num_hidden_layers"] = 4; });
    CHECK_MODEL_ERROR(load_folder(dir.path), "tensor 'model.layers.4.");
  }
  SUBCASE("untied config without lm_head.weight") {
    const safetensors_file original = safetensors_file::open(stories_dir() / "model.safetensors");
    std::vector<tensor_view> kept;
    for (const std::string& name : original.names())
      if (name != "lm_head.weight")
        kept.push_back(original.get(name));
    write_safetensors(st, kept);
    CHECK_NOTHROW(load_folder(dir.path)); // tied: not needed
    edit_config(dir.path, [](json::object& c) { c["tie_word_embeddings"] = false; });
    CHECK_MODEL_ERROR(load_folder(dir.path), "tensor 'lm_head.weight' is missing");
  }
  SUBCASE("rope_scaling yarn") {
    edit_config(dir.path, [](json::object& c) {
      c["rope_scaling"] = json::object{{"rope_type", "yarn"}, {"factor", 4.0}};
    });
    CHECK_MODEL_ERROR(load_folder(dir.path),
                      "config.json: rope_scaling.rope_type 'yarn' is not supported (supported: linear, llama3)");
  }
  SUBCASE("hidden_act gelu") {
    edit_config(dir.path, [](json::object& c) { c["hidden_act"] = "gelu"; });
    CHECK_MODEL_ERROR(load_folder(dir.path), "config.json: hidden_act 'gelu' is not supported");
  }
  SUBCASE("mlp_bias true") {
    edit_config(dir.path, [](json::object& c) { c["mlp_bias"] = true; });
    CHECK_MODEL_ERROR(load_folder(dir.path), "config.json: mlp_bias true is not supported");
  }
  SUBCASE("non-numeric hidden_size") {
    edit_config(dir.path, [](json::object& c) { c["hidden_size"] = "sixty-four"; });
    CHECK_MODEL_ERROR(load_folder(dir.path), "config.json: hidden_size must be an integer, got \"sixty-four\"");
  }
  SUBCASE("config.json that is not JSON") {
    std::ofstream(dir.path / "config.json", std::ios::trunc) << "{\"hidden_size\": 64,";
    CHECK_MODEL_ERROR(load_folder(dir.path), "config.json: not valid JSON");
  }
}

TEST_CASE("a sharded copy of stories260k loads identically, a missing shard is an error") {
  temp_dir dir{"troupe_weights"};
  fs::copy_file(stories_dir() / "config.json", dir.path / "config.json");
  const safetensors_file original = safetensors_file::open(stories_dir() / "model.safetensors");
  std::vector<tensor_view> first, second;
  json::object weight_map;
  for (const std::string& name : original.names()) {
    // Layers 0-1 and the embeddings in shard 1, the rest in shard 2, as HF splits by size.
    const bool in_first = name.starts_with("model.embed") || name.starts_with("lm_head") ||
                          name.starts_with("model.layers.0.") || name.starts_with("model.layers.1.");
    (in_first ? first : second).push_back(original.get(name));
    weight_map[name] = in_first ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
  }
  write_safetensors(dir.path / "model-00001-of-00002.safetensors", first);
  write_safetensors(dir.path / "model-00002-of-00002.safetensors", second);
  std::ofstream(dir.path / "model.safetensors.index.json")
      << json::serialize(json::object{{"metadata", json::object{{"total_size", 1171200}}}, {"weight_map", weight_map}});

  const model_weights sharded = load_folder(dir.path);
  const model_weights single = load_folder(stories_dir());
  const auto a = all_vectors(sharded), b = all_vectors(single);
  REQUIRE(a.size() == b.size());
  for (std::size_t i = 0; i < a.size(); ++i)
    CHECK(*a[i] == *b[i]);

  fs::remove(dir.path / "model-00002-of-00002.safetensors");
  CHECK_MODEL_ERROR(load_folder(dir.path), "names shard 'model-00002-of-00002.safetensors', which does not exist");
}

TEST_CASE("F16 and BF16 copies of stories260k load within the format's precision") {
  const model_weights reference = load_folder(stories_dir());
  const safetensors_file original = safetensors_file::open(stories_dir() / "model.safetensors");

  for (const weight_dtype dtype : {weight_dtype::bf16, weight_dtype::f16}) {
    CAPTURE(dtype_name(dtype));
    temp_dir dir{"troupe_weights"};
    fs::copy_file(stories_dir() / "config.json", dir.path / "config.json");
    edit_config(dir.path,
                [dtype](json::object& c) { c["torch_dtype"] = dtype == weight_dtype::f16 ? "float16" : "bfloat16"; });
    std::vector<owned_tensor> converted;
    for (const std::string& name : original.names())
      converted.push_back(convert_tensor(original.get(name), dtype));
    write_owned(dir.path / "model.safetensors", converted);

    const model_config cfg = load_model_config(dir.path);
    CHECK(cfg.torch_dtype == dtype);
    const tensor_store store = tensor_store::open(dir.path);
    CHECK(store.get("model.norm.weight").dtype == dtype);
    const model_weights w = load_model_weights(store, cfg);

    // Relative precision: 8 significant bits for bf16, 11 for f16 (plus f16's subnormal step).
    const double relative = dtype == weight_dtype::bf16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
    const double absolute = dtype == weight_dtype::bf16 ? 0.0 : std::ldexp(1.0, -25);
    const auto got = all_vectors(w), want = all_vectors(reference);
    REQUIRE(got.size() == want.size());
    std::size_t checked = 0;
    for (std::size_t t = 0; t < got.size(); ++t) {
      REQUIRE(got[t]->size() == want[t]->size());
      for (std::size_t i = 0; i < got[t]->size(); ++i) {
        const double x = (*want[t])[i], y = (*got[t])[i];
        const double error = std::fabs(x - y);
        const double allowed = std::fabs(x) * relative + absolute;
        if (error > allowed) {
          INFO("tensor " << t << " element " << i << ": " << x << " vs " << y);
          CHECK(error <= allowed);
        }
        // And exactly what one rounding step gives.
        const float expected = dtype == weight_dtype::bf16 ? bf16_to_f32(f32_to_bf16(static_cast<float>(x)))
                                                           : f16_to_f32(f32_to_f16(static_cast<float>(x)));
        if (static_cast<float>(y) != expected)
          CHECK(static_cast<float>(y) == expected);
        ++checked;
      }
    }
    CHECK(checked == reference.embed_tokens.size() + 64 + 5 * (64 * 2 + 64 * 64 * 2 + 32 * 64 * 2 + 172 * 64 * 3));
  }
}

TEST_CASE("synthetic Qwen2 model: q/k/v biases loaded, a missing bias is an error") {
  temp_dir dir{"troupe_weights"};
  const std::string config = R"({"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2",
      "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4,
      "num_key_value_heads": 2, "vocab_size": 40, "max_position_embeddings": 128,
      "tie_word_embeddings": false, "torch_dtype": "float32", "use_sliding_window": false, "sliding_window": 64})";
  std::ofstream(dir.path / "config.json") << config;
  const model_config cfg = load_model_config(dir.path);
  REQUIRE(cfg.attention_bias);
  std::mt19937 rng(99);
  std::vector<owned_tensor> tensors = synthetic_tensors(cfg, true, true, rng);
  write_owned(dir.path / "model.safetensors", tensors);

  const model_weights w = load_folder(dir.path);
  REQUIRE(w.layers.size() == 2);
  CHECK(w.layers[1].q_bias.size() == 32);
  CHECK(w.layers[1].k_bias.size() == 16);
  CHECK(w.layers[1].v_bias.size() == 16);
  CHECK(w.lm_head.size() == 40 * 32);
  CHECK(w.output_projection().data() == w.lm_head.data());
  const tensor_store store = tensor_store::open(dir.path);
  CHECK(to_f32(store.get("model.layers.1.self_attn.k_proj.bias")) == w.layers[1].k_bias);

  std::erase_if(tensors, [](const owned_tensor& t) { return t.name == "model.layers.1.self_attn.v_proj.bias"; });
  write_owned(dir.path / "model.safetensors", tensors);
  CHECK_MODEL_ERROR(load_folder(dir.path), "tensor 'model.layers.1.self_attn.v_proj.bias' is missing");
}

TEST_CASE("synthetic Llama with head_dim * heads != hidden_size (explicit head_dim)") {
  temp_dir dir{"troupe_weights"};
  std::ofstream(dir.path / "config.json") << R"({"model_type": "llama", "hidden_size": 48,
      "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 1,
      "head_dim": 16, "vocab_size": 20, "tie_word_embeddings": true})";
  const model_config cfg = load_model_config(dir.path);
  std::mt19937 rng(5);
  write_owned(dir.path / "model.safetensors", synthetic_tensors(cfg, false, false, rng));
  const model_weights w = load_folder(dir.path);
  CHECK(w.layers[0].q_proj.size() == 64 * 48);
  CHECK(w.layers[0].k_proj.size() == 16 * 48);
  CHECK(w.layers[0].o_proj.size() == 48 * 64);
  CHECK(w.lm_head.empty());
}

namespace {

// The tensors of `split` with each layer's q/k/v and gate/up concatenated by rows, as Phi-3 stores them.
std::vector<owned_tensor> fused_as_phi3(const std::vector<owned_tensor>& split, int layers) {
  std::vector<owned_tensor> out;
  auto find = [&](const std::string& name) -> const owned_tensor& {
    for (const owned_tensor& t : split)
      if (t.name == name)
        return t;
    FAIL("no tensor " << name);
    return split.front();
  };
  auto concat = [&](std::string name, std::initializer_list<std::string> parts) {
    owned_tensor fused{std::move(name), weight_dtype::f32, {0, 0}, {}};
    for (const std::string& part : parts) {
      const owned_tensor& t = find(part);
      fused.shape = {fused.shape[0] + t.shape[0], t.shape[1]};
      fused.bytes.insert(fused.bytes.end(), t.bytes.begin(), t.bytes.end());
    }
    out.push_back(std::move(fused));
  };
  for (const owned_tensor& t : split)
    if (t.name.find("q_proj") == std::string::npos && t.name.find("k_proj") == std::string::npos &&
        t.name.find("v_proj") == std::string::npos && t.name.find("gate_proj") == std::string::npos &&
        t.name.find("up_proj") == std::string::npos)
      out.push_back(t);
  for (int l = 0; l < layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    concat(p + "self_attn.qkv_proj.weight",
           {p + "self_attn.q_proj.weight", p + "self_attn.k_proj.weight", p + "self_attn.v_proj.weight"});
    concat(p + "mlp.gate_up_proj.weight", {p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight"});
  }
  return out;
}

} // namespace

TEST_CASE("a Phi-3 checkpoint's fused qkv_proj and gate_up_proj load as the split Llama layers, whole and per rank") {
  const std::string shapes = R"("hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2,
      "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 40, "max_position_embeddings": 128,
      "tie_word_embeddings": false, "torch_dtype": "float32")";
  temp_dir llama{"troupe_weights"}, phi3{"troupe_weights"};
  std::ofstream(llama.path / "config.json") << R"({"model_type": "llama", )" + shapes + "}";
  std::ofstream(phi3.path / "config.json")
      << R"({"architectures": ["Phi3ForCausalLM"], "model_type": "phi3", "sliding_window": 2047, )" + shapes + "}";
  const model_config llama_cfg = load_model_config(llama.path), phi3_cfg = load_model_config(phi3.path);
  REQUIRE(phi3_cfg.fused_projections);
  std::mt19937 rng(7);
  const std::vector<owned_tensor> split = synthetic_tensors(llama_cfg, false, true, rng);
  write_owned(llama.path / "model.safetensors", split);
  std::vector<owned_tensor> fused = fused_as_phi3(split, 2);
  write_owned(phi3.path / "model.safetensors", fused);

  const model_weights want = load_folder(llama.path), got = load_folder(phi3.path);
  const auto want_all = all_vectors(want), got_all = all_vectors(got);
  for (std::size_t i = 0; i < want_all.size(); ++i) {
    CAPTURE(i);
    CHECK(*got_all[i] == *want_all[i]);
  }
  // Each rank reads its heads' rows of q, k and v and its MLP rows of gate and up out of the fused tensors.
  const tensor_store llama_store = tensor_store::open(llama.path), phi3_store = tensor_store::open(phi3.path);
  for (const shard_shape& shape : shard_shapes(phi3_cfg, 2)) {
    CAPTURE(shape.rank);
    const model_weights a = load_model_weight_shard(llama_store, llama_cfg, shape);
    const model_weights b = load_model_weight_shard(phi3_store, phi3_cfg, shape);
    const auto a_all = all_vectors(a), b_all = all_vectors(b);
    for (std::size_t i = 0; i < a_all.size(); ++i) {
      CAPTURE(i);
      CHECK(*b_all[i] == *a_all[i]);
    }
  }

  // A fused tensor of the wrong height, and a split tensor left beside the fused ones, are refused by name.
  std::vector<owned_tensor> short_qkv = fused;
  for (owned_tensor& t : short_qkv)
    if (t.name == "model.layers.1.self_attn.qkv_proj.weight") {
      t.shape[0] -= 1;
      t.bytes.resize(t.bytes.size() - 32 * 4);
    }
  write_owned(phi3.path / "model.safetensors", short_qkv);
  CHECK_MODEL_ERROR(load_folder(phi3.path),
                    "tensor 'model.layers.1.self_attn.qkv_proj.weight' has shape [63, 32], expected [64, 32]");
  fused.push_back(split[5]); // a layer-0 tensor of the split form
  write_owned(phi3.path / "model.safetensors", fused);
  CHECK_MODEL_ERROR(load_folder(phi3.path), "is not used by a phi3 model");
}
