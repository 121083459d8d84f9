// The CPU reference kernels against plain textbook formulas on random inputs:
// RMSNorm (per row and per head), linear (threaded or not), SwiGLU, RoPE's relative-position property,
// paged attention against dense causal softmax attention with GQA, a sliding window and
// Gemma 2's logit soft-capping, and mixture-of-experts routing on hand-made logits.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
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

TEST_CASE("moe_route picks the top-k softmax probabilities in descending order, renormalized or not") {
  // Two tokens over four experts.
  const std::vector<float> logits{1.0f,  3.0f,  0.0f, 2.0f, //
                                  -1.0f, -1.0f, 5.0f, -3.0f};
  const auto softmax = [&](int row, int e) {
    double total = 0;
    for (int j = 0; j < 4; ++j)
      total += std::exp(double{logits[row * 4 + j]});
    return std::exp(double{logits[row * 4 + e]}) / total;
  };
  std::vector<std::int32_t> ids(4);
  std::vector<float> weights(4);
  kc::moe_route(logits, 2, 4, 2, false, ids, weights);
  CHECK(ids == std::vector<std::int32_t>{1, 3, 2, 0}); // token 1: experts 0 and 1 tie, the lower one wins
  CHECK(weights[0] == doctest::Approx(softmax(0, 1)).epsilon(1e-6));
  CHECK(weights[1] == doctest::Approx(softmax(0, 3)).epsilon(1e-6));
  CHECK(weights[2] == doctest::Approx(softmax(1, 2)).epsilon(1e-6));
  CHECK(weights[3] == doctest::Approx(softmax(1, 0)).epsilon(1e-6));
  CHECK(weights[0] > weights[1]);

  kc::moe_route(logits, 2, 4, 2, true, ids, weights);
  CHECK(ids == std::vector<std::int32_t>{1, 3, 2, 0});
  CHECK(weights[0] == doctest::Approx(softmax(0, 1) / (softmax(0, 1) + softmax(0, 3))).epsilon(1e-6));
  CHECK(weights[0] + weights[1] == doctest::Approx(1.0).epsilon(1e-6));
  CHECK(weights[2] + weights[3] == doctest::Approx(1.0).epsilon(1e-6));
}

TEST_CASE("moe_route on ties, on one expert a token and on every expert a token") {
  // All equal: the lowest experts, in order, each 1 / experts (or 1 / k renormalized).
  const std::vector<float> flat(8, 0.25f);
  std::vector<std::int32_t> ids(3);
  std::vector<float> weights(3);
  kc::moe_route(flat, 1, 8, 3, false, ids, weights);
  CHECK(ids == std::vector<std::int32_t>{0, 1, 2});
  for (float w : weights)
    CHECK(w == doctest::Approx(0.125).epsilon(1e-6));
  kc::moe_route(flat, 1, 8, 3, true, ids, weights);
  for (float w : weights)
    CHECK(w == doctest::Approx(1.0 / 3).epsilon(1e-6));

  // A tie below the top: 7 first, then 2 before 5.
  const std::vector<float> tie{0.0f, 0.0f, 1.0f, 0.0f, 0.0f, 1.0f, 0.0f, 4.0f};
  kc::moe_route(tie, 1, 8, 3, false, ids, weights);
  CHECK(ids == std::vector<std::int32_t>{7, 2, 5});
  CHECK(weights[1] == weights[2]);

  // top 1 renormalized is weight 1; top k == experts takes every expert, by probability.
  std::vector<std::int32_t> one(1);
  std::vector<float> w1(1);
  kc::moe_route(tie, 1, 8, 1, true, one, w1);
  CHECK(one[0] == 7);
  CHECK(w1[0] == 1.0f);
  const std::vector<float> three{-2.0f, 10.0f, 3.0f};
  std::vector<std::int32_t> all(3);
  std::vector<float> w3(3);
  kc::moe_route(three, 1, 3, 3, false, all, w3);
  CHECK(all == std::vector<std::int32_t>{1, 2, 0});
  CHECK(w3[0] + w3[1] + w3[2] == doctest::Approx(1.0).epsilon(1e-6));
  // Large logits do not overflow: the softmax subtracts the maximum.
  const std::vector<float> large{1000.0f, 999.0f};
  std::vector<std::int32_t> ids2(2);
  std::vector<float> w2(2);
  kc::moe_route(large, 1, 2, 2, false, ids2, w2);
  CHECK(ids2 == std::vector<std::int32_t>{0, 1});
  CHECK(w2[0] == doctest::Approx(1.0 / (1.0 + std::exp(-1.0))).epsilon(1e-6));
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

struct attention_shape {
  int heads, kv_heads, hd, bs, len;
};

// One sequence of shape.len tokens (positions 0..len-1) written into scattered cache blocks.
struct paged_sequence {
  attention_shape shape;
  std::vector<float> q, k, v; // [len, heads, hd], [len, kv_heads, hd] x 2: what the cache holds, contiguous
  std::vector<std::int32_t> table, positions, query_start;
  std::vector<float> k_cache, v_cache;
};
paged_sequence scattered_sequence(attention_shape sh, float q_scale, unsigned seed) {
  paged_sequence ps{.shape = sh};
  ps.q = random_vector(static_cast<std::size_t>(sh.len) * sh.heads * sh.hd, seed, q_scale);
  ps.k = random_vector(static_cast<std::size_t>(sh.len) * sh.kv_heads * sh.hd, seed + 1);
  ps.v = random_vector(static_cast<std::size_t>(sh.len) * sh.kv_heads * sh.hd, seed + 2);
  const int blocks = (sh.len + sh.bs - 1) / sh.bs, num_blocks = 2 * blocks + 2;
  for (int b = 0; b < blocks; ++b)
    ps.table.push_back(num_blocks - 1 - 2 * b); // every other block, backwards
  std::vector<std::int64_t> slots(sh.len);
  for (int t = 0; t < sh.len; ++t) {
    ps.positions.push_back(t);
    slots[t] = static_cast<std::int64_t>(ps.table[t / sh.bs]) * sh.bs + t % sh.bs;
  }
  ps.query_start = {0, sh.len};
  ps.k_cache.assign(static_cast<std::size_t>(num_blocks) * sh.kv_heads * sh.bs * sh.hd, NAN);
  ps.v_cache.assign(ps.k_cache.size(), NAN);
  kc::write_kv_cache(ps.k, ps.v, slots, sh.kv_heads, sh.hd, sh.bs, ps.k_cache, ps.v_cache);
  return ps;
}

float scale_of(const attention_shape& sh) {
  return 1.0f / std::sqrt(static_cast<float>(sh.hd));
}

std::vector<float> paged_output(const paged_sequence& ps, int window, float softcap) {
  const attention_shape& sh = ps.shape;
  std::vector<float> out(ps.q.size(), NAN);
  kc::paged_attention({.q = ps.q,
                       .out = out,
                       .positions = ps.positions,
                       .query_start = ps.query_start,
                       .block_tables = ps.table,
                       .max_blocks_per_seq = static_cast<int>(ps.table.size()),
                       .heads = sh.heads,
                       .kv_heads = sh.kv_heads,
                       .head_dim = sh.hd,
                       .block_size = sh.bs,
                       .scale = scale_of(sh),
                       .window = window,
                       .softcap = softcap,
                       .k_cache = ps.k_cache,
                       .v_cache = ps.v_cache},
                      nullptr);
  return out;
}

// Dense causal softmax attention in double over contiguous K/V, each query seeing the `window` last
// positions (0: all), its scores capped as transformers' Gemma 2 caps them (softcap > 0: s / cap,
// tanh, * cap, then the mask), against the paged kernel over scattered blocks.
void check_paged_attention_against_dense(attention_shape sh, int window, float softcap = 0.0f, float q_scale = 1.0f) {
  CAPTURE(sh.heads);
  CAPTURE(sh.kv_heads);
  CAPTURE(sh.hd);
  CAPTURE(window);
  CAPTURE(softcap);
  const paged_sequence ps = scattered_sequence(sh, q_scale, 6);
  const std::vector<float> out = paged_output(ps, window, softcap);
  const int group = sh.heads / sh.kv_heads;
  const double scale = scale_of(sh);
  for (int t = 0; t < sh.len; ++t)
    for (int h = 0; h < sh.heads; ++h) {
      const int kvh = h / group;
      const int first = window > 0 ? std::max(0, t - window + 1) : 0;
      std::vector<double> scores(t + 1, 0.0);
      double mx = -1e30;
      for (int s = first; s <= t; ++s) {
        double d = 0;
        for (int i = 0; i < sh.hd; ++i)
          d += double{ps.q[(t * sh.heads + h) * sh.hd + i]} * ps.k[(s * sh.kv_heads + kvh) * sh.hd + i];
        scores[s] = d * scale;
        if (softcap > 0.0f)
          scores[s] = softcap * std::tanh(scores[s] / softcap);
        mx = std::max(mx, scores[s]);
      }
      double z = 0;
      for (int s = first; s <= t; ++s)
        z += (scores[s] = std::exp(scores[s] - mx));
      for (int i = 0; i < sh.hd; ++i) {
        double o = 0;
        for (int s = first; s <= t; ++s)
          o += scores[s] / z * ps.v[(s * sh.kv_heads + kvh) * sh.hd + i];
        REQUIRE(out[(t * sh.heads + h) * sh.hd + i] == doctest::Approx(o).epsilon(1e-5));
      }
    }
}

constexpr attention_shape gqa_shape{4, 2, 8, 4, 11}; // 3 blocks of 4 hold 11 tokens

// GQA 2 over blocks of 4, MHA at head_dim 16 over blocks of 3, GQA 8 at head_dim 4 over blocks of 8.
constexpr attention_shape softcap_shapes[] = {gqa_shape, {2, 2, 16, 3, 13}, {8, 1, 4, 8, 20}};

} // namespace

TEST_CASE("paged attention equals dense causal softmax attention (GQA, scattered blocks)") {
  check_paged_attention_against_dense(gqa_shape, 0);
}

TEST_CASE("paged attention with a sliding window sees only the window's last positions") {
  for (int window : {1, 3, 4, 5, 10, 11, 64})
    check_paged_attention_against_dense(gqa_shape, window);
}

// Queries 10x the keys' size: scores of |s| ~ 20 and more, which a cap of 5 flattens and one of
// 50 bends; the outputs must also move well away from the uncapped ones.
TEST_CASE("paged attention with a logit softcap equals dense attention over capped scores") {
  for (attention_shape sh : softcap_shapes)
    for (float softcap : {5.0f, 50.0f})
      for (int window : {0, 1, 5}) {
        check_paged_attention_against_dense(sh, window, softcap, 10.0f);
        const paged_sequence ps = scattered_sequence(sh, 10.0f, 6);
        const std::vector<float> capped = paged_output(ps, window, softcap), plain = paged_output(ps, window, 0.0f);
        float moved = 0.0f;
        for (std::size_t i = 0; i < capped.size(); ++i)
          moved = std::max(moved, std::abs(capped[i] - plain[i]));
        if (window == 1)
          CHECK(moved == 0.0f); // the token alone: nothing to weigh
        else
          CHECK(moved > 0.01f); // 1000x the tolerance (a cap of 5 moves outputs by ~2, one of 50 by ~0.1)
      }
}

// softcap 0 is no cap: the kernel's arithmetic as before softcaps existed, bit for bit (the float
// loop below is that kernel's, in its order).
TEST_CASE("paged attention with softcap 0 keeps the uncapped arithmetic bit for bit") {
  for (attention_shape sh : softcap_shapes)
    for (int window : {0, 5}) {
      CAPTURE(sh.heads);
      CAPTURE(window);
      const paged_sequence ps = scattered_sequence(sh, 10.0f, 9);
      const std::vector<float> out = paged_output(ps, window, 0.0f);
      const int group = sh.heads / sh.kv_heads;
      const float scale = scale_of(sh);
      std::vector<float> expected(out.size()), scores;
      for (int t = 0; t < sh.len; ++t)
        for (int h = 0; h < sh.heads; ++h) {
          const int kvh = h / group, first = window > 0 ? std::max(0, t - window + 1) : 0;
          const float* q = ps.q.data() + (t * sh.heads + h) * sh.hd;
          auto row = [&](const std::vector<float>& x, int p) { return x.data() + (p * sh.kv_heads + kvh) * sh.hd; };
          scores.assign(t + 1, 0.0f);
          float max_score = -INFINITY;
          for (int p = first; p <= t; ++p) {
            float s = 0.0f;
            for (int d = 0; d < sh.hd; ++d)
              s += q[d] * row(ps.k, p)[d];
            scores[p] = s * scale;
            max_score = std::max(max_score, scores[p]);
          }
          float sum = 0.0f;
          for (int p = first; p <= t; ++p)
            sum += (scores[p] = std::exp(scores[p] - max_score));
          float* o = expected.data() + (t * sh.heads + h) * sh.hd;
          for (int p = first; p <= t; ++p)
            for (int d = 0; d < sh.hd; ++d)
              o[d] += scores[p] / sum * row(ps.v, p)[d];
        }
      CHECK(std::memcmp(out.data(), expected.data(), out.size() * sizeof(float)) == 0);
    }
}
