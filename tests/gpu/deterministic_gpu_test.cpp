// engine.deterministic on the GPU, at real shapes: batch-invariant GEMMs give a row the same
// bits whatever m is and wherever the row sits (Llama-3-8B's projections and LM head, a
// biased QKV), and the CUDA runner in deterministic mode gives a sequence the same logits,
// bit for bit, alone, chunked beside other prefills, prefix-cached, and decoded in a batch of
// 12 from a CUDA graph (8B shapes, dummy bf16 weights, three layers). The same runs without
// the mode report how many rows differ: what the mode buys.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cuda/cublaslt_gemm.hpp"
#include "kernels/cuda/random_fill.hpp"
#include "runtime/cuda/cuda_runner_factory.hpp"
#include "runtime/model_config.hpp"
#include "runtime/step_batch_builder.hpp"
#include "tests/gpu/gpu_test_support.hpp"
#include "tests/support/stories_model.hpp"

using namespace troupe;
using namespace troupe::testing;
using namespace troupe::testing::gpu;
namespace kcu = troupe::kernels::cuda;
using bf16 = __nv_bfloat16;
using runtime::token_id;

namespace {

template <class T>
std::vector<T> download_raw(const device_buffer<T>& d, std::size_t first, std::size_t count) {
  std::vector<T> all(d.size());
  d.download(all);
  return {all.begin() + static_cast<std::ptrdiff_t>(first), all.begin() + static_cast<std::ptrdiff_t>(first + count)};
}

template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) { // NaN-safe, -0 vs 0 counted as a difference
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

struct gemm_shape {
  const char* what;
  int n, k;
  bool bias;
  bool f32_out;
};

// One shape's operands, made on the GPU: x [max_m, k] ~ N(0, 1), w [n, k] ~ N(0, 0.02), bias ~ N(0, 0.1).
struct gemm_operands {
  device_buffer<bf16> x, w, bias;
  gemm_operands(const gemm_shape& s, int max_m)
      : x(static_cast<std::size_t>(max_m) * s.k), w(static_cast<std::size_t>(s.n) * s.k),
        bias(static_cast<std::size_t>(s.n)) {
    REQUIRE(kcu::random_fill(x.data(), x.size(), 1, 0.0f, 1.0f, nullptr) == cudaSuccess);
    REQUIRE(kcu::random_fill(w.data(), w.size(), 2, 0.0f, 0.02f, nullptr) == cudaSuccess);
    REQUIRE(kcu::random_fill(bias.data(), bias.size(), 3, 0.0f, 0.1f, nullptr) == cudaSuccess);
    sync_or_fail();
  }
};

// Rows `probes` of x computed alone (m = 1, the row copied to the front) and inside calls of
// every m in `ms`; returns how many (row, m) pairs differ from the row alone.
template <class Out>
int rows_that_differ(kcu::cublaslt_gemm& gemm, const gemm_shape& s, const gemm_operands& op,
                     const std::vector<int>& ms, const std::vector<int>& probes) {
  const int max_m = *std::max_element(ms.begin(), ms.end());
  const void* bias = s.bias ? op.bias.data() : nullptr;
  const auto out = s.f32_out ? kcu::gemm_type::f32 : kcu::gemm_type::bf16;
  const auto n = static_cast<std::size_t>(s.n);
  device_buffer<Out> d_one(n), d_y(static_cast<std::size_t>(max_m) * n);
  device_buffer<bf16> d_row(static_cast<std::size_t>(s.k));
  std::vector<std::vector<Out>> alone;
  for (int r : probes) {
    REQUIRE(cudaMemcpy(d_row.data(), op.x.data() + static_cast<std::size_t>(r) * s.k, s.k * sizeof(bf16),
                       cudaMemcpyDeviceToDevice) == cudaSuccess);
    REQUIRE(gemm.linear(d_row.data(), op.w.data(), d_one.data(), 1, s.n, s.k, kcu::gemm_type::bf16, out, nullptr,
                        bias) == CUBLAS_STATUS_SUCCESS);
    sync_or_fail();
    alone.push_back(download_raw(d_one, 0, n));
  }
  int differ = 0;
  std::vector<Out> y;
  for (int m : ms) {
    REQUIRE(gemm.linear(op.x.data(), op.w.data(), d_y.data(), m, s.n, s.k, kcu::gemm_type::bf16, out, nullptr, bias) ==
            CUBLAS_STATUS_SUCCESS);
    sync_or_fail();
    y = download_raw(d_y, 0, static_cast<std::size_t>(m) * n);
    for (std::size_t i = 0; i < probes.size(); ++i)
      if (probes[i] < m)
        differ += std::memcmp(y.data() + static_cast<std::size_t>(probes[i]) * n, alone[i].data(), n * sizeof(Out)) ==
                          0
                      ? 0
                      : 1;
  }
  return differ;
}

int rows_that_differ(kcu::cublaslt_gemm& gemm, const gemm_shape& s, const gemm_operands& op,
                     const std::vector<int>& ms, const std::vector<int>& probes) {
  return s.f32_out ? rows_that_differ<float>(gemm, s, op, ms, probes)
                   : rows_that_differ<bf16>(gemm, s, op, ms, probes);
}

} // namespace

TEST_CASE("deterministic GEMM: a row's bits do not depend on m or on its row (8B projections, LM head, bias)") {
  const std::vector<gemm_shape> shapes = {{"qkv", 6144, 4096, false, false},
                                          {"gate_up", 28672, 4096, false, false},
                                          {"down", 4096, 14336, false, false},
                                          {"lm_head", 128256, 4096, false, true},
                                          {"qkv with bias", 1152, 896, true, false}};
  const std::vector<int> ms = {1, 3, 12, 64, 100, 257, 1000};
  const std::vector<int> probes = {0, 2, 5, 11, 63, 99, 256, 999};
  kcu::cublaslt_gemm invariant(std::size_t{32} << 20, kcu::gemm_selection::batch_invariant);
  kcu::cublaslt_gemm per_shape;
  for (const auto& s : shapes) {
    CAPTURE(s.what);
    const gemm_operands op(s, 1000);
    CHECK(rows_that_differ(invariant, s, op, ms, probes) == 0);
    // Every m of the shape runs one unsplit algorithm.
    const auto out = s.f32_out ? kcu::gemm_type::f32 : kcu::gemm_type::bf16;
    device_buffer<float> d_y(static_cast<std::size_t>(1000) * s.n);
    const void* bias = s.bias ? op.bias.data() : nullptr;
    cublasStatus_t status = CUBLAS_STATUS_SUCCESS;
    const auto first = invariant.algorithm_of(op.x.data(), op.w.data(), d_y.data(), 1, s.n, s.k, kcu::gemm_type::bf16,
                                              out, bias, status);
    REQUIRE(status == CUBLAS_STATUS_SUCCESS);
    CHECK(first.split_k == 1);
    for (int m : ms) {
      const auto a = invariant.algorithm_of(op.x.data(), op.w.data(), d_y.data(), m, s.n, s.k, kcu::gemm_type::bf16,
                                            out, bias, status);
      REQUIRE(status == CUBLAS_STATUS_SUCCESS);
      CHECK(a.id == first.id);
      CHECK(a.tile == first.tile);
      CHECK(a.split_k == 1);
    }
    MESSAGE(s.what << ": per-shape algorithms (the default) give " << rows_that_differ(per_shape, s, op, ms, probes)
                   << " (row, m) pairs that differ from the row alone; batch-invariant: 0");
  }
}

namespace {

// The 8B shape (GQA 32/8, 128-wide heads, 128,256-token vocabulary), three layers, dummy weights.
std::unique_ptr<runtime::model_runner> runner_8b(bool deterministic, runtime::model_config& config) {
  config = runtime::load_model_config(data_root() / "models" / "llama3-8b-shape");
  config.num_hidden_layers = 3;
  runtime::cuda_runner_options o;
  o.dtype = runtime::cuda_dtype::bfloat16;
  o.kv_dtype = runtime::kv_cache_dtype::bfloat16;
  o.block_size = 16;
  o.num_blocks = 1200;
  o.max_num_batched_tokens = 512;
  o.max_num_seqs = 16;
  o.max_blocks_per_seq = 64;
  o.dummy_weights = true;
  o.dummy_seed = 5;
  o.deterministic = deterministic;
  return runtime::make_cuda_model_runner(config, runtime::model_weights{}, o);
}

int argmax(std::span<const float> row) {
  return static_cast<int>(std::max_element(row.begin(), row.end()) - row.begin());
}

// A sequence's next-token logits in five ways on one runner; how many of its rows differ from
// the first way's, each way counted once per row.
struct invariance_run {
  int rows = 0, differ = 0;
  std::vector<std::vector<float>> alone; // the sequence's rows alone: prefill, then each decode
};

invariance_run sequence_five_ways(runtime::model_runner& runner, const runtime::model_config& cfg) {
  const int vocab = cfg.vocab_size, bs = 16, width = 64, decodes = 6;
  std::mt19937 rng(21);
  auto random_prompt = [&](int n) {
    std::vector<token_id> p(static_cast<std::size_t>(n));
    for (auto& t : p)
      t = static_cast<token_id>(rng() % static_cast<unsigned>(vocab));
    return p;
  };
  auto pool = shuffled_pool(1200, 9);
  auto table = [&] { return scattered_blocks(width * bs, bs, pool); };
  std::vector<float> logits(static_cast<std::size_t>(512) * vocab);
  auto row = [&](int r) {
    return std::vector<float>(logits.begin() + static_cast<std::ptrdiff_t>(r) * vocab,
                              logits.begin() + static_cast<std::ptrdiff_t>(r + 1) * vocab);
  };
  std::uint64_t step = 0;
  auto run = [&](runtime::step_batch_builder& b) {
    auto batch = b.take(step++);
    std::fill(logits.begin(), logits.end(), 0.0f);
    runner.execute(batch, std::span<float>(logits).first(batch.logits_rows.size() * static_cast<std::size_t>(vocab)));
  };

  // 1. Alone: the 300-token prompt in one step, then `decodes` single-row steps (graph of 1).
  const auto prompt = random_prompt(300);
  auto ids = prompt;
  const auto alone_table = table();
  std::vector<std::vector<float>> alone;
  {
    runtime::step_batch_builder b(bs, width);
    b.add(ids, 0, alone_table, 1);
    run(b);
    alone.push_back(row(0));
  }
  for (int d = 0; d < decodes; ++d) {
    ids.push_back(argmax(alone.back()));
    runtime::step_batch_builder b(bs, width);
    b.add(std::span(ids).subspan(ids.size() - 1, 1), static_cast<int>(ids.size()) - 1, alone_table, 1);
    run(b);
    alone.push_back(row(0));
  }

  invariance_run result;
  result.alone = alone;
  auto compare = [&](const std::vector<float>& got, int index) {
    ++result.rows;
    result.differ += same_bits(got, alone[static_cast<std::size_t>(index)]) ? 0 : 1;
  };

  // 2. Chunked beside others: 128 + 128 + 44 tokens, at rows 3, 1 and 2 of prefill steps of
  //    other prompts; then decoded at row 5 of 12 sequences (graph of 12), fed the same tokens.
  {
    std::vector<std::vector<token_id>> others;
    std::vector<std::vector<std::int32_t>> other_tables;
    for (int i = 0; i < 11; ++i) {
      others.push_back(random_prompt(20 + static_cast<int>(rng() % 60)));
      other_tables.push_back(table());
    }
    const auto chunked_table = table();
    std::vector<int> other_cached(11, 0);
    auto add_other = [&](runtime::step_batch_builder& b, int i) {
      auto& o = others[static_cast<std::size_t>(i)];
      const int start = other_cached[static_cast<std::size_t>(i)];
      b.add(std::span(o).subspan(static_cast<std::size_t>(start)), start, other_tables[static_cast<std::size_t>(i)], 1);
      other_cached[static_cast<std::size_t>(i)] = static_cast<int>(o.size());
    };
    auto add_chunk = [&](runtime::step_batch_builder& b, int from, int to, int logits_rows) {
      b.add(std::span(prompt).subspan(static_cast<std::size_t>(from), static_cast<std::size_t>(to - from)), from,
            chunked_table, logits_rows);
    };
    {
      runtime::step_batch_builder b(bs, width);
      for (int i = 0; i < 3; ++i)
        add_other(b, i);
      add_chunk(b, 0, 128, 0);
      run(b);
    }
    {
      runtime::step_batch_builder b(bs, width);
      add_other(b, 3);
      add_chunk(b, 128, 256, 0);
      add_other(b, 4);
      run(b);
    }
    {
      runtime::step_batch_builder b(bs, width);
      add_other(b, 5);
      add_other(b, 6);
      add_chunk(b, 256, 300, 1); // logits row 2
      for (int i = 7; i < 11; ++i)
        add_other(b, i);
      run(b);
      compare(row(2), 0);
    }
    // Each other sequence appends a fixed token; the sequence gets the tokens it got alone.
    for (int d = 0; d < decodes; ++d) {
      runtime::step_batch_builder b(bs, width);
      for (int i = 0; i < 11; ++i) {
        if (i == 5) {
          const int pos = 300 + d;
          b.add(std::span(ids).subspan(static_cast<std::size_t>(pos), 1), pos, chunked_table, 1);
        }
        auto& o = others[static_cast<std::size_t>(i)];
        o.push_back(static_cast<token_id>(100 + i));
        add_other(b, i);
      }
      run(b);
      compare(row(5), d + 1);
    }
  }

  // 3. Prefix-cached: the first 256 positions read from the alone run's blocks, the rest
  //    computed beside one other prompt, then two decodes at row 0 of 2.
  {
    auto cached_table = table();
    std::copy_n(alone_table.begin(), 256 / bs, cached_table.begin());
    const auto other = random_prompt(77);
    const auto other_table = table();
    runtime::step_batch_builder b(bs, width);
    b.add(other, 0, other_table, 1);
    b.add(std::span(prompt).subspan(256), 256, cached_table, 1);
    run(b);
    compare(row(1), 0);
    std::vector<token_id> other_ids = other;
    for (int d = 0; d < 2; ++d) {
      runtime::step_batch_builder c(bs, width);
      const int pos = 300 + d;
      c.add(std::span(ids).subspan(static_cast<std::size_t>(pos), 1), pos, cached_table, 1);
      other_ids.push_back(7);
      c.add(std::span(other_ids).subspan(other_ids.size() - 1, 1), static_cast<int>(other_ids.size()) - 1, other_table,
            1);
      run(c);
      compare(row(0), d + 1);
    }
  }
  return result;
}

} // namespace

TEST_CASE("deterministic runner: a sequence's logits are bit-identical alone, chunked, batched and prefix-cached") {
  runtime::model_config cfg;
  std::vector<std::vector<float>> deterministic_alone;
  {
    auto runner = runner_8b(true, cfg);
    const auto r = sequence_five_ways(*runner, cfg);
    CHECK(r.rows == 1 + 6 + 1 + 2);
    CHECK(r.differ == 0);
    deterministic_alone = r.alone;
  }
  auto runner = runner_8b(false, cfg);
  const auto r = sequence_five_ways(*runner, cfg);
  // The deterministic kernels compute the same function: the prefill row (same inputs on both)
  // within bf16's rounding of the default kernels'.
  double diff = 0, ref = 0;
  for (std::size_t i = 0; i < r.alone[0].size(); ++i) {
    diff += double(deterministic_alone[0][i] - r.alone[0][i]) * (deterministic_alone[0][i] - r.alone[0][i]);
    ref += double(r.alone[0][i]) * r.alone[0][i];
  }
  CHECK(ref > 0);
  CHECK(std::sqrt(diff / ref) < 2e-2);
  MESSAGE("deterministic vs default prefill logits: rel L2 " << std::sqrt(diff / ref));
  MESSAGE("without engine.deterministic, " << r.differ << " of " << r.rows
                                           << " rows differ from the sequence alone (with it: 0)");
}
