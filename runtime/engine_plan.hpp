// The engine plan: the configuration's strings turned into typed choices once, and every
// size the engine's parts are built with — backend and dtypes, context length, KV geometry
// and block counts, the step's token budget, scheduling, speculation, the draft's pool and
// each tensor-parallel rank's share of the heads — computed in one place from the config,
// the model and the machine. Plain arithmetic on plain values: unit-tested without a device.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "runtime/cuda/cuda_runner_options.hpp"
#include "runtime/fault_injector.hpp"
#include "runtime/kv_cache_config.hpp"
#include "runtime/model_config.hpp"
#include "runtime/scheduler_policy.hpp"
#include "runtime/shard_shape.hpp"
#include "troupe/engine_config.hpp"

namespace troupe::runtime {

enum class backend_kind { cpu, cuda };
enum class weight_source { safetensors, dummy };
enum class speculative_method { none, draft, self, ngram };

// What the plan needs to know of the machine: runtime::cuda_devices in the engine, made up
// in tests.
struct machine_info {
  int cuda_devices = 0;
  std::size_t device_memory_bytes = 0; // of device 0
  unsigned cpu_cores = 1;
  bool built_with_cuda = false;
};

// One tensor-parallel rank's share of every layer (runtime/shard_shape.hpp: its query heads,
// the kv heads they read, its MLP rows and vocabulary slice) and the bytes of its part of a
// KV block.
struct rank_slice : shard_shape {
  std::size_t kv_block_bytes = 0;
};

// The ranks' slices; throws config_error naming the numbers when the model does not share out
// among `ranks` (shard_shapes).
std::vector<rank_slice> head_slices(const model_config& model, int ranks, int block_size, kv_cache_dtype kv);

struct speculation_plan {
  speculative_method method = speculative_method::none;
  int k = 0;            // draft tokens per step at most (0: no speculation)
  bool adaptive = true; // each sequence adapts its k
  int ngram_min = 1, ngram_max = 4;
  int draft_layers = 0;     // method=self: the target's first N layers
  std::string draft_model;  // method=draft: its folder
  bool draft_dummy = false; // method=draft: random weights of its config
};

struct engine_plan {
  backend_kind backend = backend_kind::cpu;
  weight_source weights = weight_source::safetensors;
  cuda_dtype dtype = cuda_dtype::float32;      // weights and activations (the CPU backend: float32)
  kv_cache_dtype kv = kv_cache_dtype::float32; // the cache's elements
  int max_model_len = 0;                       // longest prompt + output, before the cache caps it
  // KV geometry.
  int block_size = 16;
  int blocks_per_seq = 0;         // a sequence at max_model_len
  // Every layer slides over this many positions (model_config::every_layer_window; 0: not so): a sequence then
  // holds at most its window and one step's tokens, whatever its length (block_manager::release_before_window).
  int sliding_window = 0;
  std::size_t kv_block_bytes = 0; // one block, every layer, K and V, every head
  int device_blocks = 0;     // CPU: from kv-cache-mib or num-device-blocks; CUDA: num-device-blocks, 0 = from memory
  int max_device_blocks = 0; // CUDA, sized from memory: at most this many (twice every seat at full length)
  int host_blocks = 0;       // swap space
  std::vector<rank_slice> ranks; // one per tensor-parallel rank
  std::vector<int> devices;      // CUDA: each rank's GPU (engine.tensor-parallel-devices, or 0..N-1)
  // The step.
  scheduler_config scheduling; // seats, token budget, policy, preemption
  bool prefix_caching = true;
  int step_tokens = 0; // activations hold this many tokens: the budget, or a verify step's k + 1 per seat
  // CUDA: memory target and fast paths; CPU: threads.
  double gpu_memory_utilization = 0.9;
  bool cuda_graphs = true;
  bool device_sampling = true;
  bool deterministic = false; // batch-invariant kernels (cuda_runner_options::deterministic)
  // model.quantization=fp8: the loaded linear layers are quantized (quantize_linears_fp8).
  bool quantize_fp8 = false;
  // The linear layers are FP8 (quantize_fp8, or an FP8 checkpoint): the CUDA runner keeps them so.
  bool fp8_weights = false;
  // The linear layers are INT4 (an AWQ checkpoint): the CUDA runner keeps them so.
  bool int4_weights = false;
  std::size_t cpu_threads = 1;
  std::size_t cpu_kv_bytes = 0; // CPU backend: kv-cache-mib in bytes (the draft's pool gets as much)
  speculation_plan speculation;
  fault_plan faults;

  // The target model's CUDA runner.
  cuda_runner_options cuda_options() const;
  // The CPU runner's cache.
  kv_cache_config cpu_cache() const { return {device_blocks, block_size, host_blocks}; }
  // The context a cache of `device_blocks` blocks serves: a sequence alone must always fit
  // (otherwise it would be preempted with nothing to make room, and never come back). With every layer
  // sliding, the window plus a whole step's tokens must fit; then any context does.
  int context_that_fits(int device_blocks) const;
};

// Validates `cfg` (troupe::validate) and plans the engine for `model` on `machine`; throws
// config_error naming the key for a combination this machine or model cannot serve
// (engine.device=cuda without a device, bfloat16 on the CPU backend, a KV dtype that is
// neither the model's nor fp8, max-model-len past the model's context, too many draft layers).
engine_plan plan_engine(const engine_config& cfg, const model_config& model, const machine_info& machine);

// The draft model's pool and runner: on CUDA, on the target's GPU in its dtypes, enough
// blocks for every seat at the longest context (plus k), but at most a tenth of the device's
// memory (the target's pool, sized afterwards, takes what the utilization target leaves);
// on the CPU backend, as much memory as the target's pool. Throws config_error when the
// draft's vocabulary is not the target's.
struct draft_runner_plan {
  int blocks = 0;
  int step_tokens = 0;      // catch-up steps are split to this size
  cuda_runner_options cuda; // CUDA backend; on the CPU only block_size and dummy_seed count
  kv_cache_config cpu_cache() const { return {blocks, cuda.block_size, 0}; }
};
draft_runner_plan plan_draft(const engine_plan& plan, const model_config& target, const model_config& draft,
                             const machine_info& machine);

std::string_view to_string(backend_kind b);
std::string_view to_string(speculative_method m);

} // namespace troupe::runtime
