// The CUDA runner: sets up the device (weights, activations and KV pools, as the memory plan
// sizes them), and runs steps, kernel by kernel or as a graph replay, with logits to the host or
// tokens sampled on the device; and moves KV blocks between the pools.
#include "runtime/cuda/cuda_model_runner.hpp"

#include <algorithm>
#include <exception>
#include <set>
#include <thread>
#include <cstring>
#include <stdexcept>
#include <string>

#include "kernels/cuda/paged_attention.hpp"
#include "kernels/cuda/sampling.hpp"
#include "runtime/rope.hpp"
#include "runtime/weight_shard.hpp"

namespace troupe::runtime {

namespace kc = kernels::cuda;

namespace {

[[noreturn]] void refuse(const std::string& what) {
  throw std::invalid_argument("cuda runner: " + what);
}

// Runs before any member allocates: every later allocation lands on the chosen device.
const cuda_runner_options& on_device(const cuda_runner_options& options) {
  int count = 0;
  kc::check(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
  if (options.device < 0 || options.device >= count)
    refuse("device " + std::to_string(options.device) + " does not exist (" + std::to_string(count) + " visible)");
  kc::check(cudaSetDevice(options.device), "cudaSetDevice");
  return options;
}

cuda_memory_plan measure_device() {
  cuda_memory_plan plan;
  kc::check(cudaMemGetInfo(&plan.free_at_start, &plan.total_bytes), "cudaMemGetInfo");
  return plan;
}

void check_options(const model_config& cfg, const cuda_runner_options& o) {
  if (o.block_size < 1 || o.block_size > 256)
    refuse("block size must be in 1..256, got " + std::to_string(o.block_size));
  if (o.max_num_batched_tokens < 1)
    refuse("max_num_batched_tokens must be >= 1");
  if (o.num_blocks < 0 || o.num_host_blocks < 0)
    refuse("block counts must not be negative");
  if (!(o.gpu_memory_utilization > 0.0 && o.gpu_memory_utilization <= 1.0))
    refuse("gpu_memory_utilization must be in (0, 1]");
  if (cfg.head_dim % 2 != 0)
    refuse("head_dim must be even for rotary embeddings");
  if (o.kv_dtype != own_cache_dtype(o.dtype) && o.kv_dtype != kv_cache_dtype::fp8_e4m3)
    refuse(std::string("a ") + to_string(o.kv_dtype) + " KV cache needs " + to_string(o.kv_dtype) + " weights, not " +
           to_string(o.dtype) + " (the cache stores the model's dtype, or fp8)");
  if (o.kv_dtype == kv_cache_dtype::fp8_e4m3 && !(o.k_scale > 0.0f && o.v_scale > 0.0f))
    refuse("fp8 KV-cache scales must be positive");
  if (o.fp8_weights && o.int4_weights)
    refuse("fp8_weights and int4_weights together: the linear layers have one form");
  if (cfg.moe && (o.fp8_weights || o.int4_weights))
    refuse("FP8 or INT4 weights of a mixture-of-experts model: its experts run in the model's dtype only");
}

// The model as one rank computes it: its query and kv heads and its MLP width (the vocabulary
// stays whole: the logits rows are gathered whole).
model_config rank_config(model_config cfg, const shard_shape& shard) {
  cfg.num_attention_heads = shard.q_heads;
  cfg.num_key_value_heads = shard.kv_heads;
  cfg.intermediate_size = shard.intermediate;
  if (cfg.moe)
    cfg.moe->expert_intermediate_size = shard.expert_intermediate;
  return cfg;
}

shard_shape check_rank(const model_config& cfg, const cuda_runner_options& o, const cuda_rank& rank) {
  if (rank.group == nullptr)
    return shard_shapes(cfg, 1).front();
  const auto& s = rank.shard;
  const std::string who = "tensor-parallel rank " + std::to_string(s.rank) + " of " + std::to_string(s.ranks);
  if (rank.group->size() != s.ranks || rank.group->rank() != s.rank)
    refuse(who + " needs a collective of that rank and size, got rank " + std::to_string(rank.group->rank()) + " of " +
           std::to_string(rank.group->size()));
  if (rank.group->device() != o.device)
    refuse(who + " runs on device " + std::to_string(o.device) + " but its collective on device " +
           std::to_string(rank.group->device()));
  if (s != shard_shapes(cfg, s.ranks)[static_cast<std::size_t>(s.rank)])
    refuse(who + ": its shard is not the model's shard_shapes");
  return s;
}

} // namespace

cuda_model_runner::cuda_model_runner(const model_config& config, const model_weights& weights,
                                     const cuda_runner_options& options, cuda_rank rank)
    : config_(config), options_(on_device(options)), shard_(check_rank(config, options, rank)),
      local_(rank_config(config, shard_)), group_(std::move(rank.group)), plan_(measure_device()),
      act_bytes_(element_bytes(options.dtype)),
      gemm_(std::size_t{32} << 20, options.deterministic ? kc::gemm_selection::batch_invariant
                                                         : kc::gemm_selection::per_shape) {
  check_options(config_, options_);
  if (group_ != nullptr && !options_.dummy_weights)
    check_shard_weights(weights, config_, shard_);
  const int heads = local_.num_attention_heads, kv_heads = local_.num_key_value_heads, hd = config_.head_dim;

  // Weights, converted once (cuda_weights.cpp).
  const std::size_t weight_bytes = options_.dummy_weights ? make_dummy_weights() : upload_weights(weights);
  if (static_cast<int>(layers_.size()) != config_.num_hidden_layers)
    refuse("the weights have " + std::to_string(layers_.size()) + " layers, the config " +
           std::to_string(config_.num_hidden_layers));
  auto inv_freq = rope_inv_freq(config_);
  inv_freq_ = kc::device_buffer<float>(inv_freq.size());
  inv_freq_.upload(inv_freq);
  if (config_.sliding_rope_theta) {
    const auto sliding = rope_inv_freq(config_, true);
    sliding_inv_freq_ = kc::device_buffer<float>(sliding.size());
    sliding_inv_freq_.upload(sliding);
  }
  k_scale_.assign(config_.num_hidden_layers, options_.kv_dtype == kv_cache_dtype::fp8_e4m3 ? options_.k_scale : 1.0f);
  v_scale_.assign(config_.num_hidden_layers, options_.kv_dtype == kv_cache_dtype::fp8_e4m3 ? options_.v_scale : 1.0f);
  plan_.weight_bytes = weight_bytes;

  // Activations for the largest step; nothing is allocated per step.
  const activation_buffers sizes = plan_activations(local_, options_);
  max_tokens_ = sizes.rows;
  logits_rows_ = sizes.logits_rows;
  x_ = bytes(sizes.hidden);
  h_ = bytes(sizes.hidden);
  proj_ = bytes(sizes.hidden);
  wide_ = bytes(sizes.wide);
  mid_ = bytes(sizes.mid);
  last_x_ = bytes(sizes.hidden);
  last_proj_ = bytes(sizes.hidden);
  if (config_.moe) {
    moe_rows_ = sizes.moe_rows;
    moe_router_ = kc::device_buffer<float>(sizes.moe_router / sizeof(float));
    moe_routing_ = bytes(sizes.moe_routing);
    moe_entries_ = bytes(sizes.moe_entries);
    moe_wide_ = bytes(sizes.moe_wide);
    moe_mid_ = bytes(sizes.moe_mid);
    moe_offsets_host_ = kc::pinned_buffer<int>(static_cast<std::size_t>(config_.moe->num_experts) + 1);
  }
  // FP8 or INT4 weights: the largest linear layer dequantized, for steps of more rows than their GEMVs'.
  std::size_t largest_quantized = 0;
  for (const layer& l : layers_)
    for (const linear_weight* w : {&l.qkv, &l.o, &l.gate_up, &l.down})
      largest_quantized = std::max(largest_quantized, w->quantized_elements());
  dequantized_ = bytes(largest_quantized * act_bytes_);
  logits_ = kc::device_buffer<float>(sizes.logits / sizeof(float));
  if (group_ != nullptr)
    vocab_logits_ = kc::device_buffer<float>(static_cast<std::size_t>(logits_rows_) * shard_.vocab);
  const int seqs = sizes.seqs, blocks_per_seq = sizes.blocks_per_seq;
  inputs_host_ = kc::pinned_buffer<std::byte>(sizes.staging);
  inputs_device_ = bytes(sizes.staging);
  // Sampling on the device: every logits row's parameters in, one token per row out.
  sampler_ = cuda_row_sampler(logits_rows_);
  // Split-K scratch of paged attention for the largest step and context (a few MiB at most);
  // never empty, so that attention always takes its fast paths. Deterministic: every token's
  // partials (deterministic_attention_parts of them), since every token takes the split-K path.
  const std::size_t attention_bytes =
      options_.deterministic
          ? kc::paged_attention_invariant_workspace_bytes(max_tokens_, heads, hd, deterministic_attention_parts)
          : kc::paged_attention_workspace_bytes(max_tokens_, heads, kv_heads, hd, blocks_per_seq * options_.block_size);
  attention_ws_ = kc::device_buffer<float>(std::max<std::size_t>(attention_bytes / sizeof(float), 1));
  // Its counters, cleared once here: each call leaves them zero (graph replays included).
  attention_counters_ = kc::device_buffer<std::uint32_t>(kc::paged_attention_counter_count(max_tokens_, heads));
  kc::check(cudaMemset(attention_counters_.data(), 0, attention_counters_.bytes()), "cudaMemset (attention counters)");
  if (options_.cuda_graphs)
    graphs_.plan(seqs, blocks_per_seq);
  plan_.activation_bytes = x_.bytes() + h_.bytes() + proj_.bytes() + wide_.bytes() + mid_.bytes() + last_x_.bytes() +
                           last_proj_.bytes() + dequantized_.bytes() + logits_.bytes() + vocab_logits_.bytes() + inputs_device_.bytes() + sampler_.device_bytes() +
                           gemm_.workspace_bytes() + graphs_.input_bytes();
  plan_.activation_bytes += attention_ws_.bytes() + attention_counters_.bytes();
  plan_.activation_bytes +=
      moe_router_.bytes() + moe_routing_.bytes() + moe_entries_.bytes() + moe_wide_.bytes() + moe_mid_.bytes();

  // The KV pool takes what the utilization target leaves after everything above (and
  // after whatever else already lives on the device).
  plan_.kv_block_bytes = kv_block_bytes(local_, options_.block_size, options_.kv_dtype);
  int num_blocks = options_.num_blocks;
  if (num_blocks == 0) {
    std::size_t free_now = 0, total = 0;
    kc::check(cudaMemGetInfo(&free_now, &total), "cudaMemGetInfo");
    num_blocks =
        kv_blocks_that_fit(total, free_now, options_.gpu_memory_utilization, plan_.kv_block_bytes, options_.max_blocks);
    plan_.blocks_from_memory = true;
    // The ranks share one block table: every rank's pool has the blocks the fullest device fits.
    if (group_ != nullptr)
      num_blocks = group_->agree_min(num_blocks);
    if (num_blocks < 1)
      refuse("no device memory is left for the KV cache (weights " + std::to_string(weight_bytes >> 20) +
             " MiB, activations " + std::to_string(plan_.activation_bytes >> 20) + " MiB, " +
             std::to_string(free_now >> 20) + " MiB free of " + std::to_string(total >> 20) + " MiB at utilization " +
             std::to_string(options_.gpu_memory_utilization) +
             "): raise gpu-memory-utilization or lower max-num-batched-tokens");
  }
  cache_ = kv_cache_config{num_blocks, options_.block_size, options_.num_host_blocks};
  block_slice_bytes_ = plan_.kv_block_bytes / (2 * static_cast<std::size_t>(config_.num_hidden_layers));
  kv_device_ = bytes(2 * static_cast<std::size_t>(config_.num_hidden_layers) * num_blocks * block_slice_bytes_);
  // Zeroed so that a stray read of an unwritten slot gives 0 (as on the CPU), never NaN.
  kc::check(cudaMemset(kv_device_.data(), 0, kv_device_.bytes()), "cudaMemset (KV pool)");
  kv_host_ = kc::pinned_buffer<std::byte>(2 * static_cast<std::size_t>(config_.num_hidden_layers) *
                                          cache_.num_host_blocks * block_slice_bytes_);
  if (kv_host_.bytes() > 0)
    std::memset(kv_host_.data(), 0, kv_host_.bytes());
  plan_.num_blocks = num_blocks;
  plan_.kv_pool_bytes = kv_device_.bytes();
  plan_.num_host_blocks = cache_.num_host_blocks;
  plan_.host_pool_bytes = kv_host_.bytes();
  kc::check(cudaDeviceSynchronize(), "cudaDeviceSynchronize (runner set-up)");
  // The graphs' warm-ups meet the other ranks: none may still be inside a device-wide wait of
  // its set-up (on a GPU the ranks share, that wait would wait for the warm-ups waiting for it).
  if (group_ != nullptr)
    group_->agree_min(0);
  if (options_.cuda_graphs)
    graphs_.capture_all(compute_, [this](const step_shape& shape, const step_inputs& in, step_status& status) {
      run_forward(shape, in, status);
    });
}

std::byte* cuda_model_runner::kv_pool(bool host, int layer, int which) const {
  const std::size_t blocks = host ? cache_.num_host_blocks : cache_.num_blocks;
  std::byte* base = host ? kv_host_.data() : kv_device_.data();
  return base + (static_cast<std::size_t>(layer) * 2 + which) * blocks * block_slice_bytes_;
}

cuda_model_runner::step_inputs cuda_model_runner::stage_inputs(const step_batch& b, std::size_t& total) {
  struct part {
    const void* data;
    std::size_t bytes;
  };
  const part parts[] = {{b.slot_mapping.data(), b.slot_mapping.size() * sizeof(std::int64_t)},
                        {b.token_ids.data(), b.token_ids.size() * sizeof(std::int32_t)},
                        {b.positions.data(), b.positions.size() * sizeof(std::int32_t)},
                        {b.query_start.data(), b.query_start.size() * sizeof(std::int32_t)},
                        {b.block_tables.data(), b.block_tables.size() * sizeof(std::int32_t)},
                        {b.logits_rows.data(), b.logits_rows.size() * sizeof(std::int32_t)}};
  std::size_t offsets[6];
  total = 0;
  for (int i = 0; i < 6; ++i) {
    offsets[i] = total;
    total += round_up(parts[i].bytes, 16);
  }
  if (total > inputs_host_.bytes()) {
    // Only when a step outgrows the sizing hints (longer block tables than expected);
    // the previous step has completed, so nothing still reads the old buffers.
    inputs_host_ = kc::pinned_buffer<std::byte>(total);
    inputs_device_ = bytes(total);
  }
  for (int i = 0; i < 6; ++i)
    if (parts[i].bytes > 0)
      std::memcpy(inputs_host_.data() + offsets[i], parts[i].data, parts[i].bytes);
  const std::byte* d = inputs_device_.data();
  auto i32 = [&](int i) { return reinterpret_cast<const std::int32_t*>(d + offsets[i]); };
  return {reinterpret_cast<const std::int64_t*>(d + offsets[0]), i32(1), i32(2), i32(3), i32(4), i32(5)};
}

template <class F>
void cuda_model_runner::as_rank(F&& step) {
  if (group_ == nullptr) {
    step();
    return;
  }
  try {
    step();
  } catch (...) {
    group_->abort();
    throw;
  }
}

void cuda_model_runner::execute(const step_batch& batch, std::span<float> logits) {
  const std::size_t vocab = config_.vocab_size, n_rows = batch.logits_rows.size();
  if (logits.size() < n_rows * vocab)
    throw std::logic_error("logits buffer is smaller than rows * vocab");
  as_rank([&] {
    if (!begin_step(batch))
      return;
    step_status status;
    launch_step(batch, status);
    if (status.ok() && n_rows > 0)
      if (cudaError_t e = cudaMemcpyAsync(logits.data(), logits_.data(), n_rows * vocab * sizeof(float),
                                          cudaMemcpyDeviceToHost, compute_);
          e != cudaSuccess)
        status = {static_cast<int>(e), "cudaMemcpyAsync (logits)", false};
    finish_step(status);
  });
}

void cuda_model_runner::follow_step(const step_batch& batch) {
  if (group_ == nullptr)
    model_runner::follow_step(batch); // throws: only a rank follows
  as_rank([&] {
    if (!begin_step(batch))
      return;
    step_status status;
    launch_step(batch, status);
    finish_step(status);
  });
}

void cuda_model_runner::execute_sampled(const step_batch& batch, std::span<const device_sample> rows,
                                        std::span<token_id> tokens, std::span<token_logprobs> logprobs,
                                        const std::function<void()>& before_draw) {
  const std::size_t n_rows = batch.logits_rows.size();
  if (rows.size() != n_rows || tokens.size() != n_rows || (!logprobs.empty() && logprobs.size() != n_rows))
    throw std::logic_error("execute_sampled: one sampling row and one token per logits row");
  if (!samples_on_device(rows))
    throw std::logic_error("execute_sampled: the rows' scratch does not fit the logits buffer");
  as_rank([&] {
    if (!begin_step(batch))
      return;
    step_status status;
    launch_step(batch, status);
    // The caller's host work (constraint masks) overlaps the queued forward pass.
    if (before_draw) {
      try {
        before_draw();
      } catch (...) {
        cudaStreamSynchronize(compute_); // nothing queued may outlive the step
        throw;
      }
    }
    if (status.ok() && n_rows > 0)
      sampler_.launch(logits_.data(), config_.vocab_size, rows, compute_, status);
    finish_step(status);
    if (n_rows > 0)
      sampler_.collect(rows, tokens, logprobs);
  });
}

bool cuda_model_runner::begin_step(const step_batch& batch) {
  check_step_batch(batch, cache_, config_.vocab_size);
  if (batch.num_tokens() == 0)
    return false;
  if (batch.num_tokens() > static_cast<std::size_t>(max_tokens_))
    throw std::logic_error(
        "step_batch: " + std::to_string(batch.num_tokens()) +
        " tokens, but the CUDA runner holds activations for max_num_batched_tokens = " + std::to_string(max_tokens_));
  kc::check(cudaSetDevice(options_.device), "cudaSetDevice"); // the executor's thread may be new to CUDA
  return true;
}

void cuda_model_runner::launch_step(const step_batch& batch, step_status& status) {
  if (const int slot = graphs_.slot(batch); slot >= 0) {
    graphs_.replay(batch, slot, compute_, status);
    return;
  }
  std::size_t input_bytes = 0;
  const step_inputs in = stage_inputs(batch, input_bytes);
  if (cudaError_t e =
          cudaMemcpyAsync(inputs_device_.data(), inputs_host_.data(), input_bytes, cudaMemcpyHostToDevice, compute_);
      e != cudaSuccess)
    status = {static_cast<int>(e), "cudaMemcpyAsync (step inputs)", false};
  int min_query_len = static_cast<int>(batch.num_tokens()), max_query_len = 0;
  for (std::size_t s = 0; s + 1 < batch.query_start.size(); ++s) {
    min_query_len = std::min(min_query_len, batch.query_start[s + 1] - batch.query_start[s]);
    max_query_len = std::max(max_query_len, batch.query_start[s + 1] - batch.query_start[s]);
  }
  if (status.ok())
    run_forward({static_cast<int>(batch.num_tokens()), static_cast<int>(batch.num_seqs()), batch.max_blocks_per_seq,
                 static_cast<int>(batch.logits_rows.size()), min_query_len, max_query_len},
                in, status);
}

void cuda_model_runner::finish_step(const step_status& status) {
  const cudaError_t done = cudaStreamSynchronize(compute_);
  if (!status.ok()) {
    if (status.cublas)
      throw kc::cublas_error(static_cast<cublasStatus_t>(status.code), std::string("step: ") + status.what);
    throw kc::cuda_error(static_cast<cudaError_t>(status.code), std::string("step: ") + status.what);
  }
  kc::check(done, "step: cudaStreamSynchronize");
  if (group_ != nullptr && group_->failed())
    throw device_collective_failed("tensor-parallel rank " + std::to_string(shard_.rank) + " of " +
                                   std::to_string(shard_.ranks) +
                                   ": a collective of the step gave up (another rank failed, or a wait timed out)");
}

void cuda_model_runner::copy_blocks(kv_copy kind, std::span<const block_copy> pairs) {
  const int src_blocks = kind == kv_copy::host_to_device ? cache_.num_host_blocks : cache_.num_blocks;
  const int dst_blocks = kind == kv_copy::device_to_host ? cache_.num_host_blocks : cache_.num_blocks;
  for (const auto& p : pairs)
    if (p.src < 0 || p.src >= src_blocks || p.dst < 0 || p.dst >= dst_blocks)
      throw std::logic_error("copy_blocks: block pair " + std::to_string(p.src) + " -> " + std::to_string(p.dst) +
                             " is outside the pools");
  if (pairs.empty())
    return;
  kc::check(cudaSetDevice(options_.device), "cudaSetDevice");
  const bool src_host = kind == kv_copy::host_to_device, dst_host = kind == kv_copy::device_to_host;
  const cudaMemcpyKind direction = src_host   ? cudaMemcpyHostToDevice
                                   : dst_host ? cudaMemcpyDeviceToHost
                                              : cudaMemcpyDeviceToDevice;
  // The copies wait for the steps already queued (they may write the source blocks), and
  // the next step waits for the copies (it may read the destination blocks).
  compute_idle_.record(compute_);
  kc::check(cudaStreamWaitEvent(copy_, compute_idle_, 0), "cudaStreamWaitEvent (copy after compute)");
  // Runs of consecutive source and destination blocks move as one copy per layer and K/V.
  for (std::size_t i = 0; i < pairs.size();) {
    std::size_t run = 1;
    while (i + run < pairs.size() && pairs[i + run].src == pairs[i].src + static_cast<int>(run) &&
           pairs[i + run].dst == pairs[i].dst + static_cast<int>(run))
      ++run;
    for (int l = 0; l < config_.num_hidden_layers; ++l)
      for (int which = 0; which < 2; ++which) {
        const std::byte* src = kv_pool(src_host, l, which) + pairs[i].src * block_slice_bytes_;
        std::byte* dst = kv_pool(dst_host, l, which) + pairs[i].dst * block_slice_bytes_;
        kc::check(cudaMemcpyAsync(dst, src, run * block_slice_bytes_, direction, copy_), "cudaMemcpyAsync (KV blocks)");
      }
    i += run;
  }
  copies_done_.record(copy_);
  kc::check(cudaStreamWaitEvent(compute_, copies_done_, 0), "cudaStreamWaitEvent (compute after copy)");
  // Synchronous completion: the caller frees the source blocks as soon as this returns.
  copy_.synchronize();
}

std::unique_ptr<model_runner> make_cuda_model_runner(const model_config& config, const model_weights& weights,
                                                     const cuda_runner_options& options, cuda_memory_plan* plan) {
  auto runner = std::make_unique<cuda_model_runner>(config, weights, options);
  if (plan != nullptr)
    *plan = runner->memory_plan();
  return runner;
}

std::vector<std::unique_ptr<model_runner>> make_cuda_rank_runners(const model_config& config,
                                                                  const shard_weight_source& weights,
                                                                  const cuda_runner_options& options,
                                                                  const std::vector<int>& devices,
                                                                  std::vector<cuda_memory_plan>* plans) {
  const int ranks = static_cast<int>(devices.size());
  const auto shards = shard_shapes(config, ranks);
  if (std::set<int>(devices.begin(), devices.end()).size() < devices.size() && options.num_blocks == 0)
    refuse("tensor-parallel ranks that share a device need a fixed number of KV blocks (engine.num-device-blocks)");
  // The peer path stages at most a whole step's projection or a rank's slice of its logits rows.
  int widest_vocab = 0;
  for (const auto& s : shards)
    widest_vocab = std::max(widest_vocab, s.vocab);
  const activation_buffers sizes = plan_activations(rank_config(config, shards.front()), options);
  device_group_options group_options;
  group_options.stage_bytes =
      std::max(static_cast<std::size_t>(sizes.rows) * config.hidden_size * element_bytes(options.dtype),
               static_cast<std::size_t>(sizes.logits_rows) * widest_vocab * sizeof(float));
  auto group = make_device_group(devices, shards, group_options);
  const auto abort = group.front()->abort_handle();

  std::vector<std::unique_ptr<model_runner>> out(devices.size());
  std::vector<std::exception_ptr> errors(devices.size());
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      const auto i = static_cast<std::size_t>(r);
      try {
        cuda_runner_options own = options;
        own.device = devices[i];
        const model_weights shard = options.dummy_weights ? model_weights{} : weights(shards[i]);
        out[i] = std::make_unique<cuda_model_runner>(config, shard, own, cuda_rank{shards[i], std::move(group[i])});
      } catch (...) {
        errors[i] = std::current_exception();
        abort(); // the other ranks may be waiting for this one in a collective of their set-up
      }
    });
  for (auto& t : threads)
    t.join();
  // The first rank's own failure, not the "gave up" of the ranks that waited for it.
  std::exception_ptr first;
  for (auto& e : errors) {
    if (!e)
      continue;
    try {
      std::rethrow_exception(e);
    } catch (const device_collective_failed&) {
      if (!first)
        first = e;
    } catch (...) {
      std::rethrow_exception(e);
    }
  }
  if (first)
    std::rethrow_exception(first);
  if (plans != nullptr) {
    plans->clear();
    for (const auto& r : out)
      plans->push_back(static_cast<const cuda_model_runner&>(*r).memory_plan());
  }
  return out;
}

} // namespace troupe::runtime
