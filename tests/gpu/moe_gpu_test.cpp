// The mixture-of-experts kernels (moe.hpp) match CPU references written here on fresh random data:
// routing (with deliberate ties), grouping by expert (empty experts, one expert taking everything),
// the row gather, the grouped GEMV (fp32, fp16, bf16; k a multiple of the 16-byte vector and not;
// unused experts' weights NaN, so reading them into a sum would show), the combine (with and without
// Qwen2-MoE's gated shared expert) and the whole layer; the layer captured in a CUDA graph gives the
// same bits as in a stream; and a token's output is bit-identical whatever else is in its batch.
// Every output is poisoned (0xff: NaN, or -1 for ints) before a run.
// Tolerances, from the arithmetic:
// - route: fp32 softmax over E experts, each probability within (E + 2 top_k + 8) 2^-24 of itself
//   (the sum's roundings, expf's few ulp, the division; the chosen sum's top_k roundings).
// - GEMV: one rounding to T (u |y|; fp32: 1e-6 |y|) + 1e-5 sum_k |x w| (fp32 sums in another order), as gemv's test.
// - combine: one rounding to T + (top_k + 8) 2^-24 of sum |w y| (fp32 sums and expf in the sigmoid).
// - layer: the reference rounds where the GPU does (gate/up, the activation, the experts' outputs);
//   a value that lands on the other side of a rounding boundary moves by an ulp (2u), so each term is
//   allowed 2u |y| + 4u sum |down h| on top of 1e-5 of every sum of magnitudes.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/cuda/cuda_graph.hpp"
#include "kernels/cuda/cuda_stream.hpp"
#include "kernels/cuda/moe.hpp"
#include "kernels/cuda/random_fill.hpp"
#include "kernels/cuda/silu_and_mul.hpp"
#include "tests/gpu/gpu_test_support.hpp"

using namespace troupe::testing::gpu;
namespace kcu = troupe::kernels::cuda;
using bf16 = __nv_bfloat16;

namespace {

struct routing {
  std::vector<int> ids;
  std::vector<float> weights;
  std::vector<double> probabilities; // [rows, experts]
};

// Softmax in double; the top_k by probability, the lower expert first among equals.
routing cpu_route(const std::vector<float>& logits, int stride, int rows, int experts, int top_k, bool normalize) {
  routing r;
  r.probabilities.resize(std::size_t(rows) * experts);
  for (int t = 0; t < rows; ++t) {
    const float* l = logits.data() + std::size_t(t) * stride;
    const double max = *std::max_element(l, l + experts);
    double sum = 0.0;
    double* p = r.probabilities.data() + std::size_t(t) * experts;
    for (int e = 0; e < experts; ++e)
      sum += p[e] = std::exp(static_cast<double>(l[e]) - max);
    for (int e = 0; e < experts; ++e)
      p[e] /= sum;
    std::vector<int> order(experts);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return p[a] > p[b]; });
    double chosen = 0.0;
    for (int j = 0; j < top_k; ++j)
      chosen += p[order[j]];
    for (int j = 0; j < top_k; ++j) {
      r.ids.push_back(order[j]);
      r.weights.push_back(static_cast<float>(normalize ? p[order[j]] / chosen : p[order[j]]));
    }
  }
  return r;
}

struct alignment {
  std::vector<int> offsets, sorted, position;
};

// A stable counting sort of the entries by expert.
alignment cpu_align(const std::vector<int>& ids, int experts) {
  alignment a;
  a.offsets.assign(experts + 1, 0);
  for (int id : ids)
    ++a.offsets[id + 1];
  std::partial_sum(a.offsets.begin(), a.offsets.end(), a.offsets.begin());
  a.sorted.resize(ids.size());
  a.position.resize(ids.size());
  std::vector<int> next(a.offsets.begin(), a.offsets.end() - 1);
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const int p = next[ids[i]]++;
    a.sorted[p] = static_cast<int>(i);
    a.position[i] = p;
  }
  return a;
}

// Logits in steps of 1/8: many exact ties, and between unequal values a gap no fp32 rounding closes.
// Every seventh row is one value throughout (all tied).
std::vector<float> tied_logits(int rows, int stride, std::mt19937& rng) {
  std::uniform_int_distribution<int> step(-24, 24);
  std::vector<float> l(std::size_t(rows) * stride);
  for (int t = 0; t < rows; ++t) {
    const float same = step(rng) / 8.0f;
    for (int e = 0; e < stride; ++e)
      l[std::size_t(t) * stride + e] = t % 7 == 0 ? same : step(rng) / 8.0f;
  }
  return l;
}

// top_k distinct experts a token, drawn from the first `used` experts.
std::vector<int> random_choices(int rows, int top_k, int used, std::mt19937& rng) {
  std::vector<int> ids, pool(used);
  std::iota(pool.begin(), pool.end(), 0);
  for (int t = 0; t < rows; ++t) {
    std::shuffle(pool.begin(), pool.end(), rng);
    ids.insert(ids.end(), pool.begin(), pool.begin() + top_k);
  }
  return ids;
}

template <class T>
std::vector<float> download_values(const T* device, std::size_t n) {
  std::vector<T> host(n);
  REQUIRE(cudaMemcpy(host.data(), device, n * sizeof(T), cudaMemcpyDeviceToHost) == cudaSuccess);
  return decode_all<T>(host);
}

} // namespace

TEST_CASE("cuda moe_route picks the top_k probabilities, ties to the lower expert") {
  struct shape {
    int rows, experts, top_k, stride;
    bool normalize;
  };
  for (auto [rows, experts, top_k, stride, normalize] :
       {shape{1, 8, 2, 8, false}, shape{37, 8, 2, 8, true}, shape{300, 128, 8, 129, true}, shape{5, 60, 4, 64, false},
        shape{64, 512, 16, 512, true}, shape{3, 16, 16, 16, true}, shape{1000, 64, 6, 65, false},
        shape{2, 1, 1, 1, true}, shape{9, 33, 3, 33, true}}) {
    for (bool tied : {true, false}) {
      CAPTURE(rows);
      CAPTURE(experts);
      CAPTURE(top_k);
      CAPTURE(normalize);
      CAPTURE(tied);
      std::mt19937 rng(rows * 7919 + experts * 31 + top_k + tied);
      const auto logits = tied ? tied_logits(rows, stride, rng) : random_values(std::size_t(rows) * stride, rng, 3.0f);
      const routing ref = cpu_route(logits, stride, rows, experts, top_k, normalize);
      auto d_logits = to_device<float>(logits);
      auto d_ids = poisoned<int>(ref.ids.size());
      auto d_weights = poisoned<float>(ref.ids.size());
      REQUIRE(kcu::moe_route(d_logits.data(), stride, rows, experts, top_k, normalize, d_ids.data(), d_weights.data(),
                             nullptr) == cudaSuccess);
      sync_or_fail();
      const auto ids = download_raw(d_ids);
      const auto weights = download_raw(d_weights);
      const float rtol = (experts + 2 * top_k + 8) * 0x1p-24f;
      if (tied) {
        CHECK(ids == ref.ids);
      } else {
        // Continuous logits: two probabilities within fp32 rounding of each other may come in either
        // order, so each slot's choice must have the slot's probability (and be chosen once).
        int off = 0;
        for (int t = 0; t < rows; ++t) {
          for (int j = 0; j < top_k; ++j) {
            const int id = ids[std::size_t(t) * top_k + j];
            const bool repeated =
                std::count(ids.begin() + std::size_t(t) * top_k, ids.begin() + std::size_t(t + 1) * top_k, id) != 1;
            const double want = ref.probabilities[std::size_t(t) * experts + ref.ids[std::size_t(t) * top_k + j]];
            if (id < 0 || id >= experts || repeated ||
                std::abs(ref.probabilities[std::size_t(t) * experts + id] - want) > 2 * rtol * want)
              ++off;
          }
        }
        CHECK(off == 0);
      }
      // The weights against the reference's, slot by slot; where a continuous case's choice differs
      // (an order flip between probabilities equal to rounding, checked above) the slot is not compared.
      std::vector<float> got(weights.begin(), weights.end()), expected(ref.weights);
      for (std::size_t i = 0; i < weights.size(); ++i)
        if (ids[i] != ref.ids[i] && !tied)
          expected[i] = weights[i];
      check_close(got, expected, {1e-9f, rtol}, "moe_route weights");
    }
  }
}

TEST_CASE("cuda moe_route declines what it cannot take") {
  kcu::device_buffer<float> logits(1024), weights(64);
  kcu::device_buffer<int> ids(64);
  CHECK(kcu::moe_route(logits.data(), 8, 1, 8, 0, true, ids.data(), weights.data(), nullptr) == cudaErrorInvalidValue);
  CHECK(kcu::moe_route(logits.data(), 8, 1, 8, 9, true, ids.data(), weights.data(), nullptr) == cudaErrorInvalidValue);
  CHECK(kcu::moe_route(logits.data(), 1024, 1, 1024, 2, true, ids.data(), weights.data(), nullptr) ==
        cudaErrorInvalidValue);
  CHECK(kcu::moe_route(logits.data(), 64, 1, 64, 17, true, ids.data(), weights.data(), nullptr) ==
        cudaErrorInvalidValue);
  CHECK(kcu::moe_route(logits.data(), 7, 1, 8, 2, true, ids.data(), weights.data(), nullptr) == cudaErrorInvalidValue);
  CHECK(kcu::moe_route(logits.data(), 8, 0, 8, 2, true, ids.data(), weights.data(), nullptr) == cudaSuccess);
  sync_or_fail();
}

TEST_CASE("cuda moe_align groups entries by expert in entry order") {
  struct shape {
    int rows, top_k, experts, used; // used < 0: every entry on expert -used - 1
  };
  // 16,384 x 8: a long prefill (32 rounds of the block); 8 experts, all on expert 5: every other block
  // has nothing; 3 x 1: a count that is not a multiple of the 4 ids a thread loads.
  for (auto [rows, top_k, experts, used] :
       {shape{1, 8, 128, 128}, shape{3, 8, 128, 128}, shape{16, 8, 128, 128}, shape{300, 8, 128, 128},
        shape{16384, 8, 128, 128}, shape{300, 8, 64, 16}, shape{1000, 2, 8, -6}, shape{3, 1, 8, 8},
        shape{4096, 16, 512, 512}, shape{5000, 2, 8, 8}, shape{0, 8, 16, 16}, shape{1, 1, 1, 1}}) {
    for (bool unaligned : {false, true}) {
      CAPTURE(rows);
      CAPTURE(top_k);
      CAPTURE(experts);
      CAPTURE(used);
      CAPTURE(unaligned);
      std::mt19937 rng(rows * 131 + top_k * 7 + experts + unaligned);
      const auto ids =
          used > 0 ? random_choices(rows, top_k, used, rng) : std::vector<int>(std::size_t(rows) * top_k, -used - 1);
      const alignment ref = cpu_align(ids, experts);
      // unaligned: the ids start one int past a 16-byte boundary (the one-id-at-a-time path).
      std::vector<int> stored(ids);
      if (unaligned)
        stored.insert(stored.begin(), 0);
      stored.push_back(0); // never empty
      auto d_ids = to_device_raw(stored);
      const int* ids_at = d_ids.data() + (unaligned ? 1 : 0);
      auto d_offsets = poisoned<int>(experts + 1);
      auto d_sorted = poisoned<int>(ids.size() + 1);
      auto d_position = poisoned<int>(ids.size() + 1);
      REQUIRE(kcu::moe_align(ids_at, rows, top_k, experts, d_offsets.data(), d_sorted.data(), d_position.data(),
                             nullptr) == cudaSuccess);
      sync_or_fail();
      CHECK(download_raw(d_offsets) == ref.offsets);
      auto sorted = download_raw(d_sorted);
      auto position = download_raw(d_position);
      CHECK(sorted.back() == -1); // nothing past the entries
      CHECK(position.back() == -1);
      sorted.pop_back();
      position.pop_back();
      CHECK(sorted == ref.sorted);
      CHECK(position == ref.position);
    }
  }
}

TEST_CASE_TEMPLATE("cuda moe_gather_rows copies each entry's token row", T, float, bf16, __half) {
  for (int hidden : {1, 6, 100, 2048}) {
    for (bool unaligned : {false, true}) {
      CAPTURE(hidden);
      CAPTURE(unaligned);
      const int rows = 5, top_k = 3, entries = rows * top_k;
      std::mt19937 rng(hidden + unaligned);
      auto x = random_values(std::size_t(rows) * hidden + 1, rng);
      round_through<T>(x);
      std::vector<int> sorted(entries);
      std::iota(sorted.begin(), sorted.end(), 0);
      std::shuffle(sorted.begin(), sorted.end(), rng);
      std::vector<float> expected(std::size_t(entries) * hidden + 1, std::nanf(""));
      const int shift = unaligned ? 1 : 0;
      for (int p = 0; p < entries; ++p)
        for (int i = 0; i < hidden; ++i)
          expected[std::size_t(p) * hidden + i + shift] = x[std::size_t(sorted[p] / top_k) * hidden + i + shift];
      auto d_x = to_device<T>(x);
      auto d_sorted = to_device_raw(sorted);
      auto d_xs = poisoned<T>(expected.size());
      REQUIRE(kcu::moe_gather_rows<T>(d_x.data() + shift, d_sorted.data(), entries, top_k, hidden, d_xs.data() + shift,
                                      nullptr) == cudaSuccess);
      sync_or_fail();
      check_close(from_device(d_xs), expected, {}, std::string("moe_gather_rows ") + dtype_name<T>());
    }
  }
}

namespace {

// A grouped GEMV case: entries of `rows` tokens with top_k distinct experts each among the first `used`
// (used < 0: every token takes experts 0 .. top_k - 1), already grouped; the other experts' weights NaN.
template <class T>
void check_grouped_gemv(int rows, int top_k, int experts, int used, int n, int k) {
  CAPTURE(rows);
  CAPTURE(top_k);
  CAPTURE(experts);
  CAPTURE(used);
  CAPTURE(n);
  CAPTURE(k);
  std::mt19937 rng(rows * 7919 + top_k * 131 + experts * 17 + n * 3 + k);
  std::vector<int> ids;
  if (used > 0) {
    ids = random_choices(rows, top_k, used, rng);
  } else {
    for (int t = 0; t < rows; ++t)
      for (int j = 0; j < top_k; ++j)
        ids.push_back(j);
  }
  const alignment a = cpu_align(ids, experts);
  const int entries = rows * top_k;
  auto xs = random_values(std::size_t(entries) * k, rng, 1.0f);
  auto w = random_values(std::size_t(experts) * n * k, rng, 0.05f);
  round_through<T>(xs);
  round_through<T>(w);
  for (int e = 0; e < experts; ++e)
    if (a.offsets[e] == a.offsets[e + 1])
      std::fill(w.begin() + std::size_t(e) * n * k, w.begin() + std::size_t(e + 1) * n * k, std::nanf(""));

  std::vector<float> expected(std::size_t(entries) * n);
  double largest_abs_sum = 0.0;
  for (int e = 0; e < experts; ++e) {
    for (int p = a.offsets[e]; p < a.offsets[e + 1]; ++p) {
      for (int j = 0; j < n; ++j) {
        double sum = 0.0, abs_sum = 0.0;
        for (int c = 0; c < k; ++c) {
          const double prod = double(xs[std::size_t(p) * k + c]) * w[(std::size_t(e) * n + j) * k + c];
          sum += prod;
          abs_sum += std::abs(prod);
        }
        expected[std::size_t(p) * n + j] = static_cast<float>(sum);
        largest_abs_sum = std::max(largest_abs_sum, abs_sum);
      }
    }
  }
  auto d_xs = to_device<T>(xs);
  auto d_w = to_device<T>(w);
  auto d_offsets = to_device_raw(a.offsets);
  auto d_ys = poisoned<T>(expected.size());
  REQUIRE(kcu::moe_grouped_gemv<T>(d_xs.data(), d_w.data(), d_offsets.data(), experts, entries, n, k, d_ys.data(),
                                   nullptr) == cudaSuccess);
  sync_or_fail();
  const float rtol = std::is_same_v<T, float> ? 1e-6f : unit_roundoff<T>();
  check_close(from_device(d_ys), expected, {static_cast<float>(1e-5 * largest_abs_sum), rtol},
              std::string("moe_grouped_gemv ") + dtype_name<T>());
}

} // namespace

TEST_CASE_TEMPLATE("cuda moe_grouped_gemv matches the CPU reference", T, float, bf16, __half) {
  // k = 264: 16-byte vectors of bf16, fp16 and fp32; k = 103: one element a load. n = 37: an odd
  // count, so a block's second output row can fall outside the output.
  for (int rows : {1, 3, 16, 300}) {
    for (int k : {264, 103}) {
      check_grouped_gemv<T>(rows, 2, 8, 8, 37, k);   // Mixtral's 8 experts, top 2
      check_grouped_gemv<T>(rows, 8, 64, 48, 37, k); // Qwen3's top 8, some experts unused
    }
  }
  // Every token on the same top_k experts: 300 rows an expert, 38 chunks of it.
  check_grouped_gemv<T>(300, 2, 8, -1, 37, 264);
  check_grouped_gemv<T>(300, 8, 16, -1, 19, 103);
  // Several warps a row (k = 2048: 2, 4104: 4, 8200: 8 for bf16 and fp16), several loads a lane.
  check_grouped_gemv<T>(1, 2, 8, 8, 64, 8200);
  check_grouped_gemv<T>(16, 8, 64, 64, 33, 4104);
  check_grouped_gemv<T>(3, 8, 128, 128, 16, 2048);
  check_grouped_gemv<T>(5, 4, 512, 512, 9, 72); // the most experts
}

TEST_CASE_TEMPLATE("cuda moe_combine sums each token's expert outputs by weight", T, float, bf16, __half) {
  struct shape {
    int rows, top_k, hidden;
  };
  for (auto [rows, top_k, hidden] : {shape{1, 2, 4096}, shape{3, 8, 100}, shape{300, 8, 64}, shape{7, 1, 5}}) {
    for (int shared_kind : {0, 1, 2}) { // none, ungated, gated by a router column
      CAPTURE(rows);
      CAPTURE(top_k);
      CAPTURE(hidden);
      CAPTURE(shared_kind);
      std::mt19937 rng(rows * 31 + top_k * 7 + hidden + shared_kind);
      const int entries = rows * top_k, experts = 8, stride = experts + 3;
      auto ys = random_values(std::size_t(entries) * hidden, rng);
      auto shared = random_values(std::size_t(rows) * hidden, rng);
      auto logits = random_values(std::size_t(rows) * stride, rng, 2.0f);
      round_through<T>(ys);
      round_through<T>(shared);
      std::vector<int> position(entries);
      std::iota(position.begin(), position.end(), 0);
      std::shuffle(position.begin(), position.end(), rng);
      std::uniform_real_distribution<float> weight(0.0f, 1.0f);
      std::vector<float> weights(entries);
      for (auto& v : weights)
        v = weight(rng);
      std::vector<float> expected(std::size_t(rows) * hidden), extra(expected.size());
      for (int t = 0; t < rows; ++t) {
        for (int i = 0; i < hidden; ++i) {
          double sum = 0.0, abs_sum = 0.0;
          for (int j = 0; j < top_k; ++j) {
            const double term = double(weights[t * top_k + j]) * ys[std::size_t(position[t * top_k + j]) * hidden + i];
            sum += term;
            abs_sum += std::abs(term);
          }
          if (shared_kind > 0) {
            const double gate =
                shared_kind == 2 ? 1.0 / (1.0 + std::exp(-double(logits[std::size_t(t) * stride + experts]))) : 1.0;
            const double term = gate * shared[std::size_t(t) * hidden + i];
            sum += term;
            abs_sum += std::abs(term);
          }
          expected[std::size_t(t) * hidden + i] = static_cast<float>(sum);
          extra[std::size_t(t) * hidden + i] = static_cast<float>((top_k + 8) * 0x1p-24 * abs_sum);
        }
      }
      auto d_ys = to_device<T>(ys);
      auto d_position = to_device_raw(position);
      auto d_weights = to_device<float>(weights);
      auto d_shared = to_device<T>(shared);
      auto d_logits = to_device<float>(logits);
      auto d_out = poisoned<T>(expected.size());
      REQUIRE(kcu::moe_combine<T>(d_ys.data(), d_position.data(), d_weights.data(), rows, top_k, hidden,
                                  shared_kind > 0 ? d_shared.data() : nullptr,
                                  shared_kind == 2 ? d_logits.data() + experts : nullptr, stride, d_out.data(),
                                  nullptr) == cudaSuccess);
      sync_or_fail();
      const float rtol = std::is_same_v<T, float> ? 0.0f : unit_roundoff<T>();
      check_close(from_device(d_out), expected, {1e-30f, rtol}, std::string("moe_combine ") + dtype_name<T>(), extra);
    }
  }
}

namespace {

// One MoE layer on the device, every buffer allocated up front: route, align, gather, gate/up GEMV,
// SwiGLU, down GEMV, combine. enqueue() only launches, so it can be captured in a CUDA graph.
template <class T>
struct moe_layer {
  int rows, hidden, inter, experts, top_k, stride;
  bool normalize;
  const float* logits;
  const T* x;
  const T* gate_up;
  const T* down;
  const T* shared; // null: no shared expert
  int entries = rows * top_k;
  device_buffer<int> ids{std::size_t(entries)}, offsets{std::size_t(experts) + 1}, sorted{std::size_t(entries)},
      position{std::size_t(entries)};
  device_buffer<float> weights{std::size_t(entries)};
  device_buffer<T> xs{std::size_t(entries) * hidden}, h2{std::size_t(entries) * 2 * inter},
      h{std::size_t(entries) * inter}, ys{std::size_t(entries) * hidden}, out{std::size_t(rows) * hidden};

  // Every output of every step NaN (ints -1), so that an element no kernel writes shows.
  void poison() {
    ids.fill_bytes(0xff);
    offsets.fill_bytes(0xff);
    sorted.fill_bytes(0xff);
    position.fill_bytes(0xff);
    weights.fill_bytes(0xff);
    xs.fill_bytes(0xff);
    h2.fill_bytes(0xff);
    h.fill_bytes(0xff);
    ys.fill_bytes(0xff);
    out.fill_bytes(0xff);
  }

  cudaError_t enqueue(cudaStream_t s) {
    cudaError_t err = kcu::moe_route(logits, stride, rows, experts, top_k, normalize, ids.data(), weights.data(), s);
    if (err == cudaSuccess)
      err = kcu::moe_align(ids.data(), rows, top_k, experts, offsets.data(), sorted.data(), position.data(), s);
    if (err == cudaSuccess)
      err = kcu::moe_gather_rows<T>(x, sorted.data(), entries, top_k, hidden, xs.data(), s);
    if (err == cudaSuccess)
      err = kcu::moe_grouped_gemv<T>(xs.data(), gate_up, offsets.data(), experts, entries, 2 * inter, hidden, h2.data(),
                                     s);
    if (err == cudaSuccess)
      err = kcu::silu_and_mul<T>(h2.data(), h.data(), entries, inter, s);
    if (err == cudaSuccess)
      err = kcu::moe_grouped_gemv<T>(h.data(), down, offsets.data(), experts, entries, hidden, inter, ys.data(), s);
    if (err == cudaSuccess)
      err = kcu::moe_combine<T>(ys.data(), position.data(), weights.data(), rows, top_k, hidden, shared,
                                shared != nullptr ? logits + experts : nullptr, stride, out.data(), s);
    return err;
  }
};

template <class T>
float round_to(double v) {
  return decode(encode<T>(static_cast<float>(v)));
}

// The layer in double, rounding to T where the GPU stores T; `extra` gets each output's allowance.
template <class T>
std::vector<float> cpu_moe_layer(const std::vector<float>& logits, const std::vector<float>& x,
                                 const std::vector<float>& gate_up, const std::vector<float>& down,
                                 const std::vector<float>* shared, int rows, int hidden, int inter, int experts,
                                 int top_k, int stride, bool normalize, std::vector<float>& extra) {
  const double u = std::is_same_v<T, float> ? 0.0 : unit_roundoff<T>();
  const routing r = cpu_route(logits, stride, rows, experts, top_k, normalize);
  std::vector<float> out(std::size_t(rows) * hidden);
  extra.assign(out.size(), 0.0f);
  std::vector<float> h(inter);
  for (int t = 0; t < rows; ++t) {
    std::vector<double> acc(hidden, 0.0), allowance(hidden, 0.0), magnitude(hidden, 0.0);
    for (int j = 0; j < top_k; ++j) {
      const int e = r.ids[std::size_t(t) * top_k + j];
      const double wj = r.weights[std::size_t(t) * top_k + j];
      for (int c = 0; c < inter; ++c) {
        double g = 0.0, up = 0.0;
        for (int i = 0; i < hidden; ++i) {
          g += double(x[std::size_t(t) * hidden + i]) * gate_up[(std::size_t(e) * 2 * inter + c) * hidden + i];
          up += double(x[std::size_t(t) * hidden + i]) * gate_up[(std::size_t(e) * 2 * inter + inter + c) * hidden + i];
        }
        const double gr = round_to<T>(g), ur = round_to<T>(up);
        h[c] = round_to<T>(gr / (1.0 + std::exp(-gr)) * ur);
      }
      for (int o = 0; o < hidden; ++o) {
        double y = 0.0, abs_sum = 0.0;
        for (int c = 0; c < inter; ++c) {
          const double prod = double(down[(std::size_t(e) * hidden + o) * inter + c]) * h[c];
          y += prod;
          abs_sum += std::abs(prod);
        }
        const double yr = round_to<T>(y);
        acc[o] += wj * yr;
        allowance[o] += wj * (2 * u * std::abs(yr) + 4 * u * abs_sum);
        magnitude[o] += wj * (std::abs(yr) + abs_sum);
      }
    }
    if (shared != nullptr) {
      const double gate = 1.0 / (1.0 + std::exp(-double(logits[std::size_t(t) * stride + experts])));
      for (int o = 0; o < hidden; ++o) {
        const double term = gate * (*shared)[std::size_t(t) * hidden + o];
        acc[o] += term;
        magnitude[o] += std::abs(term);
      }
    }
    for (int o = 0; o < hidden; ++o) {
      out[std::size_t(t) * hidden + o] = static_cast<float>(acc[o]);
      extra[std::size_t(t) * hidden + o] = static_cast<float>(allowance[o] + 1e-5 * magnitude[o]);
    }
  }
  return out;
}

} // namespace

TEST_CASE_TEMPLATE("cuda MoE layer (route, align, gather, GEMV, SwiGLU, GEMV, combine) matches a CPU MoE layer", T,
                   float, bf16, __half) {
  struct shape {
    int rows, hidden, inter, experts, top_k;
    bool normalize;
  };
  // Qwen3-MoE-like (norm_topk_prob, top 4 of 16), Mixtral-like (top 2 of 8), and a hidden size that is
  // not a multiple of 8 (the one-element paths everywhere).
  for (auto [rows, hidden, inter, experts, top_k, normalize] :
       {shape{1, 256, 128, 16, 4, true}, shape{5, 256, 128, 16, 4, true}, shape{67, 256, 128, 16, 4, true},
        shape{1, 128, 96, 8, 2, true}, shape{33, 128, 96, 8, 2, false}, shape{6, 90, 20, 8, 3, true}}) {
    for (bool with_shared : {false, true}) {
      CAPTURE(rows);
      CAPTURE(hidden);
      CAPTURE(experts);
      CAPTURE(top_k);
      CAPTURE(with_shared);
      std::mt19937 rng(rows * 7919 + hidden * 131 + experts * 7 + top_k + with_shared);
      const int stride = experts + 1; // the shared expert's gate is router column `experts`
      const auto logits = tied_logits(rows, stride, rng);
      auto x = random_values(std::size_t(rows) * hidden, rng);
      auto gate_up = random_values(std::size_t(experts) * 2 * inter * hidden, rng, 0.08f);
      auto down = random_values(std::size_t(experts) * hidden * inter, rng, 0.08f);
      auto shared = random_values(std::size_t(rows) * hidden, rng);
      round_through<T>(x);
      round_through<T>(gate_up);
      round_through<T>(down);
      round_through<T>(shared);
      std::vector<float> extra;
      const auto expected = cpu_moe_layer<T>(logits, x, gate_up, down, with_shared ? &shared : nullptr, rows, hidden,
                                             inter, experts, top_k, stride, normalize, extra);

      auto d_logits = to_device<float>(logits);
      auto d_x = to_device<T>(x);
      auto d_gate_up = to_device<T>(gate_up);
      auto d_down = to_device<T>(down);
      auto d_shared = to_device<T>(shared);
      moe_layer<T> layer{rows,       hidden,           inter,         experts,
                         top_k,      stride,           normalize,     d_logits.data(),
                         d_x.data(), d_gate_up.data(), d_down.data(), with_shared ? d_shared.data() : nullptr};
      layer.poison();
      kcu::cuda_stream stream;
      REQUIRE(layer.enqueue(stream.get()) == cudaSuccess);
      stream.synchronize();
      const float rtol = std::is_same_v<T, float> ? 1e-6f : unit_roundoff<T>();
      check_close(from_device(layer.out), expected, {1e-30f, rtol}, std::string("MoE layer ") + dtype_name<T>(), extra);

      // The same launches captured in a CUDA graph: the same bits.
      const auto in_stream = download_raw(layer.out);
      layer.poison();
      REQUIRE(cudaStreamBeginCapture(stream.get(), cudaStreamCaptureModeThreadLocal) == cudaSuccess);
      const cudaError_t launched = layer.enqueue(stream.get());
      cudaGraph_t graph = nullptr;
      REQUIRE(cudaStreamEndCapture(stream.get(), &graph) == cudaSuccess);
      REQUIRE(launched == cudaSuccess);
      kcu::cuda_graph exec(graph);
      REQUIRE(exec.launch(stream.get()) == cudaSuccess);
      stream.synchronize();
      const auto in_graph = download_raw(layer.out);
      CHECK(std::memcmp(in_graph.data(), in_stream.data(), in_graph.size() * sizeof(T)) == 0);
    }
  }
}

TEST_CASE_TEMPLATE("cuda MoE layer gives a token the same bits whatever else is in its batch", T, bf16, __half) {
  struct shape {
    int hidden, inter, experts, top_k;
  };
  // Qwen3-30B-A3B's expert shapes (hidden 2048, intermediate 768: 2 warps a row for gate/up, one for
  // down) with 32 experts, top 8; a Mixtral-like top 2 of 8 (gate/up at 4 warps a row), where one
  // token's chunks hold at most 2 rows, two tokens' 4 and more tokens' 8 (each its own instantiation).
  for (auto [hidden, inter, experts, top_k] : {shape{2048, 768, 32, 8}, shape{4096, 512, 8, 2}}) {
    CAPTURE(hidden);
    CAPTURE(top_k);
    const int stride = experts + 1, big = 300;
    kcu::device_buffer<float> logits(std::size_t(big) * stride);
    kcu::device_buffer<T> x(std::size_t(big) * hidden), gate_up(std::size_t(experts) * 2 * inter * hidden),
        down(std::size_t(experts) * hidden * inter), shared(std::size_t(big) * hidden);
    REQUIRE(kcu::random_fill(logits.data(), logits.size(), 1, 0.0f, 2.0f, nullptr) == cudaSuccess);
    REQUIRE(kcu::random_fill(x.data(), x.size(), 2, 0.0f, 1.0f, nullptr) == cudaSuccess);
    REQUIRE(kcu::random_fill(gate_up.data(), gate_up.size(), 3, 0.0f, 0.02f, nullptr) == cudaSuccess);
    REQUIRE(kcu::random_fill(down.data(), down.size(), 4, 0.0f, 0.03f, nullptr) == cudaSuccess);
    REQUIRE(kcu::random_fill(shared.data(), shared.size(), 5, 0.0f, 1.0f, nullptr) == cudaSuccess);
    sync_or_fail();

    for (bool with_shared : {false, true}) {
      CAPTURE(with_shared);
      kcu::cuda_stream stream;
      moe_layer<T> whole{big,      hidden,         inter,       experts,
                         top_k,    stride,         true,        logits.data(),
                         x.data(), gate_up.data(), down.data(), with_shared ? shared.data() : nullptr};
      whole.poison();
      REQUIRE(whole.enqueue(stream.get()) == cudaSuccess);
      stream.synchronize();
      const auto all = download_raw(whole.out);

      // Batches of 1 (token 0, token 299), 2 and 7 tokens picked from the 300, copied into their own buffers.
      for (const std::vector<int>& picked : {std::vector<int>{0}, std::vector<int>{299}, std::vector<int>{3, 4},
                                             std::vector<int>{5, 6, 70, 71, 150, 200, 298}}) {
        CAPTURE(picked.size());
        const int rows = static_cast<int>(picked.size());
        kcu::device_buffer<float> sub_logits(std::size_t(rows) * stride);
        kcu::device_buffer<T> sub_x(std::size_t(rows) * hidden), sub_shared(std::size_t(rows) * hidden);
        for (int r = 0; r < rows; ++r) {
          const std::size_t t = picked[r];
          REQUIRE(cudaMemcpy(sub_logits.data() + r * stride, logits.data() + t * stride, stride * sizeof(float),
                             cudaMemcpyDeviceToDevice) == cudaSuccess);
          REQUIRE(cudaMemcpy(sub_x.data() + std::size_t(r) * hidden, x.data() + t * hidden, hidden * sizeof(T),
                             cudaMemcpyDeviceToDevice) == cudaSuccess);
          REQUIRE(cudaMemcpy(sub_shared.data() + std::size_t(r) * hidden, shared.data() + t * hidden,
                             hidden * sizeof(T), cudaMemcpyDeviceToDevice) == cudaSuccess);
        }
        sync_or_fail(); // the copies (device to device: not waited for by cudaMemcpy)
        moe_layer<T> part{rows,         hidden,         inter,       experts,
                          top_k,        stride,         true,        sub_logits.data(),
                          sub_x.data(), gate_up.data(), down.data(), with_shared ? sub_shared.data() : nullptr};
        part.poison();
        REQUIRE(part.enqueue(stream.get()) == cudaSuccess);
        stream.synchronize();
        const auto some = download_raw(part.out);
        int differing = 0;
        for (int r = 0; r < rows; ++r)
          differing += std::memcmp(some.data() + std::size_t(r) * hidden, all.data() + std::size_t(picked[r]) * hidden,
                                   hidden * sizeof(T)) != 0;
        CHECK(differing == 0);
        // And not trivially: the outputs are finite and not all zero.
        const auto values = decode_all<T>(some);
        CHECK(std::all_of(values.begin(), values.end(), [](float v) { return std::isfinite(v); }));
        CHECK(std::any_of(values.begin(), values.end(), [](float v) { return v != 0.0f; }));
      }
    }
  }
}
