// Whole-model steps of the CUDA runner at real shapes with dummy bf16 weights
// (model.load-format=dummy: models/llama2-13b-shape, models/llama3-8b-shape hold only
// a config.json): prefill of one 1k / 4k-token sequence and decode steps at batch 1 and
// 12 over 1.5k-token contexts, over a bf16 and an fp8 KV cache; the 13B steps again with fp16 weights,
// activations and cache (model.dtype=float16). Each case: median host time of runner.execute() (which
// ends with a stream synchronize and the logits copy) after a warm-up, against the
// floor of the work (FLOPs over 794 TFLOP/s for prefill, bytes over 4.28 TB/s for
// decode) and the goal figures of the issue. Beside each model, the
// same step's GEMMs alone through cuBLASLt (and at batch 1-4 through troupe's GEMV), to
// show how much of a step they are.
// Decode steps are timed kernel by kernel and replaying CUDA graphs, on one runner.
// Prints a markdown table (also to --out FILE). Options: --models DIR (default
// models), --reps N (default 10 for prefill, 30 for decode, at least 10), --decode-only (the
// 13B decode rows alone, ~8 s: for A/B runs of a decode change), --sampling-only (13B and 8B decode
// at batch 1 and 12 with every sampling row: host, GPU, and GPU with penalties or logprobs, and with
// structured-output masks made on the host before the step or while it runs, over the first ids
// of --mask-tokenizer DIR's tokens, default tests/data/gpt2; --batches LIST for other batch sizes, up to 64),
// --deterministic-only (13B and 8B prefill 1 x 1000 and decode at batch 1 and 12, without and with
// engine.deterministic: what batch invariance costs).
// Peers: --peers FILE (JSON lines of bench/peers/peers.py: transformers eager and torch.compile at
// these shapes, measured on the same machine) adds a table of their times beside troupe's bf16 rows;
// with --report FILE (this program's earlier --out), that table alone, from the report, no device needed.
// --moe-only: the mixture-of-experts shapes (models/mixtral-8x7b-shape, models/qwen3-30b-a3b-shape): prefill
// of 1,000 tokens, decode at batch 1 and 16, the decode floor over the experts the batch reads.
// --quantized-only (or --fp8-only): FP8 weights (cuda_runner_options::fp8_weights) and INT4 weights
// (int4_weights, AWQ's form, groups of 128) against bf16 on the 13B shape: prefill of 1k and 4k
// tokens, decode at batch 1, 8 and 12; then the 70B shape (models/llama2-70b-shape) in FP8 and in
// INT4 with an fp8 KV cache at batch 1 and 16, where it fits.
// --profile-decode SHAPE BATCH bf16|fp8|fp16|fp8w|int4w: no table; one decode step of that shape
// folder's model (CUDA graph, ctx 1500) replayed 3 times between cudaProfilerStart and
// cudaProfilerStop, for `ncu --profile-from-start off` to time its kernels one by one.
// --profile-prefill SHAPE TOKENS [fp16]: likewise, one prefill of TOKENS tokens run twice.
#include <cuda_bf16.h>
#include <cuda_profiler_api.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <numeric>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <boost/json.hpp>

#include "bench/order_schema.hpp"
#include "kernels/cuda/cublaslt_gemm.hpp"
#include "kernels/cuda/cuda_stream.hpp"
#include "kernels/cuda/device_buffer.hpp"
#include "kernels/cuda/gemv.hpp"
#include "kernels/cuda/random_fill.hpp"
#include "runtime/cuda/cuda_model_runner.hpp"
#include "runtime/cuda/cuda_runner_factory.hpp"
#include "runtime/model_config.hpp"
#include "runtime/sampler.hpp"
#include "runtime/spec_verifier.hpp"
#include "runtime/step_batch_builder.hpp"
#include "runtime/structured/constraint_cache.hpp"
#include "runtime/structured/sequence_constraint.hpp"
#include "runtime/tokenizer.hpp"

namespace {

namespace rt = troupe::runtime;
namespace rs = troupe::runtime::structured;
namespace kcu = troupe::kernels::cuda;

constexpr double peak_flops = 794e12;  // dense bf16 GEMM ceiling of the issue (H200)
constexpr double peak_bytes = 4.28e12; // HBM copy ceiling of the issue (H200)
constexpr int block_size = 16;
constexpr int decode_context = 1500; // tokens already cached before the timed decode token

struct settings {
  std::filesystem::path models = "models";
  int prefill_reps = 10, decode_reps = 30;
  bool decode_only = false;   // --decode-only: the decode rows alone (A/B runs of decode changes)
  bool sampling_only = false; // --sampling-only: 13B and 8B decode at batch 1 and 12 with their sampling rows
  bool deterministic_only = false; // --deterministic-only: 13B and 8B prefill and decode, engine.deterministic off / on
  bool quantized_only = false;     // --quantized-only: FP8 and INT4 weights against bf16 (13B), 70B in both
  bool moe_only = false;           // --moe-only: the mixture-of-experts shapes (Mixtral-8x7B, Qwen3-30B-A3B)
  std::string peers;          // --peers FILE: peers.py's JSON lines
  std::string report;         // --report FILE: with --peers, the peers table from this earlier report
  std::filesystem::path mask_tokenizer = "tests/data/gpt2"; // --mask-tokenizer DIR: the masks' vocabulary
  std::vector<int> sampling_batches{1, 12};                 // --batches LIST: --sampling-only's batch sizes
};

// One line of the table.
struct result {
  std::string name;
  double ms = 0;       // median
  double floor_ms = 0; // the work over the ceiling
  std::string rate;    // achieved TFLOP/s or TB/s
  std::string goal;
  double goal_ms = 0; // 0: no goal
};

// Row names, which the peers table also looks troupe's times up by.
std::string prefill_name(const std::string& label, int tokens) {
  return label + " prefill 1 x " + std::to_string(tokens);
}
std::string decode_name(const std::string& label, int batch, int context, const std::string& how) {
  return label + " decode batch " + std::to_string(batch) + ", ctx " + std::to_string(context) + how;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 == 1 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

// Median milliseconds of fn() over reps calls after `warm` untimed ones.
double time_ms(const std::function<void()>& fn, int warm, int reps) {
  for (int i = 0; i < warm; ++i)
    fn();
  std::vector<double> ms;
  for (int r = 0; r < reps; ++r) {
    const auto start = std::chrono::steady_clock::now();
    fn();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  }
  return median(ms);
}

// Parameters of the linear layers one token goes through (the embedding is a gather;
// the LM head is counted only for the rows that get logits). A mixture-of-experts layer counts its
// router, its shared expert and `experts` of its experts (-1: a token's own, experts_per_token).
double layer_params(const rt::model_config& c, double experts = -1) {
  const double h = c.hidden_size, q = double(c.num_attention_heads) * c.head_dim,
               kv = double(c.num_key_value_heads) * c.head_dim, i = c.intermediate_size;
  double mlp = 2 * h * i + i * h;
  if (c.moe) {
    const double used = experts < 0 ? c.moe->experts_per_token : experts;
    mlp += used * 3 * h * c.moe->expert_intermediate_size + h * c.moe->num_experts;
  }
  return c.num_hidden_layers * (h * (q + 2 * kv) + q * h + mlp);
}

// Distinct experts a MoE layer reads for `tokens` tokens whose top-k fall uniformly at random (the
// dummy router's random scores): E (1 - (1 - k / E)^tokens) on average; k at one token.
double experts_read(const rt::model_config& c, int tokens) {
  if (!c.moe)
    return 0;
  const double e = c.moe->num_experts, k = c.moe->experts_per_token;
  return e * (1.0 - std::pow(1.0 - k / e, tokens));
}

// Prefill of `tokens` in one step with logits for the last row: the GEMMs, plus causal
// attention (QKᵀ and PV over the lower triangle: 2 * 2 * layers * heads * hd * tokens² / 2).
double prefill_flops(const rt::model_config& c, int tokens) {
  const double t = tokens;
  return 2.0 * layer_params(c) * t + 2.0 * c.vocab_size * c.hidden_size +
         2.0 * 2.0 * c.num_hidden_layers * c.num_attention_heads * c.head_dim * (t * t / 2.0);
}

// A decode step of `batch` sequences with `context` cached tokens each: every weight but
// the embedding table once (the layers' at linear_bytes each, 1 for FP8 weights; the LM head bf16),
// plus the K and V of every context token (kv_bytes each).
// How a benchmarked model keeps its linear layers: bf16/fp16, FP8 codes (a scale a row), or INT4
// codes (an 8-byte {scale, zero} a group of 128).
enum class weight_form { dense, fp8, int4 };
double linear_bytes(weight_form f) { return f == weight_form::fp8 ? 1.0 : f == weight_form::int4 ? 0.5 + 8.0 / 128 : 2.0; }

double decode_bytes(const rt::model_config& c, int batch, int context, double kv_bytes, double linear_bytes = 2.0) {
  const double weights =
      linear_bytes * layer_params(c, c.moe ? experts_read(c, batch) : -1) + 2.0 * double(c.vocab_size) * c.hidden_size;
  const double kv_per_token = 2.0 * kv_bytes * c.num_hidden_layers * c.num_key_value_heads * c.head_dim;
  return weights + batch * (context + 1.0) * kv_per_token;
}

std::string fixed(double v, int digits) {
  char s[64];
  std::snprintf(s, sizeof s, "%.*f", digits, v);
  return s;
}

// The runner over a shape-only model folder, with dummy bf16 (or fp16) weights and a KV cache of that type
// (or fp8).
struct model_under_test {
  std::string label;
  rt::model_config config;
  std::unique_ptr<rt::model_runner> runner;
  rt::cuda_memory_plan plan;
  double build_s = 0;
  int max_blocks_per_seq = 0;
  double kv_bytes = 2; // per cached element
  bool fp16 = false;   // model.dtype=float16 (else bfloat16)
  weight_form form = weight_form::dense; // the linear layers' form

  model_under_test(const std::filesystem::path& dir, std::string name, int max_tokens, int num_blocks,
                   rt::kv_cache_dtype kv = rt::kv_cache_dtype::bfloat16,
                   rt::cuda_dtype dtype = rt::cuda_dtype::bfloat16, bool deterministic = false,
                   weight_form linear_form = weight_form::dense, int layers = 0)
      : label(std::move(name)), config(rt::load_model_config(dir)), form(linear_form) {
    if (layers > 0) // fewer layers of the shape: a model too big for the device, timed per layer
      config.num_hidden_layers = layers;
    rt::cuda_runner_options o;
    o.fp8_weights = form == weight_form::fp8;
    o.int4_weights = form == weight_form::int4;
    o.deterministic = deterministic;
    o.dtype = dtype;
    fp16 = dtype == rt::cuda_dtype::float16;
    o.kv_dtype = kv;
    kv_bytes = kv == rt::kv_cache_dtype::fp8_e4m3 ? 1 : 2;
    o.block_size = block_size;
    o.num_blocks = num_blocks;
    o.max_num_batched_tokens = max_tokens;
    o.max_num_seqs = 64;
    max_blocks_per_seq = (config.max_position_embeddings + block_size - 1) / block_size;
    o.max_blocks_per_seq = max_blocks_per_seq;
    o.dummy_weights = true;
    o.dummy_seed = 1;
    o.cuda_graphs = true; // paused per case with use_cuda_graphs(false)
    const auto start = std::chrono::steady_clock::now();
    runner = rt::make_cuda_model_runner(config, rt::model_weights{}, o, &plan);
    build_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }

  std::vector<rt::token_id> random_tokens(int n, unsigned seed) const {
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int> id(0, config.vocab_size - 1);
    std::vector<rt::token_id> out(n);
    for (auto& t : out)
      t = id(rng);
    return out;
  }
  // Blocks first .. first + n - 1: contiguous is as good as scattered for the kernels (one
  // indirection per block either way).
  static std::vector<std::int32_t> table(int first, int n) {
    std::vector<std::int32_t> t(n);
    std::iota(t.begin(), t.end(), first);
    return t;
  }
  rt::cuda_model_runner& cuda() { return dynamic_cast<rt::cuda_model_runner&>(*runner); }
  void run(const rt::step_batch& batch, std::vector<float>& logits) {
    logits.resize(batch.logits_rows.size() * static_cast<std::size_t>(config.vocab_size));
    runner->execute(batch, logits);
  }
};

// One sequence's prefill of `tokens` random tokens from position 0, logits for the last.
rt::step_batch prefill_step(const model_under_test& m, int tokens) {
  const int blocks = (tokens + block_size - 1) / block_size;
  rt::step_batch_builder b(block_size, blocks); // table width: the step's longest table, as the scheduler sends
  b.add(m.random_tokens(tokens, 7), 0, model_under_test::table(0, blocks), 1);
  return b.take(0);
}

result bench_prefill(model_under_test& m, int tokens, const settings& s, const char* goal, double goal_ms) {
  const rt::step_batch batch = prefill_step(m, tokens);
  std::vector<float> logits;
  const double ms = time_ms([&] { m.run(batch, logits); }, 2, s.prefill_reps);
  const double flops = prefill_flops(m.config, tokens);
  return {prefill_name(m.label, tokens),
          ms,
          1e3 * flops / peak_flops,
          fixed(flops / (ms * 1e-3) / 1e12, 0) + " TFLOP/s",
          goal,
          goal_ms};
}

// Prompt scoring (prompt_logprobs 1, or echo with logprobs): a `tokens`-token prefill whose every
// row scores the next prompt token. Before, such a step copied every row's logits to the host
// (runtime::compute_logprobs per row); now the rows are scored on the GPU and only n + 1 values
// per row come back.
std::vector<result> bench_prompt_scoring(model_under_test& m, int tokens, const settings& s) {
  const int blocks = (tokens + block_size - 1) / block_size;
  rt::step_batch_builder b(block_size, blocks);
  const auto prompt = m.random_tokens(tokens, 7);
  b.add(prompt, 0, model_under_test::table(0, blocks), tokens);
  const rt::step_batch step = b.take(0);
  std::vector<rt::device_sample> rows;
  for (int i = 0; i + 1 < tokens; ++i)
    rows.push_back(rt::make_device_score(prompt[static_cast<std::size_t>(i) + 1], 1));
  rt::sampling_params greedy;
  greedy.temperature = 0.0f;
  greedy.logprobs = 1;
  rows.push_back(rt::make_device_sample(greedy, 1, 0)); // the last row samples the first output token
  const auto vocab = static_cast<std::size_t>(m.config.vocab_size);
  std::vector<float> logits;
  std::vector<rt::token_logprobs> scored(rows.size());
  std::vector<rt::token_id> out(rows.size());
  const double host_ms = time_ms(
      [&] {
        m.run(step, logits);
        for (int i = 0; i + 1 < tokens; ++i)
          scored[static_cast<std::size_t>(i)] =
              rt::compute_logprobs(std::span<const float>(logits).subspan(static_cast<std::size_t>(i) * vocab, vocab),
                                   prompt[static_cast<std::size_t>(i) + 1], 1);
      },
      1, std::max(2, s.prefill_reps / 2));
  const double device_ms =
      time_ms([&] { m.runner->execute_sampled(step, rows, out, scored); }, 1, std::max(2, s.prefill_reps / 2));
  const double flops = prefill_flops(m.config, tokens);
  std::vector<result> results;
  for (auto [how, ms] : {std::pair{"logits to the host", host_ms}, std::pair{"scored on the GPU", device_ms}})
    results.push_back({prefill_name(m.label, tokens) + ", prompt_logprobs 1 on every row, " + how, ms,
                       1e3 * flops / peak_flops, fixed(flops / (ms * 1e-3) / 1e12, 0) + " TFLOP/s", "", 0});
  return results;
}

// `batch` sequences, each prefilled with decode_context tokens (untimed); returns the
// decode step: one new token per sequence at position decode_context. Every repetition
// writes the same slot again, so the context stays decode_context tokens.
rt::step_batch prepare_decode(model_under_test& m, int batch) {
  const int blocks = (decode_context + 1 + block_size - 1) / block_size;
  std::vector<float> logits;
  for (int q = 0; q < batch; ++q) {
    rt::step_batch_builder b(block_size, blocks);
    b.add(m.random_tokens(decode_context, 100 + q), 0, model_under_test::table(q * blocks, blocks), 1);
    m.run(b.take(q), logits);
  }
  rt::step_batch_builder b(block_size, blocks);
  const auto next = m.random_tokens(batch, 99);
  for (int q = 0; q < batch; ++q)
    b.add(std::span(next).subspan(q, 1), decode_context, model_under_test::table(q * blocks, blocks), 1);
  return b.take(1000);
}

// The timed decode step of prepare_decode. Two rows: kernel by kernel, and replaying the
// CUDA graph of the batch size (captured in the warm-up); with `sampling`, two more: the graph
// step with its logits sampled on the host and on the GPU.
std::vector<result> bench_decode(model_under_test& m, int batch, const settings& s, const char* goal, double goal_ms,
                                 bool sampling = true) {
  const rt::step_batch step = prepare_decode(m, batch);
  std::vector<float> logits;
  const double bytes = decode_bytes(m.config, batch, decode_context, m.kv_bytes, linear_bytes(m.form));
  std::vector<result> out;
  for (bool graphs : {false, true}) {
    m.cuda().use_cuda_graphs(graphs);
    const auto replays = m.cuda().graph_replays();
    const double ms = time_ms([&] { m.run(step, logits); }, 5, s.decode_reps);
    std::string how = graphs ? ", CUDA graph" : ", kernel by kernel";
    if (graphs && m.cuda().graph_replays() - replays < static_cast<std::uint64_t>(s.decode_reps))
      how +=
          " (NOT replayed: " + (m.cuda().graph_error().empty() ? std::string("not eligible") : m.cuda().graph_error()) +
          ")";
    out.push_back({decode_name(m.label, batch, decode_context, how), ms, 1e3 * bytes / peak_bytes,
                   fixed(bytes / (ms * 1e-3) / 1e12, 2) + " TB/s", goal, goal_ms});
  }
  if (!sampling)
    return out;
  // What the executor waits for per step, sampling included (temperature 0.8, top-p 0.9):
  // the logits copied to the host sampler, against sampling on the GPU.
  rt::sampling_params nucleus;
  nucleus.temperature = 0.8f;
  nucleus.top_p = 0.9f;
  rt::sampler host_sampler;
  const auto vocab = static_cast<std::size_t>(m.config.vocab_size);
  std::vector<rt::device_sample> rows(batch, rt::make_device_sample(nucleus, 1, 1));
  std::vector<rt::token_id> tokens(batch);
  const double host_ms = time_ms(
      [&] {
        m.run(step, logits);
        for (int q = 0; q < batch; ++q)
          tokens[q] = host_sampler.sample(std::span<float>(logits).subspan(q * vocab, vocab), nucleus, {}, {}, 1, 1);
      },
      5, s.decode_reps);
  const double device_ms = time_ms([&] { m.runner->execute_sampled(step, rows, tokens, {}); }, 5, s.decode_reps);
  for (auto [how, ms] : {std::pair{"logits to the host sampler", host_ms}, std::pair{"sampled on the GPU", device_ms}})
    out.push_back({decode_name(m.label, batch, decode_context, std::string(", CUDA graph, top-p 0.9, ") + how), ms,
                   1e3 * bytes / peak_bytes, fixed(bytes / (ms * 1e-3) / 1e12, 2) + " TB/s", goal, goal_ms});
  // The parameters that used to send a step to the host sampler, sampled on the GPU: each
  // sequence's history is its 1,500 cached tokens plus the new one, the last 64 of them output.
  std::vector<std::vector<rt::token_id>> histories;
  for (int q = 0; q < batch; ++q) {
    histories.push_back(m.random_tokens(decode_context, 100 + q));
    histories.back().push_back(m.random_tokens(batch, 99)[static_cast<std::size_t>(q)]);
  }
  const int prompt_len = decode_context + 1 - 64;
  auto variant = [&](const char* how, auto change) {
    std::vector<rt::device_sample> varied;
    std::vector<rt::logit_rules> rules(static_cast<std::size_t>(batch)); // the rows' edits point into these
    for (int q = 0; q < batch; ++q) {
      rt::sampling_params p = nucleus;
      change(p, q);
      rules[static_cast<std::size_t>(q)] = rt::logit_rules_for(p, {});
      varied.push_back(rt::make_device_sample(p, 1, 1, histories[static_cast<std::size_t>(q)], prompt_len,
                                              rules[static_cast<std::size_t>(q)].at(1)));
    }
    std::vector<rt::token_logprobs> logprobs(batch);
    const double ms = time_ms([&] { m.runner->execute_sampled(step, varied, tokens, logprobs); }, 5, s.decode_reps);
    out.push_back({decode_name(m.label, batch, decode_context, std::string(", CUDA graph, top-p 0.9, GPU, ") + how), ms,
                   1e3 * bytes / peak_bytes, fixed(bytes / (ms * 1e-3) / 1e12, 2) + " TB/s", "", 0});
  };
  variant("frequency + presence on one row", [](rt::sampling_params& p, int q) {
    if (q == 0) {
      p.frequency_penalty = 0.5f;
      p.presence_penalty = 0.5f;
    }
  });
  variant("repetition on every row", [](rt::sampling_params& p, int) { p.repetition_penalty = 1.2f; });
  variant("logprobs top-5 on every row", [](rt::sampling_params& p, int) { p.logprobs = 5; });
  // A verification step: k = 3 drafts per sequence (4 query tokens, 4 logits rows each), greedy
  // acceptance, as an n-gram or greedy draft sends it: its rows sampled on the GPU and the drafts
  // accepted on the host from the draws (runtime::accept_target_draws), against every row's logits
  // copied to the host verifier (where such steps went before).
  {
    constexpr int k = 3;
    const int blocks = (decode_context + 1 + block_size - 1) / block_size;
    if (blocks * block_size >= decode_context + k + 1) {
      rt::step_batch_builder b(block_size, blocks);
      std::vector<std::vector<rt::token_id>> drafts;
      for (int q = 0; q < batch; ++q) {
        auto query = m.random_tokens(k + 1, 200 + q);
        drafts.emplace_back(query.begin() + 1, query.end());
        b.add(query, decode_context, model_under_test::table(q * blocks, blocks), k + 1);
      }
      const rt::step_batch verify = b.take(2000);
      rt::sampling_params greedy;
      greedy.temperature = 0.0f;
      const rt::sampler_settings settings = greedy;
      std::vector<rt::device_sample> verify_rows(static_cast<std::size_t>(batch) * (k + 1),
                                                 rt::make_device_sample(greedy, 1, 1));
      std::vector<rt::token_id> draws(verify_rows.size()), emitted(k + 1);
      const std::vector<rt::token_id> history(16, 1);
      rt::spec_verifier verifier;
      const double host_verify_ms = time_ms(
          [&] {
            m.run(verify, logits);
            for (int q = 0; q < batch; ++q) {
              auto rows =
                  std::span<float>(logits).subspan(static_cast<std::size_t>(q) * (k + 1) * vocab, (k + 1) * vocab);
              verifier.verify(
                  {&settings, 1, 1, history, 8, drafts[static_cast<std::size_t>(q)], {}, rows, static_cast<int>(vocab)},
                  emitted);
            }
          },
          5, s.decode_reps);
      const double device_verify_ms = time_ms(
          [&] {
            m.runner->execute_sampled(verify, verify_rows, draws, {});
            for (int q = 0; q < batch; ++q)
              rt::accept_target_draws(
                  drafts[static_cast<std::size_t>(q)],
                  std::span<const rt::token_id>(draws).subspan(static_cast<std::size_t>(q) * (k + 1), k + 1), emitted);
          },
          5, s.decode_reps);
      for (auto [how, ms] : {std::pair{"verify 3 drafts (greedy), logits to the host verifier", host_verify_ms},
                             std::pair{"verify 3 drafts (greedy), sampled on the GPU", device_verify_ms}})
        out.push_back({decode_name(m.label, batch, decode_context, std::string(", ") + how), ms,
                       1e3 * bytes / peak_bytes, fixed(bytes / (ms * 1e-3) / 1e12, 2) + " TB/s", "", 0});
    }
  }
  // OpenAI's limit: 300 entries per row.
  variant("logit_bias (300 ids) on every row", [](rt::sampling_params& p, int q) {
    for (int i = 0; i < 300; ++i)
      p.logit_bias.push_back({(q * 7919 + i * 101) % 32000, i % 2 ? 5.0f : -5.0f});
  });
  // Structured output: a constrained row bans every token its grammar refuses there
  // (runtime::structured), in a structural state nearly the whole vocabulary; its bans ride the
  // row's edits into the penalty kernel. The device's cost of that per step (the host's mask is
  // bench_structured_mask's).
  {
    std::vector<std::vector<rt::token_id>> banned(static_cast<std::size_t>(batch));
    std::vector<rt::device_sample> constrained;
    for (int q = 0; q < batch; ++q) {
      auto& b = banned[static_cast<std::size_t>(q)];
      for (rt::token_id id = 0; id < static_cast<rt::token_id>(vocab); ++id)
        if (id % 64 != q % 64)
          b.push_back(id);
      rt::logit_edits e;
      e.banned = b;
      constrained.push_back(rt::make_device_sample(nucleus, 1, 1, {}, 0, e));
    }
    const double ms = time_ms([&] { m.runner->execute_sampled(step, constrained, tokens, {}); }, 5, s.decode_reps);
    out.push_back({decode_name(m.label, batch, decode_context,
                               ", CUDA graph, top-p 0.9, GPU, structured-output bans (63/64 of the vocabulary) on every row"),
                   ms, 1e3 * bytes / peak_bytes, fixed(bytes / (ms * 1e-3) / 1e12, 2) + " TB/s", "", 0});
  }
  // The host's masks as well: every row a JSON schema (an order) over the model's first ids of
  // GPT-2's tokens, in a state inside the "items" array, its mask memoized (a warm step). Made
  // before execute_sampled (the executor before issue 42's overlap), or in its before_draw while
  // the forward pass runs (the executor now).
  if (std::filesystem::exists(s.mask_tokenizer / "tokenizer.json")) {
    static const auto tok = rt::tokenizer::load(s.mask_tokenizer);
    std::vector<std::optional<std::string>> token_strings(vocab); // the last id: the stop id, no bytes
    for (std::size_t id = 0; id + 1 < vocab && id < tok.vocab_size(); ++id)
      token_strings[id] = tok.token_bytes(static_cast<rt::token_id>(id));
    rs::constraint_cache cache(std::make_shared<const rs::token_vocabulary>(std::move(token_strings)));
    const auto compiled = cache.get({troupe::output_constraint::kind::json_schema, troupe::bench::order_schema, {}});
    const std::string prefix = R"({"order_id": "A-17", "status": "open", "items": [{"sku": "x)";
    const std::vector<rt::token_id> stops{static_cast<rt::token_id>(vocab - 1)};
    std::vector<std::unique_ptr<rs::sequence_constraint>> seqs;
    std::vector<std::vector<rt::token_id>> outputs(static_cast<std::size_t>(batch)), banned(outputs.size());
    for (int q = 0; q < batch; ++q) {
      seqs.push_back(std::make_unique<rs::sequence_constraint>(compiled));
      // The prefix one byte-ish token at a time: the single-byte tokens of GPT-2 map bytes.
      for (char c : prefix)
        for (std::size_t id = 0; id < vocab; ++id)
          if (const auto& b = cache.vocabulary().bytes(static_cast<rt::token_id>(id)); b && *b == std::string(1, c)) {
            outputs[static_cast<std::size_t>(q)].push_back(static_cast<rt::token_id>(id));
            break;
          }
    }
    std::vector<rt::device_sample> masked(static_cast<std::size_t>(batch), rt::make_device_sample(nucleus, 1, 1));
    auto make_masks = [&] {
      for (std::size_t q = 0; q < masked.size(); ++q) {
        seqs[q]->banned_after(outputs[q], stops, banned[q]);
        masked[q].edits.banned = banned[q];
      }
    };
    make_masks();
    std::size_t banned_ids = 0;
    for (const auto& b : banned)
      banned_ids += b.size();
    const double before_ms = time_ms(
        [&] {
          make_masks();
          m.runner->execute_sampled(step, masked, tokens, {});
        },
        5, s.decode_reps);
    for (auto& r : masked)
      r.constrained = true;
    const double overlapped_ms =
        time_ms([&] { m.runner->execute_sampled(step, masked, tokens, {}, make_masks); }, 5, s.decode_reps);
    const auto mask_start = std::chrono::steady_clock::now();
    for (int rep = 0; rep < 20; ++rep)
      make_masks();
    const double mask_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - mask_start).count() / 20;
    const std::string what = ", CUDA graph, top-p 0.9, GPU, JSON-schema masks on every row (" +
                             std::to_string(banned_ids / masked.size()) + " of " + std::to_string(vocab) +
                             " ids banned; host " + fixed(mask_ms, 3) + " ms a step), made ";
    for (auto [how, ms] : {std::pair{"before the step", before_ms}, std::pair{"while the forward pass runs", overlapped_ms}})
      out.push_back({decode_name(m.label, batch, decode_context, what + how), ms, 1e3 * bytes / peak_bytes,
                     fixed(bytes / (ms * 1e-3) / 1e12, 2) + " TB/s", "<= 1.05x of sampled on the GPU", device_ms * 1.05});
  }
  return out;
}

// The GEMMs of one step of `rows` tokens (QKV, O, gate|up, down per layer; the LM head
// for `logit_rows`) through a fresh cuBLASLt wrapper, on one layer's worth of random
// weights reused by every layer (each is far larger than L2, so reuse gains nothing).
// CUDA-event time: what the step would take if everything but the GEMMs were free.
// cuBLASLt for every layer; troupe's GEMV for every layer; or as the runner picks
// (the GEMV where kernels::cuda::gemv_preferred holds, cuBLASLt elsewhere).
enum class linear_path { cublaslt, gemv, runner };

result bench_gemms(const model_under_test& m, int rows, int logit_rows, const std::string& what, bool prefill,
                   linear_path path = linear_path::cublaslt) {
  const auto& c = m.config;
  const std::size_t h = c.hidden_size, q = std::size_t(c.num_attention_heads) * c.head_dim,
                    qkv = q + 2 * std::size_t(c.num_key_value_heads) * c.head_dim, inter = c.intermediate_size;
  using bf16 = __nv_bfloat16;
  kcu::cuda_stream stream;
  kcu::device_buffer<bf16> w_qkv(qkv * h), w_o(h * q), w_gu(2 * inter * h), w_down(h * inter),
      w_head(std::size_t(c.vocab_size) * h);
  kcu::device_buffer<bf16> x(rows * std::max({h, q, inter})), y(rows * std::max(qkv, 2 * inter));
  kcu::device_buffer<float> logits(std::size_t(logit_rows) * c.vocab_size);
  std::uint64_t seed = 50;
  for (auto* buf : {&w_qkv, &w_o, &w_gu, &w_down, &w_head, &x})
    kcu::check(kcu::random_fill(buf->data(), buf->size(), seed++, 0.0f, 0.02f, stream), "random_fill");
  kcu::cublaslt_gemm gemm;
  const auto type = kcu::gemm_type::bf16;
  auto use_gemv = [&](int m, int n, std::size_t k) {
    return path == linear_path::gemv || (path == linear_path::runner && kcu::gemv_preferred(m, n, int(k)));
  };
  auto linear = [&](const bf16* w, int n, std::size_t k, const char* name) {
    if (use_gemv(rows, n, k))
      kcu::check(kcu::gemv(x.data(), w, y.data(), rows, n, static_cast<int>(k), stream), name);
    else
      kcu::check(gemm.linear(x.data(), w, y.data(), rows, n, static_cast<int>(k), type, type, stream), name);
  };
  auto step = [&] {
    for (int l = 0; l < c.num_hidden_layers; ++l) {
      linear(w_qkv.data(), static_cast<int>(qkv), h, "qkv");
      linear(w_o.data(), static_cast<int>(h), q, "o");
      linear(w_gu.data(), static_cast<int>(2 * inter), h, "gate_up");
      linear(w_down.data(), static_cast<int>(h), inter, "down");
    }
    if (use_gemv(logit_rows, c.vocab_size, h))
      kcu::check(
          kcu::gemv(x.data(), w_head.data(), logits.data(), logit_rows, c.vocab_size, static_cast<int>(h), stream),
          "lm_head");
    else
      kcu::check(gemm.linear(x.data(), w_head.data(), logits.data(), logit_rows, c.vocab_size, h, type,
                             kcu::gemm_type::f32, stream),
                 "lm_head");
  };
  kcu::cuda_event start(true), stop(true);
  for (int i = 0; i < 3; ++i)
    step();
  std::vector<double> ms;
  for (int r = 0; r < 10; ++r) {
    start.record(stream);
    step();
    stop.record(stream);
    stop.synchronize();
    ms.push_back(stop.elapsed_since(start));
  }
  const double t = median(ms);
  if (prefill) {
    const double flops = 2.0 * layer_params(c) * rows + 2.0 * c.vocab_size * c.hidden_size * logit_rows;
    return {"  GEMMs alone of " + what,
            t,
            1e3 * flops / peak_flops,
            fixed(flops / (t * 1e-3) / 1e12, 0) + " TFLOP/s",
            "",
            0};
  }
  const double bytes = 2.0 * (layer_params(c) + double(c.vocab_size) * c.hidden_size);
  const char* how = path == linear_path::gemv     ? " (troupe GEMV everywhere)"
                    : path == linear_path::runner ? " (as the runner picks)"
                                                  : " (cuBLASLt)";
  return {"  GEMMs alone of " + what + how,
          t,
          1e3 * bytes / peak_bytes,
          fixed(bytes / (t * 1e-3) / 1e12, 2) + " TB/s",
          "",
          0};
}

std::string plan_line(const model_under_test& m) {
  const auto& p = m.plan;
  char s[400];
  std::snprintf(s, sizeof s,
                "- %s: built in %.2f s (dummy %s weights on the GPU); weights %.2f GB, activations %.2f GB, KV "
                "pool %.2f GB (%d blocks of %d tokens), %.1f GB free of %.1f GB before\n",
                m.label.c_str(), m.build_s, m.form == weight_form::fp8    ? "FP8"
                : m.form == weight_form::int4 ? "INT4"
                : m.fp16                      ? "fp16"
                                              : "bf16", p.weight_bytes / 1e9, p.activation_bytes / 1e9,
                p.kv_pool_bytes / 1e9, p.num_blocks, block_size, p.free_at_start / 1e9, p.total_bytes / 1e9);
  return s;
}

std::string table(const std::vector<result>& rows) {
  std::string t =
      "| case | median ms | floor ms | floor / time | achieved | goal ms | goal met |\n"
      "|---|---:|---:|---:|---:|---:|:---:|\n";
  for (const auto& r : rows) {
    const std::string met = r.goal_ms > 0 ? (r.ms <= r.goal_ms ? "yes" : "no") : "";
    t += "| " + r.name + " | " + fixed(r.ms, 2) + " | " + fixed(r.floor_ms, 2) + " | " +
         fixed(100.0 * r.floor_ms / r.ms, 1) + "% | " + r.rate + " | " + r.goal + " | " + met + " |\n";
  }
  return t;
}

// `step` run `warm` times, then `profiled` times between cudaProfilerStart and cudaProfilerStop.
void run_profiled(model_under_test& m, const rt::step_batch& step, int warm, int profiled) {
  std::vector<float> logits;
  for (int i = 0; i < warm; ++i)
    m.run(step, logits);
  kcu::check(cudaProfilerStart(), "cudaProfilerStart");
  for (int i = 0; i < profiled; ++i)
    m.run(step, logits);
  kcu::check(cudaProfilerStop(), "cudaProfilerStop");
}

// --profile-decode: the CUDA-graph decode step replayed 3 times inside a profiler range.
// `types`: bf16 (bf16 model and cache), fp8 (bf16 model, fp8 cache), fp16 (fp16 model and cache),
// fp8w or int4w (FP8 or INT4 linear layers, bf16 cache).
int profile_decode(const settings& s, const std::string& shape, int batch, const std::string& types) {
  if (types != "bf16" && types != "fp8" && types != "fp16" && types != "fp8w" && types != "int4w")
    throw std::invalid_argument("--profile-decode: types must be bf16, fp8, fp16, fp8w or int4w, not " + types);
  const int blocks = batch * ((decode_context + block_size) / block_size + 1);
  const rt::cuda_dtype dtype = types == "fp16" ? rt::cuda_dtype::float16 : rt::cuda_dtype::bfloat16;
  model_under_test m(s.models / shape, shape, 2048, blocks,
                     types == "fp8" ? rt::kv_cache_dtype::fp8_e4m3 : rt::own_cache_dtype(dtype), dtype, false,
                     types == "fp8w" ? weight_form::fp8 : types == "int4w" ? weight_form::int4 : weight_form::dense);
  const rt::step_batch step = prepare_decode(m, batch);
  m.cuda().use_cuda_graphs(true);
  run_profiled(m, step, 5, 3);
  std::printf("%s decode batch %d (%s): %llu graph replays\n", shape.c_str(), batch, types.c_str(),
              static_cast<unsigned long long>(m.cuda().graph_replays()));
  return 0;
}

// --profile-prefill: one prefill of `tokens` random tokens (logits for the last) run twice
// inside a profiler range, after two untimed ones; a bf16 model and cache, or fp16 ones.
int profile_prefill(const settings& s, const std::string& shape, int tokens, bool fp16) {
  const int blocks = (tokens + block_size - 1) / block_size;
  const rt::cuda_dtype dtype = fp16 ? rt::cuda_dtype::float16 : rt::cuda_dtype::bfloat16;
  model_under_test m(s.models / shape, shape, tokens, blocks, rt::own_cache_dtype(dtype), dtype);
  run_profiled(m, prefill_step(m, tokens), 2, 2);
  std::printf("%s %s prefill of %d tokens, twice\n", shape.c_str(), fp16 ? "fp16" : "bf16", tokens);
  return 0;
}

// One measurement of bench/peers/peers.py: a peer's time of a step that troupe times too.
struct peer_time {
  std::string peer;  // "transformers eager" or "torch.compile"
  std::string model; // troupe's label of the shape: "13B", "8B"
  std::string step;  // "prefill" or "decode"
  int batch = 0, tokens = 0, context = 0;
  double median_ms = 0, min_ms = 0, max_ms = 0;
};

// peers.py's JSON lines; `skipped` counts those without a time (a failed case, or not JSON).
std::vector<peer_time> read_peers(const std::string& path, int& skipped) {
  std::ifstream in(path);
  if (!in)
    throw std::runtime_error("--peers: cannot read " + path);
  std::vector<peer_time> peers;
  skipped = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.find_first_not_of(" \t\r") == std::string::npos)
      continue;
    boost::system::error_code ec;
    const boost::json::value v = boost::json::parse(line, ec);
    const boost::json::object* o = ec ? nullptr : v.if_object();
    if (o == nullptr || o->contains("error") || !o->contains("median_ms")) {
      ++skipped;
      continue;
    }
    auto text = [&](const char* key) {
      const boost::json::value* x = o->if_contains(key);
      return x != nullptr && x->is_string() ? std::string(x->as_string()) : std::string();
    };
    auto number = [&](const char* key) {
      const boost::json::value* x = o->if_contains(key);
      return x != nullptr && x->is_number() ? x->to_number<double>() : 0.0;
    };
    peers.push_back({text("peer"), text("model"), text("step"), static_cast<int>(number("batch")),
                     static_cast<int>(number("tokens")), static_cast<int>(number("context")), number("median_ms"),
                     number("min_ms"), number("max_ms")});
  }
  return peers;
}

// The case names and median times of the first table of an earlier report of this program (a
// peers table after it is not read).
std::vector<result> read_report(const std::string& path) {
  std::ifstream in(path);
  if (!in)
    throw std::runtime_error("--report: cannot read " + path);
  std::vector<result> rows;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("| ", 0) != 0 || line.rfind("| case |", 0) == 0) {
      if (!rows.empty() && line.rfind("|", 0) != 0)
        break; // past the table
      continue;
    }
    const std::size_t name_end = line.find(" | ", 2);
    if (name_end == std::string::npos)
      continue;
    result r;
    r.name = line.substr(2, name_end - 2);
    try {
      r.ms = std::stod(line.substr(name_end + 3));
    } catch (const std::exception&) {
      continue;
    }
    rows.push_back(r);
  }
  return rows;
}

// troupe's rows that a peer's measurement stands beside: a prefill's row; a decode step's rows
// kernel by kernel and replaying a CUDA graph (the sampling rows time more than the peers do).
std::vector<std::string> rows_of(const peer_time& p) {
  if (p.step == "prefill")
    return {prefill_name(p.model, p.tokens)};
  if (p.step == "decode")
    return {decode_name(p.model, p.batch, p.context, ", kernel by kernel"),
            decode_name(p.model, p.batch, p.context, ", CUDA graph")};
  return {};
}

// The peers beside troupe's times, in the order of troupe's rows.
std::string peers_table(const std::vector<result>& rows, const std::string& peers_path) {
  int skipped = 0;
  const std::vector<peer_time> peers = read_peers(peers_path, skipped);
  std::string t = "\nPeers measured on this machine (" + peers_path +
                  ", bench/peers/peers.py: the same shapes with random bf16 weights, SDPA attention, a static KV "
                  "cache): their median ms (min - max) over troupe's; above 1, troupe is faster.";
  if (skipped > 0)
    t += " " + std::to_string(skipped) + " line(s) without a time (failed cases) left out.";
  t += "\n\n| case | troupe ms | peer | peer ms | peer / troupe |\n|---|---:|---|---:|---:|\n";
  int matched = 0;
  for (const auto& r : rows)
    for (const auto& p : peers)
      for (const auto& name : rows_of(p))
        if (name == r.name && r.ms > 0) {
          t += "| " + r.name + " | " + fixed(r.ms, 2) + " | " + p.peer + " | " + fixed(p.median_ms, 2) + " (" +
               fixed(p.min_ms, 2) + " - " + fixed(p.max_ms, 2) + ") | " + fixed(p.median_ms / r.ms, 2) + " |\n";
          ++matched;
        }
  if (matched == 0)
    t += "\nNo peer measurement matches a row of troupe's table.\n";
  return t;
}

// Writes `text` to stdout and to `out_path` (if given).
void publish(const std::string& text, const std::string& out_path) {
  std::fputs(text.c_str(), stdout);
  if (!out_path.empty())
    if (FILE* f = std::fopen(out_path.c_str(), "w")) {
      std::fputs(text.c_str(), f);
      std::fclose(f);
    }
}

// The report with its table (and the peers' beside troupe's, with --peers), to stdout and to
// `out_path` (if given); main's exit status.
int finish(std::string report, const std::vector<result>& rows, const std::string& out_path,
           const std::string& peers_path) {
  report += "\n" + table(rows);
  if (!peers_path.empty()) {
    try {
      report += peers_table(rows, peers_path);
    } catch (const std::exception& e) {
      report += std::string("\nPeers: ") + e.what() + "\n";
    }
  }
  publish(report, out_path);
  return 0;
}

} // namespace

int main(int argc, char** argv) {
  std::string out_path;
  settings s;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool value = i + 1 < argc; // the options below but the --*-only ones take one
    if (a == "--decode-only")
      s.decode_only = true;
    else if (a == "--sampling-only")
      s.sampling_only = true;
    else if (a == "--deterministic-only")
      s.deterministic_only = true;
    else if (a == "--quantized-only" || a == "--fp8-only")
      s.quantized_only = true;
    else if (a == "--moe-only")
      s.moe_only = true;
    else if (a == "--out" && value)
      out_path = argv[++i];
    else if (a == "--models" && value)
      s.models = argv[++i];
    else if (a == "--reps" && value)
      s.prefill_reps = s.decode_reps = std::max(10, std::stoi(argv[++i]));
    else if (a == "--peers" && value)
      s.peers = argv[++i];
    else if (a == "--report" && value)
      s.report = argv[++i];
    else if (a == "--mask-tokenizer" && value)
      s.mask_tokenizer = argv[++i];
    else if (a == "--batches" && value) {
      s.sampling_batches.clear();
      std::stringstream list(argv[++i]);
      for (std::string item; std::getline(list, item, ',');)
        s.sampling_batches.push_back(std::stoi(item));
      if (s.sampling_batches.empty() ||
          std::any_of(s.sampling_batches.begin(), s.sampling_batches.end(), [](int b) { return b < 1 || b > 64; })) {
        std::fputs("bench_engine_gpu: --batches takes sizes from 1 to 64, comma-separated\n", stderr);
        return 2;
      }
    }
  }
  // The peers table from an earlier report: no device needed.
  if (!s.report.empty()) {
    if (s.peers.empty()) {
      std::fputs("bench_engine_gpu: --report needs --peers FILE\n", stderr);
      return 2;
    }
    try {
      publish(peers_table(read_report(s.report), s.peers), out_path);
      return 0;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "bench_engine_gpu: %s\n", e.what());
      return 1;
    }
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::puts("no CUDA device");
    return 77;
  }
  // A profiling mode's exit status: its own, or 1 with the reason on stderr.
  auto guarded = [](auto&& mode) {
    try {
      return mode();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "bench_engine_gpu: %s\n", e.what());
      return 1;
    }
  };
  for (int i = 1; i + 2 < argc; ++i)
    if (std::string(argv[i]) == "--profile-prefill")
      return guarded([&] {
        return profile_prefill(s, argv[i + 1], std::stoi(argv[i + 2]),
                               i + 3 < argc && std::string(argv[i + 3]) == "fp16");
      });
  for (int i = 1; i + 3 < argc; ++i)
    if (std::string(argv[i]) == "--profile-decode")
      return guarded([&] { return profile_decode(s, argv[i + 1], std::stoi(argv[i + 2]), argv[i + 3]); });
  std::string report =
      "Prefill: FLOPs of the linear layers for every token + the LM head for the last row + causal attention, "
      "over 794 TFLOP/s. Decode: bytes of every weight but the embedding table + K and V of every context "
      "token, over 4.28 TB/s. Times: median host time of execute() (inputs copy, forward, logits copy, sync).\n\n";
  std::vector<result> rows;
  try {
    if (s.sampling_only) {
      // The sampling rows of each decode step, for both shapes (issue 37's table), nothing else.
      const int most = *std::max_element(s.sampling_batches.begin(), s.sampling_batches.end());
      for (const char* shape : {"llama2-13b-shape", "llama3-8b-shape"}) {
        const int blocks = std::max(12, most) * ((decode_context + block_size) / block_size + 1);
        const bool is_13b = std::string(shape) == "llama2-13b-shape";
        model_under_test m(s.models / shape, is_13b ? "13B" : "8B", 2048, blocks);
        report += plan_line(m);
        for (int batch : s.sampling_batches)
          for (auto& r : bench_decode(m, batch, s, "", 0))
            rows.push_back(std::move(r));
        for (auto& r : bench_prompt_scoring(m, 1000, s))
          rows.push_back(std::move(r));
      }
      return finish(report, rows, out_path, s.peers);
    }
    if (s.quantized_only) {
      // FP8 and INT4 weights against bf16, one runner at a time (13B bf16 and FP8 do not fit together).
      const int blocks =
          std::max((4096 + block_size - 1) / block_size, 12 * ((decode_context + block_size) / block_size + 1));
      for (weight_form form : {weight_form::dense, weight_form::fp8, weight_form::int4}) {
        model_under_test m(s.models / "llama2-13b-shape",
                           form == weight_form::fp8 ? "13B FP8" : form == weight_form::int4 ? "13B INT4" : "13B", 4096,
                           blocks, rt::kv_cache_dtype::bfloat16, rt::cuda_dtype::bfloat16, false, form);
        report += plan_line(m);
        rows.push_back(bench_prefill(m, 1000, s, "", 0));
        rows.push_back(bench_prefill(m, 4096, s, "", 0));
        for (int batch : {1, 8, 12})
          for (auto& r : bench_decode(m, batch, s, "", 0, false))
            rows.push_back(std::move(r));
      }
      // 70B in FP8 (69 GB of weights) and INT4 (39 GB) with an fp8 KV cache: 16 sequences of 1,501 tokens.
      for (weight_form form : {weight_form::fp8, weight_form::int4}) {
        const char* label = form == weight_form::fp8 ? "70B FP8" : "70B INT4";
        try {
          const int blocks70 = 16 * ((decode_context + block_size) / block_size + 1);
          // 1,536 activation rows: prepare_decode prefills each 1,500-token context in one step.
          model_under_test m(s.models / "llama2-70b-shape", label, 1536, blocks70, rt::kv_cache_dtype::fp8_e4m3,
                             rt::cuda_dtype::bfloat16, false, form);
          report += plan_line(m);
          for (int batch : {1, 16})
            for (auto& r : bench_decode(m, batch, s, "", 0, false))
              rows.push_back(std::move(r));
        } catch (const std::exception& e) {
          report += std::string("- ") + label + ": not run: " + e.what() + "\n";
        }
      }
      return finish(report, rows, out_path, s.peers);
    }
    if (s.moe_only) {
      // Mixtral-8x7B (93 GB of bf16 weights: where the device holds less, 16 of its 32 layers, the
      // floor counted for those) and Qwen3-30B-A3B: prefill of 1,000 tokens, decode at batch 1 and 16.
      // The decode floor counts the experts the batch reads (experts_read: uniform routing).
      std::size_t free_bytes = 0, total_bytes = 0;
      cudaMemGetInfo(&free_bytes, &total_bytes);
      const bool whole_mixtral = total_bytes > (120ull << 30);
      const int blocks = 16 * ((decode_context + block_size) / block_size + 1);
      for (const char* shape : {"mixtral-8x7b-shape", "qwen3-30b-a3b-shape"}) {
        const bool mixtral = std::string(shape) == "mixtral-8x7b-shape";
        const int layers = mixtral && !whole_mixtral ? 16 : 0;
        const std::string label =
            mixtral ? (layers > 0 ? "Mixtral-8x7B (16 of 32 layers)" : "Mixtral-8x7B") : "Qwen3-30B-A3B";
        try {
          model_under_test m(s.models / shape, label, 2048, blocks, rt::kv_cache_dtype::bfloat16,
                             rt::cuda_dtype::bfloat16, false, weight_form::dense, layers);
          report += plan_line(m);
          rows.push_back(bench_prefill(m, 1000, s, "", 0));
          for (int batch : {1, 16})
            for (auto& r : bench_decode(m, batch, s, batch == 1 ? "<= 1.3 x floor" : "", 0, false))
              rows.push_back(std::move(r));
        } catch (const std::exception& e) {
          report += "- " + label + ": not run: " + e.what() + "\n";
        }
      }
      return finish(report, rows, out_path, s.peers);
    }
    if (s.deterministic_only) {
      // What engine.deterministic costs: the same steps with per-shape GEMMs, the GEMV and the
      // fast attention kernels, and with batch-invariant GEMMs and the simple attention kernel.
      for (const char* shape : {"llama2-13b-shape", "llama3-8b-shape"})
        for (bool deterministic : {false, true}) {
          const int blocks = 12 * ((decode_context + block_size) / block_size + 1);
          const bool is_13b = std::string(shape) == "llama2-13b-shape";
          const std::string label = std::string(is_13b ? "13B" : "8B") + (deterministic ? " deterministic" : "");
          model_under_test m(s.models / shape, label, 2048, blocks, rt::kv_cache_dtype::bfloat16,
                             rt::cuda_dtype::bfloat16, deterministic);
          report += plan_line(m);
          rows.push_back(bench_prefill(m, 1000, s, "", 0));
          for (int batch : {1, 12})
            for (auto& r : bench_decode(m, batch, s, "", 0, false))
              rows.push_back(std::move(r));
        }
      return finish(report, rows, out_path, s.peers);
    }
    {
      // 13B: 4,096-token prefill and 12 sequences of 1,501 tokens (94 blocks each) share one pool.
      const int blocks =
          std::max((4096 + block_size - 1) / block_size, 12 * ((decode_context + block_size) / block_size + 1));
      model_under_test m(s.models / "llama2-13b-shape", "13B", 4096, blocks);
      report += plan_line(m);
      if (!s.decode_only) {
        rows.push_back(bench_prefill(m, 1000, s, "<= 40", 40.0));
        rows.push_back(bench_prefill(m, 4096, s, "<= 170", 170.0));
      }
      for (auto& r : bench_decode(m, 1, s, "<= 7.0", 7.0))
        rows.push_back(std::move(r));
      for (auto& r : bench_decode(m, 12, s, "<= 11.4", 11.4))
        rows.push_back(std::move(r));
      // A few sequences: the linear layers' m of a lightly loaded server (and of a speculative
      // verification of 1-3 draft tokens at batch 1).
      for (int batch : {2, 4})
        for (auto& r : bench_decode(m, batch, s, "", 0, false))
          rows.push_back(std::move(r));
      if (s.decode_only)
        return finish(report, rows, out_path, s.peers);
      rows.push_back(bench_gemms(m, 1000, 1, "13B prefill 1 x 1000", true));
      rows.push_back(bench_gemms(m, 4096, 1, "13B prefill 1 x 4096", true));
      // The linear layers of small batches all through cuBLASLt, all through the GEMV: where it pays.
      rows.push_back(bench_gemms(m, 1, 1, "13B decode batch 1", false, linear_path::runner));
      for (int batch : {1, 2, 4})
        for (auto path : {linear_path::cublaslt, linear_path::gemv})
          rows.push_back(bench_gemms(m, batch, batch, "13B decode batch " + std::to_string(batch), false, path));
      rows.push_back(bench_gemms(m, 12, 12, "13B decode batch 12", false));
    }
    {
      const int blocks = 12 * ((decode_context + block_size) / block_size + 1);
      model_under_test m(s.models / "llama3-8b-shape", "8B", 2048, blocks);
      report += plan_line(m);
      for (int batch : {1, 12})
        for (auto& r : bench_decode(m, batch, s, "", 0))
          rows.push_back(std::move(r));
      for (auto path : {linear_path::cublaslt, linear_path::runner})
        rows.push_back(bench_gemms(m, 1, 1, "8B decode batch 1", false, path));
      rows.push_back(bench_gemms(m, 12, 12, "8B decode batch 12", false));
    }
    {
      // model.dtype=float16: the same prefills and decode steps, on the bf16 kernels' fp16 twins.
      const int blocks =
          std::max((4096 + block_size - 1) / block_size, 12 * ((decode_context + block_size) / block_size + 1));
      model_under_test m(s.models / "llama2-13b-shape", "13B fp16", 4096, blocks, rt::kv_cache_dtype::float16,
                         rt::cuda_dtype::float16);
      report += plan_line(m);
      rows.push_back(bench_prefill(m, 1000, s, "", 0));
      rows.push_back(bench_prefill(m, 4096, s, "", 0));
      for (int batch : {1, 12})
        for (auto& r : bench_decode(m, batch, s, "", 0, false))
          rows.push_back(std::move(r));
    }
    // The same decode steps over an fp8 e4m3 KV cache (engine.kv-cache-dtype=fp8): half the KV bytes.
    for (const char* shape : {"llama2-13b-shape", "llama3-8b-shape"}) {
      const int blocks = 12 * ((decode_context + block_size) / block_size + 1);
      const bool is_13b = std::string(shape) == "llama2-13b-shape";
      model_under_test m(s.models / shape, is_13b ? "13B fp8 KV" : "8B fp8 KV", 2048, blocks,
                         rt::kv_cache_dtype::fp8_e4m3);
      report += plan_line(m);
      for (int batch : {1, 12})
        for (auto& r : bench_decode(m, batch, s, "", 0))
          rows.push_back(std::move(r));
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_engine_gpu: %s\n", e.what());
    if (!rows.empty())
      std::fputs(table(rows).c_str(), stderr);
    return 1;
  }
  return finish(report, rows, out_path, s.peers);
}
