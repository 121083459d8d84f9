// Tensor parallelism on the GPU with its ranks sharing one device (what a one-GPU machine can
// test; NCCL refuses two ranks on one GPU, so they meet through peer loads):
// - the peer collectives against host sums: bit-equal on every rank, uneven vocab slices,
//   replayed from CUDA graphs (the staging buffer chosen on the device), abort and timeout;
// - rank runners at N = 2 and 4 against the one-rank runner over the same steps (prefill, mixed,
//   decode from CUDA graphs, sampling on the device): float32 logits within 1e-4 of the largest
//   and the same greedy tokens; bfloat16 as close to the float32 CPU truth as one rank is; a
//   GQA model with fewer kv heads than ranks, q/k/v biases and untied, unevenly split LM head;
// - a rank whose step fails fails every rank's step promptly, and the group works after reset.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cmath>
#include <functional>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "kernels/cuda/cuda_stream.hpp"
#include "kernels/cuda/device_buffer.hpp"
#include "runtime/cuda/cuda_model_runner.hpp"
#include "runtime/cuda/cuda_runner_factory.hpp"
#include "runtime/cuda/device_collective.hpp"
#include "runtime/dummy_weights.hpp"
#include "runtime/step_batch_builder.hpp"
#include "runtime/weight_shard.hpp"
#include "tests/gpu/gpu_test_support.hpp"
#include "tests/gpu/rank_group.hpp"
#include "tests/support/stories_model.hpp"

using namespace troupe;
using namespace troupe::testing;
namespace kc = troupe::kernels::cuda;
using runtime::token_id;

namespace {

// Before CUDA starts (static initialization precedes main): ranks that share this GPU need every
// kernel loaded up front and a hardware queue per stream (make_device_group refuses them otherwise).
const bool eager_loading = runtime::set_shared_device_environment();

std::vector<runtime::shard_shape> vocab_shards(int ranks, int vocab) {
  runtime::model_config cfg;
  cfg.hidden_size = 8 * ranks;
  cfg.num_attention_heads = ranks;
  cfg.num_key_value_heads = ranks;
  cfg.head_dim = 8;
  cfg.intermediate_size = 8 * ranks;
  cfg.vocab_size = vocab;
  return runtime::shard_shapes(cfg, ranks);
}

std::vector<std::unique_ptr<runtime::device_collective>> one_device_group(int ranks, int vocab,
                                                                          std::size_t stage_bytes,
                                                                          std::chrono::milliseconds timeout) {
  runtime::device_group_options o;
  o.stage_bytes = stage_bytes;
  o.timeout = timeout;
  return runtime::make_device_group(std::vector<int>(static_cast<std::size_t>(ranks), 0), vocab_shards(ranks, vocab), o);
}

// What every rank must hold after an all-reduce: the fp32 sum in rank order, rounded once.
template <class T>
std::vector<float> rank_order_sum(const std::vector<std::vector<float>>& parts) {
  std::vector<float> out(parts.front().size());
  for (std::size_t i = 0; i < out.size(); ++i) {
    float s = 0.0f;
    for (const auto& p : parts)
      s += gpu::decode(gpu::encode<T>(p[i]));
    out[i] = gpu::decode(gpu::encode<T>(s));
  }
  return out;
}

template <class T>
kc::reduce_type reduce_type_of() {
  return std::is_same_v<T, float> ? kc::reduce_type::f32
         : std::is_same_v<T, __half> ? kc::reduce_type::f16
                                     : kc::reduce_type::bf16;
}

template <class T>
void check_all_reduce(int ranks, std::size_t count, bool in_graph) {
  CAPTURE(ranks);
  CAPTURE(count);
  CAPTURE(in_graph);
  auto group = one_device_group(ranks, 64, count * sizeof(T), std::chrono::milliseconds(20000));
  constexpr int calls = 3; // odd: a graph replayed twice stages into both buffers in both orders
  std::vector<std::vector<std::vector<float>>> inputs(calls); // [call][rank][i]
  std::mt19937 rng(static_cast<unsigned>(count + ranks));
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (auto& call : inputs) {
    call.assign(static_cast<std::size_t>(ranks), std::vector<float>(count));
    for (auto& v : call)
      for (auto& x : v)
        x = dist(rng);
  }
  std::vector<std::vector<std::vector<float>>> results(calls, std::vector<std::vector<float>>(static_cast<std::size_t>(ranks)));
  std::vector<int> gave_up(static_cast<std::size_t>(ranks), 0); // checked here, where the CAPTUREs show
  on_every_rank(ranks, [&](int r) {
    kc::check(cudaSetDevice(0), "cudaSetDevice");
    kc::cuda_stream stream;
    std::vector<gpu::device_buffer<T>> data;
    for (int c = 0; c < calls; ++c)
      data.emplace_back(count);
    auto queue = [&] {
      for (int c = 0; c < calls; ++c)
        kc::check(group[static_cast<std::size_t>(r)]->all_reduce_sum(data[c].data(), count, reduce_type_of<T>(), stream),
                  "all_reduce_sum");
    };
    auto upload_inputs = [&] {
      for (int c = 0; c < calls; ++c) {
        auto enc = gpu::encode_all<T>(inputs[c][static_cast<std::size_t>(r)]);
        data[c].upload(enc);
      }
    };
    const int runs = in_graph ? 2 : 1;
    cudaGraphExec_t exec = nullptr;
    cudaGraph_t graph = nullptr;
    if (in_graph) {
      kc::check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "begin capture");
      queue();
      kc::check(cudaStreamEndCapture(stream, &graph), "end capture");
      kc::check(cudaGraphInstantiate(&exec, graph, 0), "instantiate");
    }
    for (int run = 0; run < runs; ++run) {
      upload_inputs();
      // Every rank set up before any queues a collective: an allocation or a synchronous copy may
      // wait for the whole device, which would wait for a barrier waiting for this rank.
      group[static_cast<std::size_t>(r)]->agree_min(0);
      if (in_graph)
        kc::check(cudaGraphLaunch(exec, stream), "graph launch");
      else
        queue();
      stream.synchronize();
      for (int c = 0; c < calls; ++c) {
        std::vector<T> host(count);
        data[c].download(host);
        auto& out = results[c][static_cast<std::size_t>(r)];
        out.resize(count);
        for (std::size_t i = 0; i < count; ++i)
          out[i] = gpu::decode(host[i]);
      }
      if (group[static_cast<std::size_t>(r)]->failed())
        gave_up[static_cast<std::size_t>(r)] = 1 + run;
    }
    if (in_graph) {
      cudaGraphExecDestroy(exec);
      cudaGraphDestroy(graph);
    }
  });
  for (int r = 0; r < ranks; ++r)
    CHECK_MESSAGE(gave_up[static_cast<std::size_t>(r)] == 0, "rank ", r, " gave up waiting in run ",
                  gave_up[static_cast<std::size_t>(r)] - 1);
  for (int c = 0; c < calls; ++c) {
    const auto expected = rank_order_sum<T>(inputs[c]);
    for (int r = 0; r < ranks; ++r) {
      const auto& got = results[c][static_cast<std::size_t>(r)];
      std::size_t differ = 0;
      for (std::size_t i = 0; i < count; ++i)
        differ += got[i] != expected[i] ? 1 : 0;
      CHECK_MESSAGE(differ == 0, "call ", c, " rank ", r, ": ", differ, " of ", count, " elements differ");
    }
  }
}

} // namespace

TEST_CASE("peer all-reduce on one device: the rank-order fp32 sum, bit-equal on every rank, also from CUDA graphs") {
  for (int ranks : {2, 3, 4})
    for (bool graph : {false, true}) {
      check_all_reduce<float>(ranks, 5 * 64 + 3, graph);
      check_all_reduce<__nv_bfloat16>(ranks, 12 * 5120, graph);
      check_all_reduce<__half>(ranks, 1000 * 64, graph);
    }
}

// Alone, a rank's barrier waits for nobody: every kernel of the collectives runs by itself, so
// compute-sanitizer (which serializes kernels, and would hang a barrier between ranks on one GPU)
// can check their memory accesses. scripts: tensor_parallel_gpu_test -tc='a group of one*'.
TEST_CASE("a group of one rank: the collectives are copies, eager and from CUDA graphs") {
  for (bool graph : {false, true}) {
    check_all_reduce<float>(1, 1000 + 3, graph);
    check_all_reduce<__nv_bfloat16>(1, 12 * 5120 + 1, graph);
  }
  auto group = one_device_group(1, 509, 7 * 509 * 4, std::chrono::seconds(20));
  kc::check(cudaSetDevice(0), "cudaSetDevice");
  std::vector<float> whole(7 * 509);
  for (std::size_t i = 0; i < whole.size(); ++i)
    whole[i] = static_cast<float>(i) - 7.5f;
  gpu::device_buffer<float> d_local(whole.size()), d_whole(whole.size());
  d_local.upload(whole);
  d_whole.fill_bytes(0xff);
  kc::cuda_stream stream;
  kc::check(group[0]->all_gather_vocab(d_local.data(), 7, d_whole.data(), stream), "all_gather_vocab");
  stream.synchronize();
  std::vector<float> got(whole.size());
  d_whole.download(got);
  CHECK(got == whole);
  CHECK_FALSE(group[0]->failed());
}

TEST_CASE("peer all-gather of vocab slices: uneven widths land in their columns on every rank") {
  for (int ranks : {2, 4}) {
    const int vocab = 509, rows = 7; // 509 = 127 + 127 + 127 + 128 at four ranks
    const auto shards = vocab_shards(ranks, vocab);
    auto group = one_device_group(ranks, vocab, static_cast<std::size_t>(rows) * vocab * 4, std::chrono::seconds(20));
    std::vector<float> whole(static_cast<std::size_t>(rows) * vocab);
    for (std::size_t i = 0; i < whole.size(); ++i)
      whole[i] = static_cast<float>(i) * 0.25f - 100.0f;
    std::vector<std::vector<float>> got(static_cast<std::size_t>(ranks));
    on_every_rank(ranks, [&](int r) {
      kc::check(cudaSetDevice(0), "cudaSetDevice");
      const auto& s = shards[static_cast<std::size_t>(r)];
      std::vector<float> local(static_cast<std::size_t>(rows) * s.vocab);
      for (int row = 0; row < rows; ++row)
        for (int c = 0; c < s.vocab; ++c)
          local[static_cast<std::size_t>(row) * s.vocab + c] = whole[static_cast<std::size_t>(row) * vocab + s.vocab_begin + c];
      gpu::device_buffer<float> d_local(local.size()), d_whole(whole.size());
      d_local.upload(local);
      d_whole.fill_bytes(0xff);
      kc::cuda_stream stream;
      group[static_cast<std::size_t>(r)]->agree_min(0); // every rank set up (see check_all_reduce)
      for (int repeat = 0; repeat < 3; ++repeat)
        kc::check(group[static_cast<std::size_t>(r)]->all_gather_vocab(d_local.data(), rows, d_whole.data(), stream),
                  "all_gather_vocab");
      stream.synchronize();
      got[static_cast<std::size_t>(r)].resize(whole.size());
      d_whole.download(got[static_cast<std::size_t>(r)]);
    });
    for (int r = 0; r < ranks; ++r)
      CHECK(got[static_cast<std::size_t>(r)] == whole);
  }
}

TEST_CASE("peer collectives give up on abort and after their timeout, and work again after reset") {
  auto group = one_device_group(2, 64, 4096, std::chrono::milliseconds(300));
  kc::check(cudaSetDevice(0), "cudaSetDevice");
  gpu::device_buffer<float> data(256);
  data.fill_bytes(0);
  kc::cuda_stream stream;
  // Rank 0 alone: nobody comes, the wait times out.
  const auto t0 = std::chrono::steady_clock::now();
  REQUIRE(group[0]->all_reduce_sum(data.data(), 256, kc::reduce_type::f32, stream) == cudaSuccess);
  stream.synchronize();
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(group[0]->failed());
  CHECK(waited >= 0.25);
  CHECK(waited < 10.0);
  group[0]->reset();
  CHECK_FALSE(group[0]->failed());
  CHECK_FALSE(group[1]->failed());
  // Rank 0 alone again, aborted from another thread before the timeout.
  auto long_group = one_device_group(2, 64, 4096, std::chrono::seconds(60));
  REQUIRE(long_group[0]->all_reduce_sum(data.data(), 256, kc::reduce_type::f32, stream) == cudaSuccess);
  std::thread aborter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    long_group[1]->abort_handle()();
  });
  const auto t1 = std::chrono::steady_clock::now();
  stream.synchronize();
  aborter.join();
  CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count() < 10.0);
  CHECK(long_group[0]->failed());
  CHECK(long_group[1]->failed());
  long_group[1]->reset();
  // Both ranks again: a sum that works.
  std::vector<std::vector<float>> got(2);
  on_every_rank(2, [&](int r) {
    kc::check(cudaSetDevice(0), "cudaSetDevice");
    kc::cuda_stream s;
    gpu::device_buffer<float> d(4);
    const std::vector<float> v{1.0f + r, 2.0f, 3.0f, 4.0f};
    d.upload(v);
    long_group[static_cast<std::size_t>(r)]->agree_min(0);
    kc::check(long_group[static_cast<std::size_t>(r)]->all_reduce_sum(d.data(), 4, kc::reduce_type::f32, s), "sum");
    s.synchronize();
    got[static_cast<std::size_t>(r)].resize(4);
    d.download(got[static_cast<std::size_t>(r)]);
    CHECK_FALSE(long_group[static_cast<std::size_t>(r)]->failed());
  });
  CHECK(got[0] == std::vector<float>{3.0f, 4.0f, 6.0f, 8.0f});
  CHECK(got[1] == got[0]);
}

TEST_CASE("a device group refuses devices that do not exist, naming the numbers") {
  REQUIRE(eager_loading);
  int count = 0;
  kc::check(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
  std::vector<int> devices;
  for (int d = 0; d <= count; ++d)
    devices.push_back(d);
  runtime::device_group_options o;
  o.stage_bytes = 1024;
  CHECK_THROWS_WITH_AS(runtime::make_device_group(devices, vocab_shards(static_cast<int>(devices.size()), 64), o),
                       doctest::Contains(("need device " + std::to_string(count)).c_str()), std::invalid_argument);
}

namespace {

runtime::cuda_runner_options options_for(runtime::cuda_dtype dtype, int blocks) {
  runtime::cuda_runner_options o;
  o.dtype = dtype;
  o.kv_dtype = runtime::own_cache_dtype(dtype);
  o.block_size = 16;
  o.num_blocks = blocks;
  o.max_num_batched_tokens = 256;
  o.max_num_seqs = 8;
  return o;
}

// A GQA model whose kv heads are fewer than 4 ranks, with q/k/v biases and an untied LM head
// over a vocabulary that 4 ranks split unevenly.
std::pair<runtime::model_config, runtime::model_weights> gqa_model() {
  runtime::model_config cfg;
  cfg.architecture = "Qwen2ForCausalLM";
  cfg.model_type = "qwen2";
  cfg.hidden_size = 64;
  cfg.intermediate_size = 96;
  cfg.num_hidden_layers = 3;
  cfg.num_attention_heads = 8;
  cfg.num_key_value_heads = 2;
  cfg.head_dim = 16;
  cfg.vocab_size = 509;
  cfg.max_position_embeddings = 256;
  cfg.rms_norm_eps = 1e-6f;
  cfg.tie_word_embeddings = false;
  cfg.attention_bias = true;
  auto w = runtime::dummy_weights(cfg, 7);
  std::mt19937 rng(11);
  std::normal_distribution<float> bias(0.0f, 0.1f);
  for (auto& l : w.layers)
    for (auto* b : {&l.q_bias, &l.k_bias, &l.v_bias})
      for (auto& x : *b)
        x = bias(rng);
  return {cfg, w};
}

int argmax(std::span<const float> row) {
  return static_cast<int>(std::max_element(row.begin(), row.end()) - row.begin());
}

// The same steps on a one-rank runner and on the group: a prefill of four prompts, a mixed step
// (two decode beside one new prompt), then `decodes` decode steps of every sequence (graph
// replays). Each sequence goes on with the one-rank runner's argmax. Returns the largest
// |difference| over the largest |logit| of every step, and counts rows whose argmax differs.
struct agreement {
  float worst_relative = 0.0f;
  int rows = 0, argmax_differ = 0;
};

agreement same_steps(runtime::model_runner& one, rank_group& group, int vocab, int decodes, runtime::model_runner* truth,
                     double* one_err = nullptr, double* group_err = nullptr) {
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> tok(3, vocab - 1);
  std::vector<std::vector<token_id>> ids(5);
  for (std::size_t s = 0; s < ids.size(); ++s)
    for (std::size_t i = 0; i < 6 + 3 * s; ++i)
      ids[s].push_back(tok(rng));
  const int bs = 16, blocks_per_seq = 4;
  auto pool = shuffled_pool(one.cache_config().num_blocks, 5);
  std::vector<std::vector<std::int32_t>> tables;
  for (std::size_t s = 0; s < ids.size(); ++s)
    tables.push_back(scattered_blocks(blocks_per_seq * bs, bs, pool));
  std::vector<int> cached(ids.size(), 0);
  agreement a;
  double one_sq = 0, group_sq = 0, ref_sq = 0;
  for (int step = 0; step < decodes + 2; ++step) {
    runtime::step_batch_builder builder(bs, blocks_per_seq);
    std::vector<std::size_t> members;
    for (std::size_t s = 0; s < ids.size(); ++s) {
      if (step == 0 && s >= 4)
        continue; // the fifth prompt arrives in the mixed step
      const int len = static_cast<int>(ids[s].size()) - cached[s];
      builder.add(std::span(ids[s]).subspan(static_cast<std::size_t>(cached[s]), static_cast<std::size_t>(len)),
                  cached[s], tables[s], 1);
      members.push_back(s);
    }
    const auto batch = builder.take(static_cast<std::uint64_t>(step));
    const std::size_t n = batch.logits_rows.size() * static_cast<std::size_t>(vocab);
    std::vector<float> ref(n), got(n, std::nanf("")), exact(n);
    one.execute(batch, ref);
    group.execute(batch, got);
    if (truth != nullptr)
      truth->execute(batch, exact);
    float largest = 0.0f, diff = 0.0f;
    for (std::size_t i = 0; i < n; ++i) {
      largest = std::max(largest, std::abs(ref[i]));
      diff = std::max(diff, std::isnan(got[i]) ? INFINITY : std::abs(got[i] - ref[i]));
      if (truth != nullptr) {
        one_sq += static_cast<double>(ref[i] - exact[i]) * (ref[i] - exact[i]);
        group_sq += static_cast<double>(got[i] - exact[i]) * (got[i] - exact[i]);
        ref_sq += static_cast<double>(exact[i]) * exact[i];
      }
    }
    a.worst_relative = std::max(a.worst_relative, diff / largest);
    for (std::size_t i = 0; i < members.size(); ++i) {
      const auto row_ref = std::span<const float>(ref).subspan(i * static_cast<std::size_t>(vocab), static_cast<std::size_t>(vocab));
      const auto row_got = std::span<const float>(got).subspan(i * static_cast<std::size_t>(vocab), static_cast<std::size_t>(vocab));
      ++a.rows;
      a.argmax_differ += argmax(row_ref) != argmax(row_got) ? 1 : 0;
      const std::size_t s = members[i];
      cached[s] = static_cast<int>(ids[s].size());
      ids[s].push_back(argmax(row_ref));
    }
  }
  if (one_err != nullptr)
    *one_err = std::sqrt(one_sq / ref_sq);
  if (group_err != nullptr)
    *group_err = std::sqrt(group_sq / ref_sq);
  return a;
}

} // namespace

TEST_CASE("float32 rank runners on one device at N = 2 and 4: logits within 1e-4 of one rank, the same greedy tokens") {
  const auto& m = stories_model();
  const auto o = options_for(runtime::cuda_dtype::float32, 48);
  auto one = runtime::make_cuda_model_runner(m.config, m.weights, o);
  for (int ranks : {2, 4}) {
    CAPTURE(ranks);
    auto group = make_ranks(m.config, m.weights, o, ranks);
    const auto a = same_steps(*one, group, m.config.vocab_size, 10, nullptr);
    MESSAGE("stories260k float32 N=", ranks, ": worst |diff| / max|logit| ", a.worst_relative, ", argmax differs in ",
            a.argmax_differ, " of ", a.rows, " rows; graph replays ", group.rank(0).graph_replays());
    CHECK(a.worst_relative <= 1e-4f);
    CHECK(a.argmax_differ == 0);
    CHECK(group.rank(0).graph_replays() > 0);
    CHECK(group.rank(ranks - 1).graph_replays() == group.rank(0).graph_replays());
    CHECK(group.rank(0).graph_error().empty());
    // Every rank's pool holds its kv heads of the same blocks.
    CHECK(group.rank(1).cache_config().num_blocks == o.num_blocks);
    CHECK(group.rank(1).block_bytes() * static_cast<std::size_t>(ranks) == one->block_bytes());
  }
  auto [cfg, weights] = gqa_model();
  auto one_gqa = runtime::make_cuda_model_runner(cfg, weights, o);
  for (int ranks : {2, 4}) {
    CAPTURE(ranks);
    auto group = make_ranks(cfg, weights, o, ranks);
    CHECK(group.rank(ranks - 1).shard().kv_heads == 1);
    const auto a = same_steps(*one_gqa, group, cfg.vocab_size, 6, nullptr);
    MESSAGE("GQA (2 kv heads, biases, vocab 509) float32 N=", ranks, ": worst relative ", a.worst_relative,
            ", argmax differs in ", a.argmax_differ, " of ", a.rows);
    CHECK(a.worst_relative <= 1e-4f);
    CHECK(a.argmax_differ == 0);
  }
}

TEST_CASE("bfloat16 rank runners: as close to the float32 CPU truth as one rank is") {
  const auto& m = stories_model();
  const auto o = options_for(runtime::cuda_dtype::bfloat16, 48);
  auto one = runtime::make_cuda_model_runner(m.config, m.weights, o);
  auto cpu = make_runner(16, 48);
  for (int ranks : {2, 4}) {
    CAPTURE(ranks);
    auto group = make_ranks(m.config, m.weights, o, ranks);
    double one_err = 0, group_err = 0;
    const auto a = same_steps(*one, group, m.config.vocab_size, 8, cpu.get(), &one_err, &group_err);
    MESSAGE("stories260k bfloat16 N=", ranks, ": relative L2 to the CPU: one rank ", one_err, ", group ", group_err,
            "; argmax differs from one rank in ", a.argmax_differ, " of ", a.rows);
    CHECK(group_err <= 1.5 * one_err + 1e-3);
  }
}

TEST_CASE("rank runners sample on the device: the leader draws the tokens one rank draws") {
  const auto& m = stories_model();
  auto o = options_for(runtime::cuda_dtype::float32, 48);
  auto one = runtime::make_cuda_model_runner(m.config, m.weights, o);
  auto group = make_ranks(m.config, m.weights, o, 2);
  runtime::step_batch_builder builder(16, 4);
  auto pool = shuffled_pool(48, 9);
  const std::vector<token_id> prompt{1, 40, 50, 60, 70, 80};
  std::vector<std::vector<std::int32_t>> tables;
  for (int s = 0; s < 3; ++s) {
    tables.push_back(scattered_blocks(64, 16, pool));
    builder.add(prompt, 0, tables.back(), 1);
  }
  const auto batch = builder.take(0);
  std::vector<runtime::device_sample> rows(3);
  for (int s = 0; s < 3; ++s) {
    rows[static_cast<std::size_t>(s)].temperature = 0.8f;
    rows[static_cast<std::size_t>(s)].top_p = 0.9f;
    rows[static_cast<std::size_t>(s)].u = 0.17 + 0.3 * s;
  }
  std::vector<token_id> from_one(3), from_group(3);
  one->execute_sampled(batch, rows, from_one, {});
  group.execute_sampled(batch, rows, from_group);
  CHECK(from_group == from_one);
}

TEST_CASE("a rank whose step fails fails every rank's step at once, and the group serves after reset") {
  const auto& m = stories_model();
  const auto o = options_for(runtime::cuda_dtype::float32, 48);
  auto group = make_ranks(m.config, m.weights, o, 2);
  runtime::step_batch_builder builder(16, 4);
  auto pool = shuffled_pool(48, 2);
  const auto table = scattered_blocks(64, 16, pool);
  const std::vector<token_id> prompt{1, 30, 31, 32};
  builder.add(prompt, 0, table, 1);
  const auto good = builder.take(0);
  auto bad = good;
  bad.block_tables[0] = 1000; // outside the pool: the runner refuses the step before launching anything
  std::vector<float> logits(static_cast<std::size_t>(m.config.vocab_size));
  std::exception_ptr leader_error, follower_error;
  const auto t0 = std::chrono::steady_clock::now();
  std::thread follower([&] {
    try {
      group.ranks[1]->follow_step(bad);
    } catch (...) {
      follower_error = std::current_exception();
    }
  });
  try {
    group.ranks[0]->execute(good, logits); // the leader's own batch is fine: it waits for rank 1
  } catch (...) {
    leader_error = std::current_exception();
  }
  follower.join();
  CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < 10.0);
  REQUIRE(follower_error);
  REQUIRE(leader_error);
  CHECK_THROWS_AS(std::rethrow_exception(follower_error), std::logic_error);
  CHECK_THROWS_WITH_AS(std::rethrow_exception(leader_error), doctest::Contains("gave up"),
                       runtime::device_collective_failed);
  group.rank(0).group()->reset();
  std::vector<float> again(logits.size());
  group.execute(good, again);
  auto one = runtime::make_cuda_model_runner(m.config, m.weights, o);
  std::vector<float> expected(logits.size());
  one->execute(good, expected);
  CHECK(max_abs_diff(again, expected) <= 1e-4f * *std::max_element(expected.begin(), expected.end()));
}

TEST_CASE("two GPUs: NCCL and peer loads give every rank the same sums and the same gathered logits") {
  int count = 0;
  kc::check(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
  if (count < 2) {
    MESSAGE("not run: this machine has ", count, " GPU (NCCL needs two ranks on distinct devices)");
    return;
  }
  const int ranks = 2, vocab = 509, rows = 6;
  const std::size_t n = 12 * 5120;
  const auto shards = vocab_shards(ranks, vocab);
  runtime::device_group_options by_peer, by_nccl;
  by_peer.stage_bytes = by_nccl.stage_bytes = std::max<std::size_t>(n * 2, static_cast<std::size_t>(rows) * vocab * 4);
  by_peer.peer_max_bytes = by_peer.stage_bytes; // every call by peer loads
  by_nccl.peer_max_bytes = 0;                   // every call through NCCL
  std::vector<std::vector<float>> inputs(ranks, std::vector<float>(n));
  std::mt19937 rng(1);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (auto& v : inputs)
    for (auto& x : v)
      x = dist(rng);
  std::vector<std::vector<float>> logits_whole(1, std::vector<float>(static_cast<std::size_t>(rows) * vocab));
  for (std::size_t i = 0; i < logits_whole[0].size(); ++i)
    logits_whole[0][i] = static_cast<float>(i % 977) - 300.0f;
  std::vector<std::vector<std::vector<float>>> sums(2), gathered(2); // [path][rank]
  for (int path = 0; path < 2; ++path) {
    auto group = runtime::make_device_group({0, 1}, shards, path == 0 ? by_peer : by_nccl);
    sums[path].resize(ranks);
    gathered[path].resize(ranks);
    on_every_rank(ranks, [&](int r) {
      kc::check(cudaSetDevice(r), "cudaSetDevice");
      kc::cuda_stream stream;
      gpu::device_buffer<__nv_bfloat16> d(n);
      d.upload(gpu::encode_all<__nv_bfloat16>(inputs[static_cast<std::size_t>(r)]));
      kc::check(group[static_cast<std::size_t>(r)]->all_reduce_sum(d.data(), n, kc::reduce_type::bf16, stream), "sum");
      const auto& s = shards[static_cast<std::size_t>(r)];
      std::vector<float> local(static_cast<std::size_t>(rows) * s.vocab);
      for (int row = 0; row < rows; ++row)
        for (int c = 0; c < s.vocab; ++c)
          local[static_cast<std::size_t>(row) * s.vocab + c] =
              logits_whole[0][static_cast<std::size_t>(row) * vocab + s.vocab_begin + c];
      gpu::device_buffer<float> d_local(local.size()), d_whole(logits_whole[0].size());
      d_local.upload(local);
      group[static_cast<std::size_t>(r)]->agree_min(0);
      kc::check(group[static_cast<std::size_t>(r)]->all_gather_vocab(d_local.data(), rows, d_whole.data(), stream),
                "gather");
      stream.synchronize();
      CHECK_FALSE(group[static_cast<std::size_t>(r)]->failed());
      std::vector<__nv_bfloat16> host(n);
      d.download(host);
      for (const auto& x : host)
        sums[path][static_cast<std::size_t>(r)].push_back(gpu::decode(x));
      gathered[path][static_cast<std::size_t>(r)].resize(logits_whole[0].size());
      d_whole.download(gathered[path][static_cast<std::size_t>(r)]);
    });
  }
  const auto expected = rank_order_sum<__nv_bfloat16>(inputs);
  for (int r = 0; r < ranks; ++r) {
    CHECK(sums[0][static_cast<std::size_t>(r)] == expected); // peer loads: the rank-order sum
    // NCCL sums two bf16 terms in its own order: the same as rank order for two ranks.
    CHECK(sums[1][static_cast<std::size_t>(r)] == sums[0][static_cast<std::size_t>(r)]);
    CHECK(gathered[0][static_cast<std::size_t>(r)] == logits_whole[0]);
    CHECK(gathered[1][static_cast<std::size_t>(r)] == logits_whole[0]);
  }
}
