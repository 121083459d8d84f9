// The CPU reference kernels against plain textbook formulas on random inputs:
// RMSNorm (per row and per head), linear (threaded or not), SwiGLU, RoPE's relative-position property,
// and paged attention against dense causal softmax attention with GQA.
#include <doctest/doctest.h>

#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/cpu/cpu_kernels.hpp"

namespace kc = troupe::kernels::cpu;

namespace {
std::vector<float> random_vector(std::size_t n, unsigned seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v)
    x = normal(rng);
  return v;
}
} // namespace

TEST_CASE("rms_norm divides by the root mean square and scales by the weight") {
  std::vector<float> x{3.0f, 4.0f}, w{1.0f, 2.0f}, out(2);
  kc::rms_norm(x, w, 2, 0.0f, out);
  float rms = std::sqrt((9.0f + 16.0f) / 2.0f);
  CHECK(out[0] == doctest::Approx(3.0f / rms));
  CHECK(out[1] == doctest::Approx(2.0f * 4.0f / rms));
}

TEST_CASE("head_rms_norm normalizes every head of every token by itself, with the shared weight") {
  const int tokens = 3, heads = 5, head_dim = 12;
  const float eps = 1e-6f;
  std::vector<float> x = random_vector(static_cast<std::size_t>(tokens) * heads * head_dim, 11, 3.0f);
  // Heads of very different sizes: one shared statistic would be visibly wrong.
  for (int i = 0; i < head_dim; ++i)
    x[static_cast<std::size_t>(1 * head_dim + i)] *= 50.0f;
  const std::vector<float> w = random_vector(head_dim, 12);
  std::vector<float> expected(x.size());
  for (int t = 0; t < tokens; ++t)
    for (int h = 0; h < heads; ++h) {
      const std::size_t base = (static_cast<std::size_t>(t) * heads + h) * head_dim;
      double sum_sq = 0.0;
      for (int i = 0; i < head_dim; ++i)
        sum_sq += double{x[base + i]} * x[base + i];
      const double inv_rms = 1.0 / std::sqrt(sum_sq / head_dim + eps);
      for (int i = 0; i < head_dim; ++i)
        expected[base + i] = static_cast<float>(x[base + i] * inv_rms * w[i]);
    }
  kc::head_rms_norm(x, heads, head_dim, w, eps);
  for (std::size_t i = 0; i < x.size(); ++i)
    CHECK(x[i] == doctest::Approx(expected[i]).epsilon(1e-5));
}

TEST_CASE("linear equals the naive triple loop, with and without threads") {
  const int rows = 5, in = 37, out = 129;
  auto x = random_vector(rows * in, 1), w = random_vector(out * in, 2), bias = random_vector(out, 3);
  std::vector<float> expected(rows * out);
  for (int r = 0; r < rows; ++r)
    for (int o = 0; o < out; ++o) {
      double s = bias[o];
      for (int i = 0; i < in; ++i)
        s += static_cast<double>(x[r * in + i]) * w[o * in + i];
      expected[r * out + o] = static_cast<float>(s);
    }
  kc::thread_pool pool(2);
  for (kc::thread_pool* p : {static_cast<kc::thread_pool*>(nullptr), &pool}) {
    std::vector<float> y(rows * out, NAN);
    kc::linear(x, rows, in, w, out, bias, y, p);
    for (int i = 0; i < rows * out; ++i)
      REQUIRE(y[i] == doctest::Approx(expected[i]).epsilon(1e-5));
  }
}

TEST_CASE("thread_pool::parallel_for covers every index exactly once") {
  kc::thread_pool pool(3);
  for (std::size_t n : {0u, 1u, 2u, 7u, 1000u}) {
    std::vector<int> hits(n, 0);
    pool.parallel_for(n, [&](std::size_t b, std::size_t e) {
      for (std::size_t i = b; i < e; ++i)
        ++hits[i];
    });
    CHECK(std::all_of(hits.begin(), hits.end(), [](int h) { return h == 1; }));
  }
}

TEST_CASE("silu_and_mul computes silu(gate) * up on a fused row") {
  std::vector<float> gate_up{1.0f, -2.0f, 3.0f, 0.5f}, out(2);
  kc::silu_and_mul(gate_up, 1, 2, out);
  CHECK(out[0] == doctest::Approx(1.0f / (1.0f + std::exp(-1.0f)) * 3.0f));
  CHECK(out[1] == doctest::Approx(-2.0f / (1.0f + std::exp(2.0f)) * 0.5f));
}

TEST_CASE("rotary embedding keeps norms and makes q.k depend only on the distance") {
  const int hd = 16;
  std::vector<float> inv_freq(hd / 2);
  for (int i = 0; i < hd / 2; ++i)
    inv_freq[i] = std::pow(10000.0f, -2.0f * i / hd);
  auto q = random_vector(hd, 4), k = random_vector(hd, 5);
  auto rotated_dot = [&](int pq, int pk) {
    auto a = q, b = k;
    std::vector<std::int32_t> p1{pq}, p2{pk};
    kc::rotary_embedding(a, 1, hd, p1, inv_freq);
    kc::rotary_embedding(b, 1, hd, p2, inv_freq);
    return std::inner_product(a.begin(), a.end(), b.begin(), 0.0f);
  };
  CHECK(rotated_dot(7, 3) == doctest::Approx(rotated_dot(104, 100)).epsilon(1e-4));
  CHECK(rotated_dot(0, 0) == doctest::Approx(std::inner_product(q.begin(), q.end(), k.begin(), 0.0f)));
  auto a = q;
  std::vector<std::int32_t> p{37};
  kc::rotary_embedding(a, 1, hd, p, inv_freq);
  CHECK(std::inner_product(a.begin(), a.end(), a.begin(), 0.0f) ==
        doctest::Approx(std::inner_product(q.begin(), q.end(), q.begin(), 0.0f)).epsilon(1e-5));
}

namespace {

// Dense causal softmax attention in double over contiguous K/V, each query seeing the `window` last
// positions (0: all), against the paged kernel over scattered blocks.
void check_paged_attention_against_dense(int window) {
  CAPTURE(window);
  const int heads = 4, kv_heads = 2, hd = 8, bs = 4, len = 11, num_blocks = 8;
  const int group = heads / kv_heads;
  auto q = random_vector(len * heads * hd, 6), k = random_vector(len * kv_heads * hd, 7),
       v = random_vector(len * kv_heads * hd, 8);
  std::vector<std::int32_t> table{5, 2, 7};  // 3 blocks of 4 hold 11 tokens
  std::vector<std::int64_t> slots(len);
  std::vector<std::int32_t> positions(len);
  for (int t = 0; t < len; ++t) {
    positions[t] = t;
    slots[t] = static_cast<std::int64_t>(table[t / bs]) * bs + t % bs;
  }
  std::vector<float> k_cache(num_blocks * kv_heads * bs * hd, NAN), v_cache(k_cache.size(), NAN);
  kc::write_kv_cache(k, v, slots, kv_heads, hd, bs, k_cache, v_cache);
  std::vector<float> out(len * heads * hd, NAN);
  std::vector<std::int32_t> query_start{0, len};
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  kc::paged_attention({.q = q,
                       .out = out,
                       .positions = positions,
                       .query_start = query_start,
                       .block_tables = table,
                       .max_blocks_per_seq = 3,
                       .heads = heads,
                       .kv_heads = kv_heads,
                       .head_dim = hd,
                       .block_size = bs,
                       .scale = scale,
                       .window = window,
                       .k_cache = k_cache,
                       .v_cache = v_cache},
                      nullptr);
  for (int t = 0; t < len; ++t)
    for (int h = 0; h < heads; ++h) {
      int kvh = h / group;
      const int first = window > 0 ? std::max(0, t - window + 1) : 0;
      std::vector<double> scores(t + 1, 0.0);
      double mx = -1e30;
      for (int s = first; s <= t; ++s) {
        double d = 0;
        for (int i = 0; i < hd; ++i)
          d += q[(t * heads + h) * hd + i] * k[(s * kv_heads + kvh) * hd + i];
        scores[s] = d * scale;
        mx = std::max(mx, scores[s]);
      }
      double z = 0;
      for (int s = first; s <= t; ++s)
        z += (scores[s] = std::exp(scores[s] - mx));
      for (int i = 0; i < hd; ++i) {
        double o = 0;
        for (int s = first; s <= t; ++s)
          o += scores[s] / z * v[(s * kv_heads + kvh) * hd + i];
        REQUIRE(out[(t * heads + h) * hd + i] == doctest::Approx(o).epsilon(1e-5));
      }
    }
}

} // namespace

TEST_CASE("paged attention equals dense causal softmax attention (GQA, scattered blocks)") {
  check_paged_attention_against_dense(0);
}

TEST_CASE("paged attention with a sliding window sees only the window's last positions") {
  for (int window : {1, 3, 4, 5, 10, 11, 64})
    check_paged_attention_against_dense(window);
}
