// The fused CUDA RoPE + KV-cache write matches the CPU reference (rotary_embedding,
// write_kv_cache; a q/k/v bias is added earlier, by the QKV GEMM): q rotated in place, K rotated into its
// slot, V copied, every other cache element untouched, tokens with slot -1 not
// cached; block sizes 1, 16, 128; plain and Llama-3-scaled frequencies; Qwen3's per-head q/k
// RMSNorm before the rotation (kernels/cpu head_rms_norm as the reference), on heads of very
// different sizes so that a norm left out or taken over the wrong values fails.
// Tolerances: fp32 |d| <= 1e-5 (1 + |x|) (sincosf vs cosf/sinf, a few ulp);
// bf16 |d| <= 1e-4 + 2^-7 |x|, fp16 1e-4 + 2^-10 |x| (one rounding of each stored value, twice
// its unit roundoff);
// fp8 e4m3 cache |d| <= scale 2^-9 + 2^-3 |x| (one fp8 step: 3 mantissa bits).
#include <doctest/doctest.h>

#include <algorithm>
#include <numeric>

#include "kernels/cpu/cpu_kernels.hpp"
#include "kernels/cuda/rope_write_kv.hpp"
#include "runtime/rope.hpp"
#include "tests/gpu/gpu_test_support.hpp"

using namespace troupe::testing::gpu;
namespace kcu = troupe::kernels::cuda;
namespace kcpu = troupe::kernels::cpu;

namespace {

template <class T, class C>
void check_rope_write_kv(int heads, int kv_heads, int head_dim, int block_size, bool llama3, float k_scale,
                         float v_scale, bool qk_norm = false, float norm_offset = 0.0f) {
  CAPTURE(qk_norm);
  CAPTURE(norm_offset);
  CAPTURE(heads);
  CAPTURE(kv_heads);
  CAPTURE(head_dim);
  CAPTURE(block_size);
  CAPTURE(llama3);
  const int tokens = 29, width = (heads + 2 * kv_heads) * head_dim;
  const int num_blocks = (tokens + block_size - 1) / block_size + 3;
  std::mt19937 rng(head_dim * 1000 + block_size * 10 + heads);

  troupe::runtime::model_config cfg;
  cfg.head_dim = head_dim;
  cfg.rope_theta = llama3 ? 500000.0f : 10000.0f;
  if (llama3) {
    cfg.rope.type = troupe::runtime::rope_scaling_type::llama3;
    cfg.rope.factor = 8.0f;
    cfg.rope.low_freq_factor = 1.0f;
    cfg.rope.high_freq_factor = 4.0f;
    cfg.rope.original_max_position_embeddings = 8192;
  }
  const auto inv_freq = troupe::runtime::rope_inv_freq(cfg);

  auto qkv = random_values(static_cast<std::size_t>(tokens) * width, rng);
  constexpr float eps = 1e-6f;
  std::vector<float> q_norm, k_norm;
  if (qk_norm) {
    // q and k heads 1x, 4x and 7x as large: each head's own statistic is what makes them equal
    // again. v is not normalized: left as it is, so that v / v_scale stays inside e4m3's range.
    const std::size_t qk_columns = static_cast<std::size_t>(heads + kv_heads) * head_dim;
    for (std::size_t i = 0; i < qkv.size(); ++i)
      if (i % width < qk_columns)
        qkv[i] *= 1.0f + 3.0f * static_cast<float>(i % width / head_dim % 3);
    q_norm = random_values(head_dim, rng);
    k_norm = random_values(head_dim, rng);
    for (auto* w : {&q_norm, &k_norm}) {
      for (float& x : *w)
        x = 1.0f - norm_offset + 0.5f * x; // scales near 1, as trained norm weights give (Gemma: w near 0)
      round_through<T>(*w);
    }
  }
  round_through<T>(qkv);
  std::vector<std::int32_t> positions(tokens);
  std::uniform_int_distribution<std::int32_t> pos(0, 5000);
  for (auto& p : positions)
    p = pos(rng);
  positions[0] = 0;
  positions[1] = 131071; // a long-context angle
  // Distinct slots in scattered order; a few tokens are not cached.
  std::vector<std::int64_t> slots(static_cast<std::size_t>(num_blocks) * block_size);
  std::iota(slots.begin(), slots.end(), 0);
  std::shuffle(slots.begin(), slots.end(), rng);
  std::vector<std::int64_t> slot_mapping(slots.begin(), slots.begin() + tokens);
  slot_mapping[2] = -1;
  slot_mapping[tokens - 1] = -1;

  // Reference: split the rows, rotate, scatter; unwritten cache elements stay NaN.
  std::vector<float> q(static_cast<std::size_t>(tokens) * heads * head_dim);
  std::vector<float> k(static_cast<std::size_t>(tokens) * kv_heads * head_dim), v(k.size());
  for (int t = 0; t < tokens; ++t)
    for (int c = 0; c < width; ++c) {
      const float x = qkv[static_cast<std::size_t>(t) * width + c];
      const int q_cols = heads * head_dim, k_cols = kv_heads * head_dim;
      if (c < q_cols)
        q[static_cast<std::size_t>(t) * q_cols + c] = x;
      else if (c < q_cols + k_cols)
        k[static_cast<std::size_t>(t) * k_cols + c - q_cols] = x;
      else
        v[static_cast<std::size_t>(t) * k_cols + c - q_cols - k_cols] = x;
    }
  if (qk_norm) { // the reference scales by offset + w, added in fp32 (exact for T's w)
    std::vector<float> q_scale(q_norm), k_scale_w(k_norm);
    for (auto* w : {&q_scale, &k_scale_w})
      for (float& x : *w)
        x += norm_offset;
    kcpu::head_rms_norm(q, heads, head_dim, q_scale, eps);
    kcpu::head_rms_norm(k, kv_heads, head_dim, k_scale_w, eps);
  }
  kcpu::rotary_embedding(q, heads, head_dim, positions, inv_freq);
  kcpu::rotary_embedding(k, kv_heads, head_dim, positions, inv_freq);
  const std::size_t pool = static_cast<std::size_t>(num_blocks) * kv_heads * block_size * head_dim;
  std::vector<float> k_expected(pool, NAN), v_expected(pool, NAN);
  kcpu::write_kv_cache(k, v, slot_mapping, kv_heads, head_dim, block_size, k_expected, v_expected);
  auto qkv_expected = qkv; // q rotated; k and v columns as they were
  for (int t = 0; t < tokens; ++t)
    std::copy_n(q.data() + static_cast<std::size_t>(t) * heads * head_dim, heads * head_dim,
                qkv_expected.data() + static_cast<std::size_t>(t) * width);

  auto d_qkv = to_device<T>(qkv);
  auto d_pos = to_device_raw(positions);
  auto d_freq = to_device_raw(inv_freq);
  auto d_slots = to_device_raw(slot_mapping);
  auto d_k = poisoned<C>(pool);
  auto d_v = poisoned<C>(pool);
  auto d_q_norm = to_device<T>(qk_norm ? q_norm : std::vector<float>(1));
  auto d_k_norm = to_device<T>(qk_norm ? k_norm : std::vector<float>(1));
  kcu::rope_write_kv_params<T, C> p;
  p.qkv = d_qkv.data();
  p.positions = d_pos.data();
  p.inv_freq = d_freq.data();
  p.slot_mapping = d_slots.data();
  p.k_cache = d_k.data();
  p.v_cache = d_v.data();
  p.tokens = tokens;
  p.heads = heads;
  p.kv_heads = kv_heads;
  p.head_dim = head_dim;
  p.block_size = block_size;
  p.k_scale = k_scale;
  p.v_scale = v_scale;
  if (qk_norm) {
    p.q_norm = d_q_norm.data();
    p.k_norm = d_k_norm.data();
    p.norm_eps = eps;
    p.norm_weight_offset = norm_offset;
  }
  REQUIRE(kcu::rope_write_kv(p, nullptr) == cudaSuccess);
  sync_or_fail();

  const tolerance act_tol =
      std::is_same_v<T, float> ? tolerance{1e-5f, 1e-5f} : tolerance{1e-4f, 2 * unit_roundoff<T>()};
  tolerance k_tol = act_tol, v_tol = act_tol;
  if constexpr (std::is_same_v<C, __nv_fp8_e4m3>) {
    k_tol = {k_scale / 512, 0.125f};
    v_tol = {v_scale / 512, 0.125f};
  }
  const std::string dt = std::string(dtype_name<T>()) + "/" + dtype_name<C>();
  check_close(from_device(d_qkv), qkv_expected, act_tol, "qkv " + dt);
  check_close(from_device(d_k, k_scale), k_expected, k_tol, "k cache " + dt);
  check_close(from_device(d_v, v_scale), v_expected, v_tol, "v cache " + dt);
}

} // namespace

TEST_CASE("cuda rope_write_kv matches the CPU reference in fp32") {
  for (int bs : {1, 16, 128}) {
    check_rope_write_kv<float, float>(8, 4, 8, bs, false, 1.0f, 1.0f);
    check_rope_write_kv<float, float>(6, 2, 64, bs, false, 1.0f, 1.0f);
    check_rope_write_kv<float, float>(4, 4, 128, bs, true, 1.0f, 1.0f);
    // Packs of 4 floats: 12 heads a block with 16 idle threads (head_dim 80), 8 (head_dim 256).
    check_rope_write_kv<float, float>(5, 1, 80, bs, false, 1.0f, 1.0f);
    check_rope_write_kv<float, float>(2, 1, 256, bs, false, 1.0f, 1.0f);
    check_rope_write_kv<float, float>(3, 1, 6, bs, false, 1.0f, 1.0f); // packs of one
  }
}

TEST_CASE("cuda rope_write_kv matches the CPU reference in bf16") {
  for (int bs : {1, 16, 128}) {
    check_rope_write_kv<__nv_bfloat16, __nv_bfloat16>(8, 4, 8, bs, false, 1.0f, 1.0f);
    check_rope_write_kv<__nv_bfloat16, __nv_bfloat16>(6, 2, 64, bs, false, 1.0f, 1.0f);
    check_rope_write_kv<__nv_bfloat16, __nv_bfloat16>(4, 4, 128, bs, true, 1.0f, 1.0f);
    // Packs of 8 with 40 of 256 threads idle (head_dim 80), and packs of one element (head_dim 6).
    check_rope_write_kv<__nv_bfloat16, __nv_bfloat16>(5, 1, 80, bs, false, 1.0f, 1.0f);
    check_rope_write_kv<__nv_bfloat16, __nv_bfloat16>(3, 1, 6, bs, false, 1.0f, 1.0f);
  }
}

TEST_CASE("cuda rope_write_kv matches the CPU reference in fp16, into an fp16 or an fp8 cache") {
  for (int bs : {1, 16, 128}) {
    check_rope_write_kv<__half, __half>(6, 2, 64, bs, false, 1.0f, 1.0f);
    check_rope_write_kv<__half, __half>(4, 4, 128, bs, true, 1.0f, 1.0f);
    check_rope_write_kv<__half, __half>(5, 1, 80, bs, false, 1.0f, 1.0f);
    check_rope_write_kv<__half, __half>(3, 1, 6, bs, false, 1.0f, 1.0f);
    check_rope_write_kv<__half, __nv_fp8_e4m3>(4, 4, 128, bs, true, 0.05f, 0.03f);
  }
}

TEST_CASE("cuda rope_write_kv into an fp8 e4m3 cache stores value / scale") {
  for (int bs : {1, 16, 128}) {
    check_rope_write_kv<__nv_bfloat16, __nv_fp8_e4m3>(6, 2, 64, bs, false, 0.05f, 0.03f);
    check_rope_write_kv<__nv_bfloat16, __nv_fp8_e4m3>(4, 4, 128, bs, true, 0.05f, 0.03f);
    check_rope_write_kv<__nv_bfloat16, __nv_fp8_e4m3>(3, 1, 6, bs, false, 0.05f, 0.03f);
  }
}

TEST_CASE("cuda rope_write_kv normalizes each q and k head first (Qwen3's q/k norm), as the CPU reference") {
  for (int bs : {1, 16}) {
    // Qwen3-0.6B's heads (16 of 128, 8 kv heads), other GQA groups, head_dim 64 and 128.
    check_rope_write_kv<float, float>(16, 8, 128, bs, false, 1.0f, 1.0f, true);
    check_rope_write_kv<float, float>(6, 2, 64, bs, false, 1.0f, 1.0f, true);
    check_rope_write_kv<float, float>(5, 1, 128, bs, true, 1.0f, 1.0f, true);
    check_rope_write_kv<__nv_bfloat16, __nv_bfloat16>(16, 8, 128, bs, false, 1.0f, 1.0f, true);
    check_rope_write_kv<__nv_bfloat16, __nv_bfloat16>(12, 4, 64, bs, false, 1.0f, 1.0f, true);
    // 40 heads of 64: more heads than one block holds (several blocks a token).
    check_rope_write_kv<__nv_bfloat16, __nv_bfloat16>(40, 8, 64, bs, false, 1.0f, 1.0f, true);
    check_rope_write_kv<__half, __half>(7, 7, 128, bs, false, 1.0f, 1.0f, true);
    check_rope_write_kv<__nv_bfloat16, __nv_fp8_e4m3>(16, 8, 128, bs, false, 0.05f, 0.03f, true);
  }
}

TEST_CASE("cuda rope_write_kv scales the q/k norms by (1 + w) with Gemma 3's weight offset") {
  for (int bs : {1, 16}) {
    check_rope_write_kv<float, float>(8, 4, 128, bs, false, 1.0f, 1.0f, true, 1.0f);
    check_rope_write_kv<__nv_bfloat16, __nv_bfloat16>(8, 2, 256, bs, false, 1.0f, 1.0f, true, 1.0f);
    check_rope_write_kv<__half, __half>(4, 1, 64, bs, false, 1.0f, 1.0f, true, 1.0f);
  }
}

TEST_CASE("cuda rope_write_kv refuses a q norm without a k norm") {
  kcu::rope_write_kv_params<float, float> p;
  float weight = 1.0f;
  p.tokens = 1;
  p.heads = p.kv_heads = 1;
  p.head_dim = 8;
  p.block_size = 16;
  p.q_norm = &weight; // never read: refused before the launch
  CHECK(kcu::rope_write_kv(p, nullptr) == cudaErrorInvalidValue);
}
