// The CUDA runner against the CPU reference on stories260k: float32 logits within
// 1e-3 and identical greedy tokens through prefill + mixed decode at block sizes 1, 16
// and 128; bfloat16 within the design's bounds; an fp8 KV cache within its own; and
// block copies (device -> host -> device, device -> device) that keep the cache intact;
// dummy weights made on the GPU from the config alone; decode steps replayed from CUDA
// graphs that match kernel-by-kernel steps bit for bit; sampling on the GPU that draws the
// host sampler's tokens from the same logits; q/k/v biases (the model given random ones) on
// every path that adds them.
#include <doctest/doctest.h>
#include <stdexcept>

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "runtime/cuda/cuda_model_runner.hpp"
#include "runtime/fp8_quantization.hpp"
#include "runtime/model_weights.hpp"
#include "runtime/cuda/cuda_runner_factory.hpp"
#include "runtime/step_batch_builder.hpp"
#include "tests/gpu/host_draw_check.hpp"
#include "tests/support/stories_model.hpp"

using namespace troupe;
using namespace troupe::testing;
using runtime::token_id;
using troupe::testing::gpu::host_would_draw;

namespace {

constexpr int vocab = 512;

std::unique_ptr<runtime::model_runner> cuda_runner(runtime::cuda_dtype dtype, runtime::kv_cache_dtype kv, int bs,
                                                   int blocks, int host_blocks = 0) {
  const auto& m = stories_model();
  runtime::cuda_runner_options o;
  o.dtype = dtype;
  o.kv_dtype = kv;
  o.block_size = bs;
  o.num_blocks = blocks;
  o.num_host_blocks = host_blocks;
  o.max_num_batched_tokens = 256;
  o.max_num_seqs = 8;
  return runtime::make_cuda_model_runner(m.config, m.weights, o);
}

struct golden_case {
  std::vector<token_id> prompt, generated;
};

std::vector<golden_case> golden_cases() {
  std::vector<golden_case> out;
  auto golden = read_json(stories_dir() / "golden_greedy.json");
  for (const auto& c : golden.at("cases").as_array())
    out.push_back({json_array<token_id>(c.at("prompt_ids")), json_array<token_id>(c.at("generated_ids"))});
  return out;
}

int argmax(std::span<const float> row) {
  return static_cast<int>(std::max_element(row.begin(), row.end()) - row.begin());
}

// What a GPU run looked like next to the CPU's, over every logits row of every step.
struct comparison {
  float max_abs = 0;
  double diff_sq = 0, ref_sq = 0;
  int rows = 0, top1_agree = 0;
  int greedy = 0, greedy_agree = 0; // the rows that choose each sequence's next token
  double rel_l2() const { return std::sqrt(diff_sq / ref_sq); }
  double agreement() const { return static_cast<double>(top1_agree) / rows; }

  void add(std::span<const float> cpu, std::span<const float> gpu, bool chooses_next) {
    max_abs = std::max(max_abs, max_abs_diff(cpu, gpu));
    for (std::size_t i = 0; i < cpu.size(); ++i) {
      diff_sq += static_cast<double>(gpu[i] - cpu[i]) * (gpu[i] - cpu[i]);
      ref_sq += static_cast<double>(cpu[i]) * cpu[i];
    }
    const bool same = argmax(cpu) == argmax(gpu);
    ++rows;
    top1_agree += same;
    if (chooses_next) {
      ++greedy;
      greedy_agree += same;
    }
  }
};

// One step on both runners; returns the logits [rows, vocab] of each.
std::pair<std::vector<float>, std::vector<float>> both(runtime::model_runner& cpu, runtime::model_runner& gpu,
                                                       const runtime::step_batch& batch) {
  std::vector<float> a(batch.logits_rows.size() * vocab), b(a.size(), std::nanf(""));
  cpu.execute(batch, a);
  gpu.execute(batch, b);
  return {std::move(a), std::move(b)};
}

// The golden prompts as a mixed workload on both runners: step 0 prefills the first three
// prompts, step 1 decodes those beside the prefill of the last two, then every sequence
// decodes `decodes` more steps. Every prompt position gets logits; the next token of a
// sequence is the CPU's argmax (teacher forcing by the reference), so both runners see
// the same tokens even where they would disagree.
comparison mixed_workload(runtime::model_runner& cpu, runtime::model_runner& gpu, int bs, int decodes, unsigned seed) {
  auto cases = golden_cases();
  const int n = static_cast<int>(cases.size());
  int longest = 0;
  for (const auto& c : cases)
    longest = std::max(longest, static_cast<int>(c.prompt.size()));
  const int max_len = longest + decodes + 2;
  const int blocks_per_seq = (max_len + bs - 1) / bs;
  auto pool = shuffled_pool(cpu.cache_config().num_blocks, seed);
  std::vector<std::vector<std::int32_t>> tables;
  std::vector<std::vector<token_id>> ids;
  for (const auto& c : cases) {
    tables.push_back(scattered_blocks(blocks_per_seq * bs, bs, pool));
    ids.push_back(c.prompt);
  }
  std::vector<int> cached(n, 0);
  comparison cmp;
  const int first_wave = 3;
  for (int step = 0; step < decodes + 2; ++step) {
    runtime::step_batch_builder builder(bs, blocks_per_seq);
    std::vector<int> members;
    for (int s = 0; s < n; ++s) {
      const bool started = s < first_wave || step >= 1;
      if (!started)
        continue;
      const int len = static_cast<int>(ids[s].size()) - cached[s];
      // Prefill rows all get logits; a decode's one row does.
      builder.add(std::span(ids[s]).subspan(cached[s], len), cached[s], tables[s], len);
      members.push_back(s);
    }
    auto batch = builder.take(step);
    auto [a, b] = both(cpu, gpu, batch);
    for (std::size_t i = 0; i < members.size(); ++i) {
      const int s = members[i];
      const int first = batch.query_start[i], last = batch.query_start[i + 1];
      for (int row = first; row < last; ++row) {
        std::span<const float> ca(a.data() + static_cast<std::size_t>(row) * vocab, vocab);
        std::span<const float> ga(b.data() + static_cast<std::size_t>(row) * vocab, vocab);
        cmp.add(ca, ga, row == last - 1);
      }
      cached[s] = static_cast<int>(ids[s].size());
      ids[s].push_back(argmax(std::span<const float>(a.data() + static_cast<std::size_t>(last - 1) * vocab, vocab)));
    }
  }
  // The CPU's own greedy continuation is the golden one: the workload is the real thing.
  for (int s = 0; s < n; ++s) {
    const std::size_t p = cases[s].prompt.size();
    const std::size_t k = std::min(ids[s].size() - p, cases[s].generated.size());
    CHECK(std::equal(ids[s].begin() + p, ids[s].begin() + p + k, cases[s].generated.begin()));
  }
  return cmp;
}

int blocks_for(int bs) {
  return 5 * ((12 + 10 + 2 + bs - 1) / bs) + 7;
}

// Row by row over the first `rows` logits rows of each, every row a sequence's next-token choice.
comparison compare_rows(std::span<const float> ref, std::span<const float> got, int rows) {
  comparison cmp;
  for (int r = 0; r < rows; ++r)
    cmp.add(ref.subspan(static_cast<std::size_t>(r) * vocab, vocab),
            got.subspan(static_cast<std::size_t>(r) * vocab, vocab), true);
  return cmp;
}

// The design's bounds on a CUDA step against a reference that need not be bit-identical:
// float32 within 1e-3 and the same greedy tokens, bfloat16 within 1e-2 relative L2; float16,
// whose mantissa has 3 more bits, within 2e-3 (a bound of these tests: on the mixed workload it
// measured 0.00058 where bfloat16 measured 0.0049).
void check_design_bounds(const comparison& cmp, runtime::cuda_dtype dtype) {
  if (dtype == runtime::cuda_dtype::float32) {
    CHECK(cmp.max_abs < 1e-3f);
    CHECK(cmp.greedy_agree == cmp.greedy);
  } else {
    CHECK(cmp.rel_l2() < (dtype == runtime::cuda_dtype::float16 ? 2e-3 : 1e-2));
  }
}

// The runner of the CUDA-graph tests: steps of up to `seqs` sequences (graphs of 1, 2, 4 and 8
// when seqs is 8) of up to blocks_per_seq blocks of bs positions, the cache in the weights' type.
std::unique_ptr<runtime::model_runner> graph_test_runner(const loaded_model& m, runtime::cuda_dtype dtype, int bs,
                                                         int seqs, int blocks_per_seq, int blocks, bool graphs,
                                                         bool fp8_weights = false, bool int4_weights = false) {
  runtime::cuda_runner_options o;
  o.fp8_weights = fp8_weights;
  o.int4_weights = int4_weights;
  o.dtype = dtype;
  o.kv_dtype = runtime::own_cache_dtype(dtype);
  o.block_size = bs;
  o.num_blocks = blocks;
  o.max_num_batched_tokens = 256;
  o.max_num_seqs = seqs;
  o.max_blocks_per_seq = blocks_per_seq;
  o.cuda_graphs = graphs;
  return runtime::make_cuda_model_runner(m.config, m.weights, o);
}

// Sequences of random prompts (5..20 tokens) over scattered blocks, prefilled in one step, then
// decoded a token a step, each fed the token a reference runner chose (teacher forcing).
struct random_sequences {
  int bs, blocks_per_seq;
  std::vector<std::vector<std::int32_t>> tables;
  std::vector<std::vector<token_id>> ids;
  std::vector<int> cached; // positions in the cache
  std::uint64_t step = 0;

  random_sequences(int seqs, int bs_, int blocks_per_seq_, int blocks, unsigned prompt_seed, unsigned pool_seed)
      : bs(bs_), blocks_per_seq(blocks_per_seq_) {
    std::mt19937 rng(prompt_seed);
    auto pool = shuffled_pool(blocks, pool_seed);
    for (int s = 0; s < seqs; ++s) {
      tables.push_back(scattered_blocks(blocks_per_seq * bs, bs, pool));
      std::vector<token_id> prompt(5 + rng() % 16);
      for (auto& t : prompt)
        t = static_cast<token_id>(rng() % vocab);
      ids.push_back(std::move(prompt));
    }
    cached.assign(seqs, 0);
  }

  // Every prompt, one logits row each (its last position).
  runtime::step_batch prefill() {
    runtime::step_batch_builder b(bs, blocks_per_seq);
    for (std::size_t s = 0; s < ids.size(); ++s) {
      b.add(ids[s], 0, tables[s], 1);
      cached[s] = static_cast<int>(ids[s].size());
    }
    return b.take(step++);
  }

  // One decode step of the first n sequences, each fed the argmax of its row of `logits`.
  runtime::step_batch decode(int n, std::span<const float> logits) {
    runtime::step_batch_builder b(bs, blocks_per_seq);
    for (int s = 0; s < n; ++s) {
      ids[s].push_back(argmax(logits.subspan(static_cast<std::size_t>(s) * vocab, vocab)));
      b.add(std::span(ids[s]).subspan(cached[s], 1), cached[s], tables[s], 1);
      ++cached[s];
    }
    return b.take(step++);
  }
};

} // namespace

TEST_CASE("float32: logits within 1e-3 of the CPU and identical greedy tokens at block sizes 1, 16 and 128") {
  for (int bs : {1, 16, 128}) {
    CAPTURE(bs);
    const int blocks = blocks_for(bs);
    auto cpu = make_runner(bs, blocks);
    auto gpu = cuda_runner(runtime::cuda_dtype::float32, runtime::kv_cache_dtype::float32, bs, blocks);
    auto cmp = mixed_workload(*cpu, *gpu, bs, 10, static_cast<unsigned>(bs) + 11);
    MESSAGE("bs " << bs << ": max |diff| " << cmp.max_abs << ", rel L2 " << cmp.rel_l2() << " over " << cmp.rows
                  << " rows");
    CHECK(cmp.max_abs < 1e-3f);
    CHECK(cmp.greedy_agree == cmp.greedy);
    CHECK(cmp.top1_agree == cmp.rows);
  }
}

TEST_CASE("bfloat16: teacher-forced top-1 agreement >= 98% and relative L2 of logits < 1e-2") {
  for (int bs : {1, 16, 128}) {
    CAPTURE(bs);
    const int blocks = blocks_for(bs);
    auto cpu = make_runner(bs, blocks);
    auto gpu = cuda_runner(runtime::cuda_dtype::bfloat16, runtime::kv_cache_dtype::bfloat16, bs, blocks);
    auto cmp = mixed_workload(*cpu, *gpu, bs, 10, static_cast<unsigned>(bs) + 21);
    MESSAGE("bs " << bs << ": top-1 agreement " << cmp.agreement() << " over " << cmp.rows << " rows, rel L2 "
                  << cmp.rel_l2() << ", max |diff| " << cmp.max_abs);
    CHECK(cmp.agreement() >= 0.98);
    CHECK(cmp.rel_l2() < 1e-2);
  }
}

// float16 keeps 10 mantissa bits to bfloat16's 7: top-1 as bfloat16's bound, relative L2 five
// times tighter (check_design_bounds). It runs bfloat16's kernels with fp16 arithmetic (the GEMV
// at one row; stories260k's head_dim of 8 keeps its attention on the CUDA-core kernels, the
// tensor-core ones are the kernel tests' and the transformers reference's); also over an fp8
// cache (fp8's bound, below). A cache of another 16-bit type is refused.
TEST_CASE("float16: teacher-forced top-1 agreement >= 98% and relative L2 of logits < 2e-3, also over fp8") {
  for (int bs : {1, 16, 128}) {
    CAPTURE(bs);
    const int blocks = blocks_for(bs);
    auto cpu = make_runner(bs, blocks);
    auto gpu = cuda_runner(runtime::cuda_dtype::float16, runtime::kv_cache_dtype::float16, bs, blocks);
    CHECK(gpu->block_bytes() * 2 == cpu->block_bytes());
    auto cmp = mixed_workload(*cpu, *gpu, bs, 10, static_cast<unsigned>(bs) + 41);
    MESSAGE("bs " << bs << ": top-1 agreement " << cmp.agreement() << " over " << cmp.rows << " rows, rel L2 "
                  << cmp.rel_l2() << ", max |diff| " << cmp.max_abs);
    CHECK(cmp.agreement() >= 0.98);
    check_design_bounds(cmp, runtime::cuda_dtype::float16);
  }
  const int bs = 16, blocks = blocks_for(bs);
  auto cpu = make_runner(bs, blocks);
  auto gpu = cuda_runner(runtime::cuda_dtype::float16, runtime::kv_cache_dtype::fp8_e4m3, bs, blocks);
  auto cmp = mixed_workload(*cpu, *gpu, bs, 10, 43);
  MESSAGE("float16 + fp8: top-1 agreement " << cmp.agreement() << " over " << cmp.rows << " rows, rel L2 "
                                            << cmp.rel_l2());
  CHECK(cmp.agreement() >= 0.95);
  try {
    cuda_runner(runtime::cuda_dtype::float16, runtime::kv_cache_dtype::bfloat16, bs, blocks);
    FAIL("a bfloat16 cache under float16 weights was accepted");
  } catch (const std::invalid_argument& e) {
    CHECK(std::string(e.what()).find("bfloat16 KV cache needs bfloat16 weights, not float16") != std::string::npos);
  }
}

// fp8 e4m3 keeps 3 mantissa bits: K and V are off by up to 1/16 relative, so the bound is
// looser than bfloat16's (>= 95% top-1); scales are 1.0, fine for this model's K/V range.
TEST_CASE("fp8 KV cache (bfloat16 and float32 weights): teacher-forced top-1 agreement >= 95%") {
  for (auto dtype : {runtime::cuda_dtype::bfloat16, runtime::cuda_dtype::float32}) {
    const int bs = 16, blocks = blocks_for(bs);
    auto cpu = make_runner(bs, blocks);
    auto gpu = cuda_runner(dtype, runtime::kv_cache_dtype::fp8_e4m3, bs, blocks);
    CHECK(gpu->block_bytes() * 4 == cpu->block_bytes());
    auto cmp = mixed_workload(*cpu, *gpu, bs, 10, 31);
    MESSAGE(std::string(runtime::to_string(dtype))
            << " + fp8: top-1 agreement " << cmp.agreement() << " over " << cmp.rows << " rows, rel L2 "
            << cmp.rel_l2());
    CHECK(cmp.agreement() >= 0.95);
  }
}

TEST_CASE("copy_blocks: device -> host -> device and device -> device keep a sequence's cache") {
  const int bs = 4, blocks = 64, host_blocks = 32;
  auto cases = golden_cases();
  auto ids = cases[2].prompt;                                                        // 12 tokens: 3 blocks of 4
  ids.insert(ids.end(), cases[2].generated.begin(), cases[2].generated.begin() + 6); // 18 tokens: 5 blocks
  const int len = static_cast<int>(ids.size()) - 1; // cached before the decode that checks
  const int n_blocks = (len + 1 + bs - 1) / bs;
  auto cpu = make_runner(bs, blocks);
  auto gpu = cuda_runner(runtime::cuda_dtype::float32, runtime::kv_cache_dtype::float32, bs, blocks, host_blocks);
  CHECK(gpu->block_bytes() == cpu->block_bytes());

  // Prefill len tokens into a scattered table on both.
  auto pool = shuffled_pool(blocks, 5);
  auto table = scattered_blocks(n_blocks * bs, bs, pool);
  {
    runtime::step_batch_builder b(bs, n_blocks);
    b.add(std::span(ids).first(len), 0, table, 1);
    both(*cpu, *gpu, b.take(0));
  }
  // The decode that every variant below must reproduce, from the CPU.
  auto decode_with = [&](runtime::model_runner& r, const std::vector<std::int32_t>& t) {
    runtime::step_batch_builder b(bs, n_blocks);
    b.add(std::span(ids).subspan(len, 1), len, t, 1);
    std::vector<float> out(vocab, std::nanf(""));
    r.execute(b.take(1), out);
    return out;
  };
  // The CPU decodes into its own copy of the table; its cache is otherwise untouched by
  // the GPU's copies, so one reference serves every variant.
  const auto expected = decode_with(*cpu, table);

  SUBCASE("device -> host, overwrite, host -> other device blocks") {
    // Host blocks partly consecutive (one copy per run) and partly not.
    std::vector<std::int32_t> host_table{3, 4, 5, 9, 20};
    std::vector<runtime::block_copy> out_pairs, in_pairs;
    auto table2 = scattered_blocks(n_blocks * bs, bs, pool);
    for (int i = 0; i < n_blocks; ++i) {
      out_pairs.push_back({table[i], host_table[i]});
      in_pairs.push_back({host_table[i], table2[i]});
    }
    gpu->copy_blocks(runtime::kv_copy::device_to_host, out_pairs);
    // Another sequence overwrites the original device blocks, so only the host copy is left.
    {
      std::vector<token_id> other(len, 7);
      runtime::step_batch_builder b(bs, n_blocks);
      b.add(other, 0, table, 1);
      std::vector<float> scratch(vocab);
      gpu->execute(b.take(2), scratch);
    }
    gpu->copy_blocks(runtime::kv_copy::host_to_device, in_pairs);
    auto got = decode_with(*gpu, table2);
    CHECK(max_abs_diff(got, expected) < 1e-3f);
    CHECK(argmax(got) == argmax(expected));
  }
  SUBCASE("device -> device") {
    auto table2 = scattered_blocks(n_blocks * bs, bs, pool);
    std::vector<runtime::block_copy> pairs;
    for (int i = 0; i < n_blocks; ++i)
      pairs.push_back({table[i], table2[i]});
    gpu->copy_blocks(runtime::kv_copy::device_to_device, pairs);
    auto got = decode_with(*gpu, table2);
    CHECK(max_abs_diff(got, expected) < 1e-3f);
  }
  SUBCASE("a block outside the pools is refused") {
    std::vector<runtime::block_copy> bad{{0, host_blocks}};
    CHECK_THROWS_AS(gpu->copy_blocks(runtime::kv_copy::device_to_host, bad), std::logic_error);
  }
}

TEST_CASE("a step larger than max_num_batched_tokens is refused, and the runner still works after it") {
  const int bs = 16, blocks = 64;
  auto gpu = cuda_runner(runtime::cuda_dtype::bfloat16, runtime::kv_cache_dtype::bfloat16, bs, blocks);
  std::vector<token_id> many(300, 5);
  auto pool = shuffled_pool(blocks, 9);
  auto table = scattered_blocks(300, bs, pool);
  runtime::step_batch_builder b(bs, static_cast<int>(table.size()));
  b.add(many, 0, table, 1);
  std::vector<float> out(vocab);
  CHECK_THROWS_AS(gpu->execute(b.take(0), out), std::logic_error);
  runtime::step_batch_builder small(bs, static_cast<int>(table.size()));
  small.add(std::span(many).first(20), 0, table, 1);
  gpu->execute(small.take(1), out);
  CHECK(std::all_of(out.begin(), out.end(), [](float v) { return std::isfinite(v); }));
}

TEST_CASE("a bfloat16 KV cache with float32 weights is refused with a clear message") {
  CHECK_THROWS_WITH_AS(cuda_runner(runtime::cuda_dtype::float32, runtime::kv_cache_dtype::bfloat16, 16, 8),
                       doctest::Contains("KV cache"), std::invalid_argument);
}

TEST_CASE("dummy weights: made on the GPU from the config alone, every tensor, the same for the same seed") {
  const auto& cfg = stories_model().config;
  auto make = [&](std::uint64_t seed, runtime::cuda_memory_plan& plan) {
    runtime::cuda_runner_options o;
    o.num_blocks = 16;
    o.max_num_batched_tokens = 64;
    o.max_num_seqs = 4;
    o.dummy_weights = true;
    o.dummy_seed = seed;
    return runtime::make_cuda_model_runner(cfg, runtime::model_weights{}, o, &plan);
  };
  const std::size_t h = cfg.hidden_size, q = std::size_t(cfg.num_attention_heads) * cfg.head_dim,
                    kv = std::size_t(cfg.num_key_value_heads) * cfg.head_dim, inter = cfg.intermediate_size;
  const std::size_t params = (cfg.tie_word_embeddings ? 1 : 2) * std::size_t(cfg.vocab_size) * h + h +
                             cfg.num_hidden_layers * (2 * h + (q + 2 * kv) * h + h * q + 3 * inter * h);
  runtime::step_batch_builder b(16, 2);
  const std::vector<token_id> prompt{1, 400, 7, 300, 22, 9};
  b.add(prompt, 0, std::vector<std::int32_t>{3, 5}, static_cast<int>(prompt.size()));
  const auto batch = b.take(0);
  auto logits_of = [&](std::uint64_t seed) {
    runtime::cuda_memory_plan plan;
    auto gpu = make(seed, plan);
    CHECK(plan.weight_bytes == 2 * params); // bfloat16, nothing left out
    std::vector<float> out(prompt.size() * vocab, std::nanf(""));
    gpu->execute(batch, out);
    return out;
  };
  const auto a = logits_of(1), again = logits_of(1), other = logits_of(2);
  CHECK(std::all_of(a.begin(), a.end(), [](float v) { return std::isfinite(v); }));
  CHECK(a == again);
  CHECK(max_abs_diff(a, other) > 1e-3f);
  // Random weights spread the logits: not a constant row (which zero or unfilled weights would give).
  const auto [lo, hi] = std::minmax_element(a.begin(), a.begin() + vocab);
  CHECK(*hi - *lo > 1e-2f);
}

// Two runners over the same weights, one with graphs and one without, fed the same steps:
// a prefill of 8 sequences (never a graph), then decode steps of the captured sizes 1, 2, 4
// and 8 (the first of each size runs kernel by kernel and captures, the later ones replay),
// which must give bit-identical logits; then sizes 3, 5 and 7, padded to 4 and 8, whose
// GEMMs run with more rows than the kernel-by-kernel ones (cuBLASLt may pick another
// kernel for another M), so they are held to the design's bounds instead.
TEST_CASE("CUDA graphs: replayed decode steps give the logits of kernel-by-kernel steps") {
  for (auto dtype : {runtime::cuda_dtype::float32, runtime::cuda_dtype::bfloat16, runtime::cuda_dtype::float16}) {
    const bool f32 = dtype == runtime::cuda_dtype::float32;
    const unsigned salt = dtype == runtime::cuda_dtype::float16 ? 100 : 0; // fp16: other sequences
    CAPTURE(std::string(runtime::to_string(dtype)));
    const int bs = 16, seqs = 8, blocks_per_seq = 4, blocks = seqs * blocks_per_seq + 3;
    auto eager_runner = graph_test_runner(stories_model(), dtype, bs, seqs, blocks_per_seq, blocks, false);
    auto graph_runner = graph_test_runner(stories_model(), dtype, bs, seqs, blocks_per_seq, blocks, true);
    auto& graph = dynamic_cast<runtime::cuda_model_runner&>(*graph_runner);

    random_sequences sequences(seqs, bs, blocks_per_seq, blocks, (f32 ? 41 : 42) + salt, (f32 ? 43 : 44) + salt);
    std::vector<float> last(seqs * vocab), other(seqs * vocab);
    const auto first = sequences.prefill();
    eager_runner->execute(first, last);
    graph_runner->execute(first, other);
    CHECK(last == other);

    // One decode step of the first n sequences; each gets the kernel-by-kernel runner's argmax.
    auto decode = [&](int n) {
      const auto batch = sequences.decode(n, last);
      std::vector<float> a(n * vocab), g(n * vocab, std::nanf(""));
      eager_runner->execute(batch, a);
      graph_runner->execute(batch, g);
      std::copy(a.begin(), a.end(), last.begin());
      return std::pair{a, g};
    };
    for (int n : {1, 2, 4, 8, 8, 4, 2, 1, 1}) {
      CAPTURE(n);
      auto [a, g] = decode(n);
      CHECK(a == g);
    }
    CHECK(graph.graph_replays() == 9); // every decode step: all sizes were captured when the runner was built
    for (int n : {3, 5, 7, 3}) {
      CAPTURE(n);
      auto [a, g] = decode(n);
      MESSAGE(std::string(runtime::to_string(dtype)) << ", batch " << n << " padded: max |diff| " << max_abs_diff(a, g)
                                 << std::string(a == g ? " (identical)" : ""));
      check_design_bounds(compare_rows(a, g, n), dtype);
    }
    CHECK(graph.graph_replays() == 13); // every padded step replays the graph of 4 or 8
    CHECK(graph.graph_error() == "");
  }
}

TEST_CASE("execute_sampled: the host sampler's tokens from execute's logits, in prefill and graph decode") {
  const int bs = 16, seqs = 8, blocks_per_seq = 4, blocks = seqs * blocks_per_seq + 3;
  runtime::cuda_runner_options o;
  o.block_size = bs;
  o.num_blocks = blocks;
  o.max_num_batched_tokens = 256;
  o.max_num_seqs = seqs;
  o.max_blocks_per_seq = blocks_per_seq;
  auto runner = runtime::make_cuda_model_runner(stories_model().config, stories_model().weights, o);
  auto& cuda = dynamic_cast<runtime::cuda_model_runner&>(*runner);
  REQUIRE(runner->samples_on_device({}));

  // Greedy, plain sampling and every cut, one per sequence, each with its own seed.
  std::vector<runtime::sampling_params> params(seqs);
  for (int s = 0; s < seqs; ++s) {
    params[s].temperature = s % 4 == 0 ? 0.0f : 0.6f + 0.2f * (s % 3);
    params[s].top_k = s % 3 == 1 ? 20 : 0;
    params[s].top_p = s % 4 == 2 ? 0.8f : 1.0f;
    params[s].min_p = s == 7 ? 0.05f : 0.0f;
  }
  std::mt19937 rng(5);
  auto pool = shuffled_pool(blocks, 6);
  std::vector<std::vector<std::int32_t>> tables;
  std::vector<std::vector<token_id>> ids;
  for (int s = 0; s < seqs; ++s) {
    tables.push_back(scattered_blocks(blocks_per_seq * bs, bs, pool));
    std::vector<token_id> prompt(4 + rng() % 12);
    for (auto& t : prompt)
      t = static_cast<token_id>(rng() % vocab);
    ids.push_back(std::move(prompt));
  }
  std::vector<int> cached(seqs, 0);
  int agreed = 0, drawn = 0;
  // Each step runs twice over the same inputs (the cache gets the same K/V again): execute
  // for the logits, then execute_sampled; every sequence continues with the sampled token.
  for (int step = 0; step < 6; ++step) {
    runtime::step_batch_builder b(bs, blocks_per_seq);
    std::vector<runtime::device_sample> rows;
    for (int s = 0; s < seqs; ++s) {
      const int len = static_cast<int>(ids[s].size()) - cached[s];
      b.add(std::span(ids[s]).subspan(cached[s], len), cached[s], tables[s], 1);
      rows.push_back(runtime::make_device_sample(params[s], 1000 + s, step));
    }
    const auto batch = b.take(step);
    std::vector<float> logits(seqs * vocab);
    runner->execute(batch, logits);
    std::vector<token_id> tokens(seqs, -1);
    const auto replays = cuda.graph_replays();
    runner->execute_sampled(batch, rows, tokens, {});
    CHECK(cuda.graph_replays() == replays + (step > 0 ? 1 : 0)); // decode steps replay their graph
    for (int s = 0; s < seqs; ++s) {
      CAPTURE(step);
      CAPTURE(s);
      REQUIRE(tokens[s] >= 0);
      REQUIRE(tokens[s] < vocab);
      ++drawn;
      agreed += host_would_draw(std::span<const float>(logits).subspan(static_cast<std::size_t>(s) * vocab, vocab),
                                params[s], rows[s].u, tokens[s]);
      cached[s] = static_cast<int>(ids[s].size());
      ids[s].push_back(tokens[s]);
    }
  }
  MESSAGE(agreed << " of " << drawn << " tokens are the host sampler's");
  CHECK(agreed >= drawn - 1);
}

namespace {

// stories260k with random q/k/v biases, as Qwen2 has them. The CUDA runner adds them in the QKV
// GEMM: cuBLASLt's bias epilogue, or the GEMV's store in one-row steps (bfloat16); the CPU
// reference in its fp32 linear.
const loaded_model& biased_stories_model() {
  static const loaded_model model = [] {
    loaded_model m = stories_model();
    m.config.attention_bias = true;
    std::mt19937 rng(97);
    std::normal_distribution<float> draw(0.0f, 0.5f);
    const std::size_t hidden = static_cast<std::size_t>(m.config.hidden_size);
    for (auto& l : m.weights.layers)
      for (auto [bias, proj] :
           {std::pair{&l.q_bias, &l.q_proj}, std::pair{&l.k_bias, &l.k_proj}, std::pair{&l.v_bias, &l.v_proj}}) {
        bias->resize(proj->size() / hidden);
        for (auto& b : *bias)
          b = draw(rng);
      }
    return m;
  }();
  return model;
}

} // namespace

// Every path that adds a bias, against the CPU: a prefill of 8 sequences, then decode steps of 1
// (bfloat16 and float16: the GEMV), 2, 4 and 8 sequences (cuBLASLt), each captured and then replayed from a
// CUDA graph, and of 3 (padded to 4). Teacher-forced by the CPU's argmax. The biases must matter:
// the CPU's logits without them are far outside the bounds.
TEST_CASE("q/k/v biases: prefill and decode steps of 1-8 sequences, from CUDA graphs, match the CPU") {
  const auto& biased = biased_stories_model();
  for (auto dtype : {runtime::cuda_dtype::float32, runtime::cuda_dtype::bfloat16, runtime::cuda_dtype::float16}) {
    const bool f32 = dtype == runtime::cuda_dtype::float32;
    const unsigned salt = dtype == runtime::cuda_dtype::float16 ? 100 : 0; // fp16: other sequences
    CAPTURE(std::string(runtime::to_string(dtype)));
    const int bs = 16, seqs = 8, blocks_per_seq = 4, blocks = seqs * blocks_per_seq + 3;
    runtime::cpu_model_runner cpu(biased.config, biased.weights, runtime::kv_cache_config{blocks, bs}, 1);
    runtime::cpu_model_runner unbiased(stories_model().config, stories_model().weights,
                                       runtime::kv_cache_config{blocks, bs}, 1);
    auto gpu_runner = graph_test_runner(biased, dtype, bs, seqs, blocks_per_seq, blocks, true);
    auto& gpu = dynamic_cast<runtime::cuda_model_runner&>(*gpu_runner);

    random_sequences sequences(seqs, bs, blocks_per_seq, blocks, (f32 ? 51 : 52) + salt, (f32 ? 53 : 54) + salt);
    const auto first = sequences.prefill();
    std::vector<float> last(seqs * vocab), without(seqs * vocab), g(seqs * vocab, std::nanf(""));
    cpu.execute(first, last);
    unbiased.execute(first, without);
    gpu_runner->execute(first, g);
    const comparison bias_effect = compare_rows(last, without, seqs);
    MESSAGE("without the biases the CPU's logits are " << bias_effect.rel_l2() << " away (rel L2)");
    CHECK(bias_effect.rel_l2() > 0.05);

    auto check_step = [&](const comparison& cmp, const char* what, int n) {
      // std::string: doctest prints a const char* that is not a literal as a pointer
      MESSAGE(std::string(runtime::to_string(dtype)) << ", " << std::string(what) << " " << n << ": max |diff| " << cmp.max_abs
                                 << ", rel L2 " << cmp.rel_l2());
      check_design_bounds(cmp, dtype);
    };
    check_step(compare_rows(last, g, seqs), "prefill of", seqs);
    for (int n : {1, 2, 4, 8, 1, 2, 4, 8, 3}) {
      CAPTURE(n);
      const auto batch = sequences.decode(n, last);
      std::vector<float> a(n * vocab), d(n * vocab, std::nanf(""));
      cpu.execute(batch, a);
      gpu_runner->execute(batch, d);
      check_step(compare_rows(a, d, n), "decode of", n);
      std::copy(a.begin(), a.end(), last.begin());
    }
    CHECK(gpu.graph_replays() == 9); // every decode step ran from a graph captured when the runner was built
    CHECK(gpu.graph_error() == "");
  }
}

namespace {

// stories260k made a Qwen3: per-head q/k RMSNorm before RoPE with random weights near 1. The CUDA
// runner normalizes inside rope_write_kv (fp32, one rounding at the store); the CPU reference with
// kernels/cpu head_rms_norm.
const loaded_model& qk_norm_stories_model() {
  static const loaded_model model = [] {
    loaded_model m = stories_model();
    m.config.model_type = "qwen3";
    m.config.architecture = "Qwen3ForCausalLM";
    m.config.qk_norm = true;
    std::mt19937 rng(98);
    std::normal_distribution<float> draw(1.0f, 0.3f);
    for (auto& l : m.weights.layers)
      for (auto* norm : {&l.q_norm, &l.k_norm}) {
        norm->resize(static_cast<std::size_t>(m.config.head_dim));
        for (auto& w : *norm)
          w = draw(rng);
      }
    return m;
  }();
  return model;
}

} // namespace

// Qwen3's q/k norm in every step kind, against the CPU: a prefill of 8 sequences, then decode steps of
// 1-8 sequences replayed from CUDA graphs, in fp32, bf16 and fp16. The norm must matter: the CPU's
// logits without it are far outside the bounds.
TEST_CASE("Qwen3 q/k norm: prefill and decode steps of 1-8 sequences, from CUDA graphs, match the CPU") {
  const auto& normed = qk_norm_stories_model();
  for (auto dtype : {runtime::cuda_dtype::float32, runtime::cuda_dtype::bfloat16, runtime::cuda_dtype::float16}) {
    const bool f32 = dtype == runtime::cuda_dtype::float32;
    const unsigned salt = dtype == runtime::cuda_dtype::float16 ? 100 : 0;
    CAPTURE(std::string(runtime::to_string(dtype)));
    const int bs = 16, seqs = 8, blocks_per_seq = 4, blocks = seqs * blocks_per_seq + 3;
    runtime::cpu_model_runner cpu(normed.config, normed.weights, runtime::kv_cache_config{blocks, bs}, 1);
    runtime::cpu_model_runner plain(stories_model().config, stories_model().weights,
                                    runtime::kv_cache_config{blocks, bs}, 1);
    auto gpu_runner = graph_test_runner(normed, dtype, bs, seqs, blocks_per_seq, blocks, true);
    auto& gpu = dynamic_cast<runtime::cuda_model_runner&>(*gpu_runner);

    random_sequences sequences(seqs, bs, blocks_per_seq, blocks, (f32 ? 61 : 62) + salt, (f32 ? 63 : 64) + salt);
    const auto first = sequences.prefill();
    std::vector<float> last(seqs * vocab), without(seqs * vocab), g(seqs * vocab, std::nanf(""));
    cpu.execute(first, last);
    plain.execute(first, without);
    gpu_runner->execute(first, g);
    const comparison norm_effect = compare_rows(last, without, seqs);
    MESSAGE("without the q/k norm the CPU's logits are " << norm_effect.rel_l2() << " away (rel L2)");
    CHECK(norm_effect.rel_l2() > 0.05);

    auto check_step = [&](const comparison& cmp, const char* what, int n) {
      MESSAGE(std::string(runtime::to_string(dtype)) << ", " << std::string(what) << " " << n << ": max |diff| "
                                                     << cmp.max_abs << ", rel L2 " << cmp.rel_l2());
      check_design_bounds(cmp, dtype);
    };
    check_step(compare_rows(last, g, seqs), "prefill of", seqs);
    for (int n : {1, 2, 4, 8, 3}) {
      CAPTURE(n);
      const auto batch = sequences.decode(n, last);
      std::vector<float> a(n * vocab), d(n * vocab, std::nanf(""));
      cpu.execute(batch, a);
      gpu_runner->execute(batch, d);
      check_step(compare_rows(a, d, n), "decode of", n);
      std::copy(a.begin(), a.end(), last.begin());
    }
    CHECK(gpu.graph_error() == "");
  }
}

namespace {

// stories260k with each MLP made a mixture of 4 experts, 2 a token with normalized weights: expert
// e's matrices are the original MLP's plus noise of its own, the router random. With `shared`,
// Qwen2-MoE's form: the original MLP stays as the shared expert, scaled by a random sigmoid gate.
loaded_model make_moe_stories(bool shared) {
  loaded_model m = stories_model();
  constexpr int experts = 4;
  const std::size_t hidden = m.config.hidden_size, inter = m.config.intermediate_size;
  m.config.moe = runtime::moe_config{.num_experts = experts,
                                     .experts_per_token = 2,
                                     .expert_intermediate_size = static_cast<int>(inter),
                                     .normalize_top_k = true,
                                     .shared_expert = shared};
  if (!shared)
    m.config.intermediate_size = 0;
  std::mt19937 rng(shared ? 81 : 80);
  std::normal_distribution<float> noise(0.0f, 0.05f), score(0.0f, 0.5f);
  auto perturbed = [&](const std::vector<float>& w, std::vector<float>& out) {
    for (float v : w)
      out.push_back(v + noise(rng));
  };
  for (auto& l : m.weights.layers) {
    l.router.resize(experts * hidden);
    for (float& v : l.router)
      v = score(rng);
    for (int e = 0; e < experts; ++e) {
      perturbed(l.gate_proj, l.experts_gate_up);
      perturbed(l.up_proj, l.experts_gate_up);
      perturbed(l.down_proj, l.experts_down);
    }
    if (shared) {
      l.shared_expert_gate.resize(hidden);
      for (float& v : l.shared_expert_gate)
        v = score(rng);
    } else {
      l.gate_proj.clear();
      l.up_proj.clear();
      l.down_proj.clear();
    }
  }
  return m;
}

const loaded_model& moe_stories_model(bool shared) {
  static const loaded_model routed = make_moe_stories(false), with_shared = make_moe_stories(true);
  return shared ? with_shared : routed;
}

} // namespace

// The prefill of 8 sequences gives each expert about 50 rows: the experts' offsets go to the host
// and each expert runs one cuBLASLt GEMM. The prefill of one sequence and the decode steps run the
// grouped GEMV (inside CUDA graphs for the decode steps). stories260k's 172-row experts are not a
// multiple of 8 wide: the GEMV's unaligned path.
TEST_CASE("mixture of experts (routed, and with a shared expert): prefill and decode steps match the CPU") {
  for (bool shared : {false, true})
    for (auto dtype : {runtime::cuda_dtype::float32, runtime::cuda_dtype::bfloat16}) {
      const auto& moe = moe_stories_model(shared);
      CAPTURE(shared);
      CAPTURE(std::string(runtime::to_string(dtype)));
      for (int seqs : {8, 1}) {
        CAPTURE(seqs);
        const int bs = 16, blocks_per_seq = 4, blocks = 8 * blocks_per_seq + 3;
        runtime::cpu_model_runner cpu(moe.config, moe.weights, runtime::kv_cache_config{blocks, bs}, 1);
        runtime::cpu_model_runner dense(stories_model().config, stories_model().weights,
                                        runtime::kv_cache_config{blocks, bs}, 1);
        auto gpu_runner = graph_test_runner(moe, dtype, bs, 8, blocks_per_seq, blocks, true);
        auto& gpu = dynamic_cast<runtime::cuda_model_runner&>(*gpu_runner);
        random_sequences sequences(seqs, bs, blocks_per_seq, blocks, 91 + seqs + shared, 93);
        const auto first = sequences.prefill();
        std::vector<float> last(seqs * vocab), without(seqs * vocab), g(seqs * vocab, std::nanf(""));
        cpu.execute(first, last);
        dense.execute(first, without);
        gpu_runner->execute(first, g);
        // The experts change the model: a runner that ignored them would not pass below.
        CHECK(compare_rows(last, without, seqs).rel_l2() > 0.05);
        // fp32: the dense bounds. bf16 rounds the activations the router scores: a token whose two best
        // experts' probabilities lie within that rounding takes the other one on the GPU, and its MLP output
        // moves by the two experts' difference (stories260k's 4 experts have such tokens every few steps).
        // Measured 0.005-0.028 rel L2 (H100, 2026-12-07), against 3e-7 in fp32, where no choice flips.
        const auto check_moe_bounds = [&](const comparison& cmp) {
          if (dtype == runtime::cuda_dtype::float32)
            check_design_bounds(cmp, dtype);
          else
            CHECK(cmp.rel_l2() < 4e-2);
        };
        const comparison prefill = compare_rows(last, g, seqs);
        MESSAGE("prefill of " << seqs << ": max |diff| " << prefill.max_abs << ", rel L2 " << prefill.rel_l2());
        check_moe_bounds(prefill);
        for (int n : {1, 2, 4, 8, 3}) {
          if (n > seqs)
            continue;
          CAPTURE(n);
          const auto batch = sequences.decode(n, last);
          std::vector<float> a(n * vocab), d(n * vocab, std::nanf(""));
          cpu.execute(batch, a);
          gpu_runner->execute(batch, d);
          check_moe_bounds(compare_rows(a, d, n));
          std::copy(a.begin(), a.end(), last.begin());
        }
        CHECK(gpu.graph_error() == "");
        CHECK(gpu.graph_replays() > 0);
      }
    }
}

TEST_CASE("mixture of experts: FP8 or INT4 weights are refused with a clear message, and dummy MoE weights run") {
  const auto& moe = moe_stories_model(false);
  for (bool fp8 : {true, false}) {
    try {
      graph_test_runner(moe, runtime::cuda_dtype::bfloat16, 16, 8, 4, 40, false, fp8, !fp8);
      FAIL("quantized MoE weights were accepted");
    } catch (const std::invalid_argument& e) {
      CHECK(std::string(e.what()).find("mixture-of-experts") != std::string::npos);
    }
  }
  runtime::cuda_runner_options o;
  o.dtype = runtime::cuda_dtype::bfloat16;
  o.kv_dtype = runtime::kv_cache_dtype::bfloat16;
  o.block_size = 16;
  o.num_blocks = 40;
  o.max_num_batched_tokens = 256;
  o.max_num_seqs = 8;
  o.max_blocks_per_seq = 4;
  o.dummy_weights = true;
  auto runner = runtime::make_cuda_model_runner(moe.config, runtime::model_weights{}, o);
  random_sequences sequences(8, 16, 4, 40, 95, 96);
  std::vector<float> logits(8 * vocab, std::nanf(""));
  runner->execute(sequences.prefill(), logits);
  CHECK(std::all_of(logits.begin(), logits.end(), [](float v) { return std::isfinite(v); }));
}

namespace {

// stories260k with its linear layers rounded to FP8 e4m3 a row at a time (model.quantization=fp8):
// the CPU computes in fp32 on these values, the CUDA runner from their codes and scales.
const loaded_model& fp8_stories_model() {
  static const loaded_model model = [] {
    loaded_model m = stories_model();
    runtime::quantize_linears_fp8(m.weights, static_cast<std::size_t>(m.config.hidden_size));
    return m;
  }();
  return model;
}

} // namespace

namespace {

// stories260k with each linear layer whose width is groups of 32 (all but down_proj's 172 columns)
// rounded to INT4 as AWQ stores it: per row and group of 32 columns, scale = (max - min) / 15 over a
// range holding 0, rounded to fp16, zero = round(-min / scale), code = round(w / scale) + zero
// clamped to [0, 15], value = (code - zero) * scale; its groups kept beside the values.
const loaded_model& int4_stories_model() {
  static const loaded_model model = [] {
    loaded_model m = stories_model();
    constexpr std::size_t group = 32;
    auto quantize = [](std::vector<float>& w, runtime::int4_groups& g, std::size_t columns) {
      if (columns % group != 0)
        return; // stays dense, as a layer an AWQ checkpoint leaves out
      const std::size_t rows = w.size() / columns, per_row = columns / group;
      g = {group, std::vector<float>(rows * per_row), std::vector<float>(rows * per_row)};
      for (std::size_t i = 0; i < rows * per_row; ++i) {
        float* v = w.data() + (i / per_row) * columns + (i % per_row) * group;
        float lo = 0.0f, hi = 0.0f;
        for (std::size_t c = 0; c < group; ++c)
          lo = std::min(lo, v[c]), hi = std::max(hi, v[c]);
        float s = runtime::f16_to_f32(runtime::f32_to_f16((hi - lo) / 15.0f));
        if (s == 0.0f)
          s = 1.0f;
        const int zero = std::clamp(static_cast<int>(std::lround(-lo / s)), 0, 15);
        g.scales[i] = s;
        g.zeros[i] = static_cast<float>(zero);
        for (std::size_t c = 0; c < group; ++c) {
          const int code = std::clamp(static_cast<int>(std::lround(v[c] / s)) + zero, 0, 15);
          v[c] = static_cast<float>(code - zero) * s;
        }
      }
    };
    const auto hidden = static_cast<std::size_t>(m.config.hidden_size);
    for (auto& l : m.weights.layers) {
      quantize(l.q_proj, l.q_proj_int4, hidden);
      quantize(l.k_proj, l.k_proj_int4, hidden);
      quantize(l.v_proj, l.v_proj_int4, hidden);
      quantize(l.o_proj, l.o_proj_int4, l.o_proj.size() / hidden);
      quantize(l.gate_proj, l.gate_proj_int4, hidden);
      quantize(l.up_proj, l.up_proj_int4, hidden);
      quantize(l.down_proj, l.down_proj_int4, l.down_proj.size() / hidden);
    }
    return m;
  }();
  return model;
}

} // namespace

namespace {

enum class linear_form { fp8, int4 };
const char* name_of(linear_form f) { return f == linear_form::fp8 ? "FP8" : "INT4"; }

// Quantized weights on the GPU in every step kind, against the CPU over the same values: the
// prefill of 8 sequences (more rows than the quantized GEMVs take: each layer dequantized for
// cuBLASLt), then decode steps of 1-8 sequences replayed from CUDA graphs (through the GEMV where a
// layer's shape allows; stories260k's 172-wide down_proj is dequantized for FP8 and dense for INT4).
// Bounds as for dense weights of the dtype: the GPU reads the same values. Graphs on and off give
// the same logits; the weights take fewer bytes than the same model's dense ones.
void check_quantized_steps(const loaded_model& rounded, linear_form form, unsigned seed) {
  const bool fp8 = form == linear_form::fp8, int4 = form == linear_form::int4;
  for (auto dtype : {runtime::cuda_dtype::float32, runtime::cuda_dtype::bfloat16, runtime::cuda_dtype::float16}) {
    const bool f32 = dtype == runtime::cuda_dtype::float32;
    CAPTURE(std::string(runtime::to_string(dtype)));
    const int bs = 16, seqs = 8, blocks_per_seq = 4, blocks = seqs * blocks_per_seq + 3;
    runtime::cpu_model_runner cpu(rounded.config, rounded.weights, runtime::kv_cache_config{blocks, bs}, 1);
    auto gpu_runner = graph_test_runner(rounded, dtype, bs, seqs, blocks_per_seq, blocks, true, fp8, int4);
    auto eager_runner = graph_test_runner(rounded, dtype, bs, seqs, blocks_per_seq, blocks, false, fp8, int4);
    auto dense_runner = graph_test_runner(rounded, dtype, bs, seqs, blocks_per_seq, blocks, false);
    auto& gpu = dynamic_cast<runtime::cuda_model_runner&>(*gpu_runner);
    const auto& dense = dynamic_cast<runtime::cuda_model_runner&>(*dense_runner);
    MESSAGE("weights on the device: " << name_of(form) << " " << gpu.memory_plan().weight_bytes << " bytes, dense "
                                      << dense.memory_plan().weight_bytes);
    CHECK(gpu.memory_plan().weight_bytes < dense.memory_plan().weight_bytes);

    random_sequences sequences(seqs, bs, blocks_per_seq, blocks, f32 ? seed : seed + 1, f32 ? seed + 2 : seed + 3);
    const auto first = sequences.prefill();
    std::vector<float> last(seqs * vocab), g(seqs * vocab, std::nanf("")), e(seqs * vocab, std::nanf(""));
    cpu.execute(first, last);
    gpu_runner->execute(first, g);
    eager_runner->execute(first, e);
    CHECK(g == e);
    auto check_step = [&](const comparison& cmp, const char* what, int n) {
      MESSAGE(std::string(runtime::to_string(dtype)) << ", " << name_of(form) << " weights, " << std::string(what)
                                                     << " " << n << ": max |diff| " << cmp.max_abs << ", rel L2 "
                                                     << cmp.rel_l2());
      check_design_bounds(cmp, dtype);
    };
    check_step(compare_rows(last, g, seqs), "prefill of", seqs);
    for (int n : {1, 2, 4, 8, 3}) {
      CAPTURE(n);
      const auto batch = sequences.decode(n, last);
      std::vector<float> a(n * vocab), d(n * vocab, std::nanf("")), k(n * vocab, std::nanf(""));
      cpu.execute(batch, a);
      gpu_runner->execute(batch, d);
      eager_runner->execute(batch, k);
      CHECK(d == k); // a graph replays the kernels it captured
      check_step(compare_rows(a, d, n), "decode of", n);
      std::copy(a.begin(), a.end(), last.begin());
    }
    CHECK(gpu.graph_replays() > 0);
    CHECK(gpu.graph_error() == "");
  }
}

// Dummy quantized weights (model.load-format=dummy with FP8, or with an AWQ config): made on the
// device, the same for the same seed, finite logits.
void check_dummy_quantized(linear_form form) {
  runtime::cuda_runner_options o;
  o.dtype = runtime::cuda_dtype::bfloat16;
  o.kv_dtype = runtime::kv_cache_dtype::bfloat16;
  o.num_blocks = 16;
  o.max_num_batched_tokens = 64;
  o.max_num_seqs = 4;
  o.dummy_weights = true;
  o.fp8_weights = form == linear_form::fp8;
  o.int4_weights = form == linear_form::int4;
  o.dummy_seed = 5;
  const auto& cfg = stories_model().config;
  auto a = runtime::make_cuda_model_runner(cfg, {}, o);
  auto b = runtime::make_cuda_model_runner(cfg, {}, o);
  runtime::step_batch_builder builder(o.block_size, 4);
  const std::vector<token_id> prompt = {1, 15, 200, 31, 7};
  const std::vector<std::int32_t> table = {0, 1, 2, 3};
  builder.add(prompt, 0, table, 1);
  const auto batch = builder.take(0);
  std::vector<float> x(vocab, std::nanf("")), y(vocab, std::nanf(""));
  a->execute(batch, x);
  b->execute(batch, y);
  CHECK(x == y);
  CHECK(std::all_of(x.begin(), x.end(), [](float v) { return std::isfinite(v); }));
  const auto& plan = dynamic_cast<runtime::cuda_model_runner&>(*a).memory_plan();
  MESSAGE("dummy " << name_of(form) << " weights: " << plan.weight_bytes << " bytes");
}

} // namespace

TEST_CASE("FP8 weights: prefill and decode steps of 1-8 sequences, from CUDA graphs, match the CPU on the same values") {
  check_quantized_steps(fp8_stories_model(), linear_form::fp8, 71);
}

TEST_CASE("INT4 weights: prefill and decode steps of 1-8 sequences, from CUDA graphs, match the CPU on the same values") {
  const auto& rounded = int4_stories_model();
  REQUIRE_FALSE(rounded.weights.layers[0].q_proj_int4.empty());
  REQUIRE(rounded.weights.layers[0].down_proj_int4.empty()); // 172 columns: no AWQ group fits
  check_quantized_steps(rounded, linear_form::int4, 81);
}

TEST_CASE("dummy FP8 weights: made on the GPU, the same for the same seed, finite logits") {
  check_dummy_quantized(linear_form::fp8);
}

TEST_CASE("dummy INT4 weights: made on the GPU, the same for the same seed, finite logits, refused together with FP8") {
  check_dummy_quantized(linear_form::int4);
  runtime::cuda_runner_options o;
  o.dummy_weights = true;
  o.fp8_weights = o.int4_weights = true;
  CHECK_THROWS_WITH_AS(runtime::make_cuda_model_runner(stories_model().config, {}, o),
                       doctest::Contains("int4_weights"), std::invalid_argument);
}
