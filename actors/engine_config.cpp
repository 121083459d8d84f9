// The engine's INI/command-line options: declaration, reading from a parsed
// config, and validation with messages that name key, value and what is allowed.
#include <caf/config_option_adder.hpp>
#include <caf/config_value.hpp>
#include <caf/settings.hpp>

#include <cstring>
#include <filesystem>
#include <sstream>
#include <string_view>
#include <utility>

#include "troupe/engine.hpp"

namespace troupe {

void add_engine_options(caf::config_option_set& options, engine_config& c) {
  caf::config_option_adder{options, "model"}
      .add(c.model_path, "path", "Hugging Face model folder (config.json, model.safetensors, tokenizer.json)")
      .add(c.load_format, "load-format",
           "safetensors | dummy (cuda: random weights of config.json's shapes made on the GPU, for benchmarks)")
      .add(c.dtype, "dtype",
           "weight dtype: auto (bfloat16 on cuda, float32 on cpu) | float32 | bfloat16 | float16 (bfloat16 and "
           "float16: cuda only)")
      .add(c.tokenizer_path, "tokenizer",
           "folder with tokenizer.json (and tokenizer_config.json) when not the model's; \"\" = model.path");
  caf::config_option_adder{options, "engine"}
      .add(c.device, "device", "cpu | cuda | auto (cuda when a CUDA device is visible, else cpu)")
      .add(c.tensor_parallel_size, "tensor-parallel-size", "GPUs per model replica")
      .add(c.block_size, "block-size", "tokens per KV-cache block: 1..256, a power of two")
      .add(c.kv_cache_dtype, "kv-cache-dtype",
           "auto (the model dtype) | float32 | bfloat16 | float16 | fp8 (cuda: e4m3, per-layer scales of 1.0); the "
           "model's dtype or fp8")
      .add(c.gpu_memory_utilization, "gpu-memory-utilization",
           "cuda: fraction of GPU memory for weights + activations + KV, (0, 1]")
      .add(c.cuda_graphs, "cuda-graphs", "cuda: decode steps replay CUDA graphs captured per padded batch size")
      .add(c.device_sampling, "device-sampling",
           "cuda: sample on the GPU (only tokens leave it) when no row of a step needs penalties or logprobs")
      .add(c.kv_cache_mib, "kv-cache-mib", "CPU backend: MiB of KV-cache blocks")
      .add(c.num_device_blocks, "num-device-blocks",
           "> 0: exact number of device KV blocks (overrides kv-cache-mib / gpu-memory-utilization)")
      .add(c.swap_space_gib, "swap-space-gib", "GiB of CPU memory for swapped-out KV blocks")
      .add(c.num_host_blocks, "num-host-blocks", ">= 0: exact number of host (swap) KV blocks")
      .add(c.max_num_seqs, "max-num-seqs", "sequences per step (seats)")
      .add(c.max_num_batched_tokens, "max-num-batched-tokens", "tokens per step (decodes + prefill chunks)")
      .add(c.max_model_len, "max-model-len", "longest prompt + output; 0 = the model's context")
      .add(c.enable_prefix_caching, "enable-prefix-caching", "reuse KV blocks of shared prompt prefixes")
      .add(c.scheduler_policy, "scheduler-policy", "fcfs | priority")
      .add(c.preemption_mode, "preemption-mode", "swap | recompute")
      .add(c.cpu_threads, "cpu-threads", "CPU backend threads; 0 = all cores");
  caf::config_option_adder{options, "speculative"}
      .add(c.speculative_method, "method", "none | draft | self | ngram")
      .add(c.draft_model, "draft-model", "draft model folder (method=draft)")
      .add(c.draft_load_format, "draft-load-format", "safetensors | dummy (random weights of the draft's config)")
      .add(c.draft_layers, "draft-layers", "method=self: the target's first N layers draft")
      .add(c.ngram_min, "ngram-min", "method=ngram: shortest n-gram looked up")
      .add(c.ngram_max, "ngram-max", "method=ngram: longest n-gram looked up")
      .add(c.num_speculative_tokens, "num-speculative-tokens", "draft tokens per step (k)")
      .add(c.adaptive_speculation, "adaptive", "adapt k per sequence to its acceptance");
  caf::config_option_adder{options, "debug"}
      .add(c.fail_executor_step, "fail-executor-step",
           "testing only: one model step in N throws (its requests fail with step_failed); 0 = never")
      .add(c.crash_executor, "crash-executor",
           "testing only: the executor actor dies in one step in N and is restarted; 0 = never")
      .add(c.fail_swap_copy, "fail-swap-copy",
           "testing only: one swap copy in N fails (the sequences are recomputed); 0 = never")
      .add(c.fail_draft, "fail-draft", "testing only: one draft proposal in N throws; 0 = never")
      .add(c.crash_draft, "crash-draft",
           "testing only: the draft actor dies in one proposal in N and is restarted; 0 = never")
      .add(c.fail_tokenizer, "fail-tokenizer",
           "testing only: one prompt encode or token decode in N throws (tokenizer_error); 0 = never");
}

engine_config engine_config_from(const caf::actor_system_config& sys_cfg) {
  engine_config c;
  const auto& s = sys_cfg.content;
  auto get = [&](auto& field, caf::string_view key) {
    if (auto value = caf::get_if<std::decay_t<decltype(field)>>(&s, key))
      field = *value;
  };
  get(c.model_path, "model.path");
  get(c.load_format, "model.load-format");
  get(c.dtype, "model.dtype");
  get(c.tokenizer_path, "model.tokenizer");
  get(c.device, "engine.device");
  get(c.tensor_parallel_size, "engine.tensor-parallel-size");
  get(c.block_size, "engine.block-size");
  get(c.kv_cache_dtype, "engine.kv-cache-dtype");
  get(c.gpu_memory_utilization, "engine.gpu-memory-utilization");
  get(c.cuda_graphs, "engine.cuda-graphs");
  get(c.device_sampling, "engine.device-sampling");
  get(c.kv_cache_mib, "engine.kv-cache-mib");
  get(c.num_device_blocks, "engine.num-device-blocks");
  get(c.swap_space_gib, "engine.swap-space-gib");
  get(c.num_host_blocks, "engine.num-host-blocks");
  get(c.max_num_seqs, "engine.max-num-seqs");
  get(c.max_num_batched_tokens, "engine.max-num-batched-tokens");
  get(c.max_model_len, "engine.max-model-len");
  get(c.enable_prefix_caching, "engine.enable-prefix-caching");
  get(c.scheduler_policy, "engine.scheduler-policy");
  get(c.preemption_mode, "engine.preemption-mode");
  get(c.cpu_threads, "engine.cpu-threads");
  get(c.speculative_method, "speculative.method");
  get(c.draft_model, "speculative.draft-model");
  get(c.draft_load_format, "speculative.draft-load-format");
  get(c.draft_layers, "speculative.draft-layers");
  get(c.ngram_min, "speculative.ngram-min");
  get(c.ngram_max, "speculative.ngram-max");
  get(c.num_speculative_tokens, "speculative.num-speculative-tokens");
  get(c.adaptive_speculation, "speculative.adaptive");
  get(c.fail_executor_step, "debug.fail-executor-step");
  get(c.crash_executor, "debug.crash-executor");
  get(c.fail_swap_copy, "debug.fail-swap-copy");
  get(c.fail_draft, "debug.fail-draft");
  get(c.crash_draft, "debug.crash-draft");
  get(c.fail_tokenizer, "debug.fail-tokenizer");
  return c;
}

namespace {
template <class T>
[[noreturn]] void reject(const char* key, const T& value, const char* allowed) {
  std::ostringstream out;
  out << "invalid value for " << key << ": '" << value << "' (allowed: " << allowed << ")";
  throw config_error(out.str());
}

void one_of(const char* key, const std::string& value, std::initializer_list<const char*> allowed) {
  for (const char* a : allowed)
    if (value == a)
      return;
  std::string list;
  for (const char* a : allowed)
    list += (list.empty() ? "" : ", ") + std::string(a);
  reject(key, value, list.c_str());
}

std::string_view view(caf::string_view s) { return {s.data(), s.size()}; }

// What a declared option's type accepts, in words (CAF's type names are terse).
std::string allowed_for(std::string_view type_name) {
  if (type_name == "int32")
    return "an integer";
  if (type_name == "real64")
    return "a number";
  if (type_name == "boolean")
    return "true or false";
  if (type_name == "string")
    return "a string (quoted in an INI file)";
  return std::string(type_name);
}

// A value as it would be written in an INI file (CAF prints 0.5 as 0.500000).
std::string written(const caf::config_value& v) {
  if (auto real = caf::get_if<caf::config_value::real>(&v)) {
    std::ostringstream out;
    out << *real;
    return out.str();
  }
  return caf::to_string(v);
}

const char* type_of(const caf::config_value& v) {
  if (caf::holds_alternative<caf::config_value::integer>(v))
    return "an integer";
  if (caf::holds_alternative<caf::config_value::real>(v))
    return "a number";
  if (caf::holds_alternative<bool>(v))
    return "a boolean";
  if (caf::holds_alternative<std::string>(v))
    return "a string";
  if (caf::holds_alternative<caf::config_value::list>(v))
    return "a list";
  if (caf::holds_alternative<caf::config_value::dictionary>(v))
    return "a category";
  return "a value of another type";
}
} // namespace

void check_settings(const caf::settings& content) {
  // The declared options are the one list of known keys and their types.
  engine_config scratch;
  caf::config_option_set options;
  add_engine_options(options, scratch);
  for (const char* category : engine_categories) {
    const caf::string_view cat(category, std::strlen(category));
    auto entry = content.find(cat);
    if (entry == content.end())
      continue;
    auto keys = caf::get_if<caf::settings>(&entry->second);
    if (keys == nullptr)
      throw config_error(std::string(category) + " must be a category ([" + category + "] in an INI file), not " +
                         caf::to_string(entry->second));
    for (const auto& [key, value] : *keys) {
      const std::string name = std::string(category) + "." + key;
      auto opt = options.qualified_name_lookup(cat, key);
      if (opt == nullptr) {
        std::string known;
        for (const auto& o : options)
          if (view(o.category()) == category)
            known += (known.empty() ? "" : ", ") + std::string(view(o.long_name()));
        throw config_error("unknown key " + name + " = " + written(value) + " (known keys of [" + category +
                           "]: " + known + ")");
      }
      // An integer is a fine value for a floating-point key (gpu-memory-utilization=1).
      if (view(opt->type_name()) == "real64" && caf::holds_alternative<caf::config_value::integer>(value))
        continue;
      if (opt->check(value)) {
        const bool integer = caf::holds_alternative<caf::config_value::integer>(value);
        throw config_error("invalid value for " + name + ": " + written(value) + " is " + type_of(value) +
                           (integer && view(opt->type_name()) == "int32" ? " out of range" : "") + " (allowed: " +
                           allowed_for(view(opt->type_name())) + ")");
      }
    }
  }
}

void validate(const engine_config& c) {
  if (c.model_path.empty())
    reject("model.path", c.model_path, "a model folder");
  one_of("model.load-format", c.load_format, {"safetensors", "dummy"});
  // Combinations a backend cannot serve (bfloat16 or float16 on the CPU) are refused by spawn_engine,
  // once engine.device=auto has been resolved.
  one_of("model.dtype", c.dtype, {"auto", "float32", "bfloat16", "float16"});
  one_of("engine.device", c.device, {"cpu", "cuda", "auto"});
  if (c.tensor_parallel_size != 1)
    reject("engine.tensor-parallel-size", c.tensor_parallel_size, "1 (tensor parallelism is not implemented yet)");
  if (c.block_size < 1 || c.block_size > 256 || (c.block_size & (c.block_size - 1)) != 0)
    reject("engine.block-size", c.block_size, "a power of two in 1..256");
  one_of("engine.kv-cache-dtype", c.kv_cache_dtype, {"auto", "float32", "bfloat16", "float16", "fp8"});
  if (!(c.gpu_memory_utilization > 0.0 && c.gpu_memory_utilization <= 1.0))
    reject("engine.gpu-memory-utilization", c.gpu_memory_utilization, "(0, 1]");
  if (c.kv_cache_mib < 1)
    reject("engine.kv-cache-mib", c.kv_cache_mib, ">= 1");
  if (c.num_device_blocks < 0)
    reject("engine.num-device-blocks", c.num_device_blocks, "0 (size from memory) or a positive count");
  if (!(c.swap_space_gib >= 0.0 && c.swap_space_gib <= 1024.0))
    reject("engine.swap-space-gib", c.swap_space_gib, "0..1024");
  if (c.num_host_blocks < -1)
    reject("engine.num-host-blocks", c.num_host_blocks, "-1 (size from swap-space-gib) or a count >= 0");
  if (c.max_num_seqs < 1 || c.max_num_seqs > 4096)
    reject("engine.max-num-seqs", c.max_num_seqs, "1..4096");
  if (c.max_num_batched_tokens < 1)
    reject("engine.max-num-batched-tokens", c.max_num_batched_tokens, ">= 1");
  if (c.max_model_len < 0)
    reject("engine.max-model-len", c.max_model_len, "0 (the model's context) or a positive length");
  one_of("engine.scheduler-policy", c.scheduler_policy, {"fcfs", "priority"});
  one_of("engine.preemption-mode", c.preemption_mode, {"swap", "recompute"});
  if (c.cpu_threads < 0 || c.cpu_threads > 1024)
    reject("engine.cpu-threads", c.cpu_threads, "0 (all cores) .. 1024");
  one_of("speculative.method", c.speculative_method, {"none", "draft", "self", "ngram"});
  one_of("speculative.draft-load-format", c.draft_load_format, {"safetensors", "dummy"});
  if (c.speculative_method == "draft" && c.draft_model.empty())
    reject("speculative.draft-model", c.draft_model, "a model folder (speculative.method=draft needs one)");
  if (c.draft_layers < 1)
    reject("speculative.draft-layers", c.draft_layers, ">= 1 (and fewer than the model's layers)");
  if (c.ngram_min < 1 || c.ngram_min > 16)
    reject("speculative.ngram-min", c.ngram_min, "1..16");
  if (c.ngram_max < c.ngram_min || c.ngram_max > 16)
    reject("speculative.ngram-max", c.ngram_max, "ngram-min..16");
  if (c.num_speculative_tokens < 1 || c.num_speculative_tokens > 16)
    reject("speculative.num-speculative-tokens", c.num_speculative_tokens, "1..16");
  const std::pair<const char*, int> faults[] = {
      {"debug.fail-executor-step", c.fail_executor_step}, {"debug.crash-executor", c.crash_executor},
      {"debug.fail-swap-copy", c.fail_swap_copy},         {"debug.fail-draft", c.fail_draft},
      {"debug.crash-draft", c.crash_draft},               {"debug.fail-tokenizer", c.fail_tokenizer}};
  for (const auto& [key, every] : faults)
    if (every < 0)
      reject(key, every, "0 (never) or N >= 1 (one use in N fails)");
}

} // namespace troupe
