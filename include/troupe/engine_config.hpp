// The engine's configuration for a host: every key of the INI categories model,
// engine, speculative and debug with its default, how to declare the keys on a
// caf::actor_system_config, read them back and check them.
#pragma once

#include <caf/actor_system_config.hpp>
#include <caf/config_option_set.hpp>
#include <caf/settings.hpp>

#include <string>

#include "troupe/errors.hpp"

namespace troupe {

// The INI categories the engine reads; every key of theirs is below.
inline constexpr const char* engine_categories[] = {"model", "engine", "speculative", "debug"};

// Every key of the categories `model`, `engine`, `speculative` and `debug`,
// with defaults that serve the bundled model on the CPU.
struct engine_config {
  // [model]
  std::string model_path = "models/stories260k";
  std::string load_format = "safetensors";  // safetensors | dummy (cuda: random weights made on the GPU)
  std::string dtype = "auto"; // auto | float32 | bfloat16 | float16 (auto: bfloat16 on cuda, float32 on cpu; bfloat16
                              // and float16 cuda only)
  std::string tokenizer_path;               // a folder with tokenizer.json; empty = model_path (vLLM's --tokenizer)
  std::string quantization = "none";       // none | fp8: the linear layers quantized to FP8 e4m3 at load, a scale
                                            // per output row (FP8 checkpoints are FP8 either way)
  // [engine]
  std::string device = "cpu";               // cpu | cuda | auto (cuda when a device is visible)
  int tensor_parallel_size = 1;             // ranks of one model replica (cpu: threads; cuda: GPUs)
  std::string tensor_parallel_devices;      // cuda: each rank's GPU, comma-separated ("" = 0..N-1); a GPU may
                                            // repeat (ranks sharing one GPU: a test of the sharded step)
  int block_size = 16;                      // tokens per KV block: 1..256, a power of two
  std::string kv_cache_dtype = "auto"; // auto (= dtype) | float32 | bfloat16 | float16 | fp8 (cuda; e4m3, scales 1.0);
                                       // only the model's dtype or fp8
  double gpu_memory_utilization = 0.9;      // cuda: (0, 1] of device memory for weights + activations + KV
  bool cuda_graphs = true;                  // cuda: decode steps replay CUDA graphs (one per padded batch size)
  bool device_sampling = true;              // cuda: sample on the GPU unless a step scores prompts or verifies drafts
  bool deterministic = false;               // batch-invariant: a request's tokens and logprobs do not depend on the
                                            // rest of its batch (docs/performance.md has the cost)
  int kv_cache_mib = 64;                    // CPU backend: memory for device-tier KV blocks
  int num_device_blocks = 0;                // > 0 overrides the size derived from memory (both backends)
  double swap_space_gib = 0.25;             // host tier for swapped-out KV blocks
  int num_host_blocks = -1;                 // >= 0 overrides the size derived from swap-space-gib
  int max_num_seqs = 64;
  int max_num_batched_tokens = 2048;
  int max_prefill_tokens_with_decodes = 0;  // > 0: prefill tokens in a step that carries decodes, at most
  int max_model_len = 0;                    // 0 = the model's max_position_embeddings
  bool enable_prefix_caching = true;
  std::string scheduler_policy = "fcfs";    // fcfs | priority
  std::string preemption_mode = "swap";     // swap | recompute
  int cpu_threads = 0;                      // 0 = all cores
  // [speculative]
  std::string speculative_method = "none";  // none | draft | self | ngram
  std::string draft_model;                  // method=draft: a model folder with the target's vocabulary
  std::string draft_load_format = "safetensors";  // safetensors | dummy (draft-model's config.json, random weights)
  int draft_layers = 2;                     // method=self: the target's first N layers draft
  int ngram_min = 1, ngram_max = 4;         // method=ngram: the lookup's n, tried from max down to min
  int num_speculative_tokens = 3;           // k: draft tokens per decode step at most
  bool adaptive_speculation = true;         // each sequence adapts k to its own recent acceptance
  // [debug] Testing only: faults made on purpose, to see the engine recover (runtime/fault_injector).
  // 0 = never; N = one use in N fails (the Nth, 2Nth, ...).
  int fail_executor_step = 0;               // a model step throws: its requests fail with step_failed
  int crash_executor = 0;                   // the executor actor dies in a step: restarted; its step's requests fail
  int fail_swap_copy = 0;                   // a swap copy fails: the sequences are recomputed instead
  int fail_draft = 0;                       // a draft proposal throws: the step runs without speculation
  int crash_draft = 0;                      // the draft actor dies in a proposal: restarted
  int fail_tokenizer = 0;                   // a prompt's encode or a token's decode throws: tokenizer_error

  bool operator==(const engine_config&) const = default;
};

// Declares the options on a host's actor_system_config (call it from the
// config's constructor with its custom_options_), bound to `cfg`.
void add_engine_options(caf::config_option_set& options, engine_config& cfg);

// Reads the options from a parsed config whose class did not declare them
// (caf::get_or with our defaults).
engine_config engine_config_from(const caf::actor_system_config& sys_cfg);

// Throws config_error for a key of the categories model, engine or speculative
// that is not declared by add_engine_options, or whose value has the wrong type
// (an integer is accepted for a floating-point key). CAF itself ignores both
// silently in INI files; call this on the raw settings before validate().
void check_settings(const caf::settings& content);

// Throws config_error for the first invalid value.
void validate(const engine_config& cfg);

// The categories model, engine, speculative and debug as an INI file: every key with its
// default and, above it, what it means and what it accepts (configs/stories260k-cpu.ini
// holds exactly this text; a test checks it).
std::string engine_ini();

} // namespace troupe
