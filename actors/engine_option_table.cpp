// The engine's options, each declared once: key, field, documentation, rule.
#include "actors/engine_option_table.hpp"

#include <array>
#include <cstring>
#include <sstream>

namespace troupe::actors {

namespace {

using c = engine_config;

constexpr std::string_view load_formats[] = {"safetensors", "dummy"};
constexpr std::string_view dtypes[] = {"auto", "float32", "bfloat16", "float16"};
constexpr std::string_view quantizations[] = {"none", "fp8"};
constexpr std::string_view devices[] = {"cpu", "cuda", "auto"};
constexpr std::string_view kv_dtypes[] = {"auto", "float32", "bfloat16", "float16", "fp8"};
constexpr std::string_view policies[] = {"fcfs", "priority"};
constexpr std::string_view preemption_modes[] = {"swap", "recompute"};
constexpr std::string_view speculative_methods[] = {"none", "draft", "self", "ngram"};

bool power_of_two_block(const c& cfg) {
  return (cfg.block_size & (cfg.block_size - 1)) == 0;
}
bool model_named(const c& cfg) {
  return !cfg.model_path.empty();
}
bool draft_named(const c& cfg) {
  return cfg.speculative_method != "draft" || !cfg.draft_model.empty();
}
bool ngram_ordered(const c& cfg) {
  return cfg.ngram_max >= cfg.ngram_min;
}

constexpr option_rule any{};
constexpr option_rule fault_rule{.min = 0, .allowed = "0 (never) or N >= 1 (one use in N fails)"};

const engine_option table[] = {
    {"model",
     "path",
     &c::model_path,
     "Hugging Face model folder (config.json, model.safetensors, tokenizer.json); a relative path is relative to "
     "the current directory, not to the INI file",
     {.holds = model_named, .allowed = "a model folder"}},
    {"model",
     "load-format",
     &c::load_format,
     "weight file format: safetensors | dummy (cuda: random weights of config.json's shapes made on the GPU, for "
     "benchmarks)",
     {.choices = load_formats}},
    {"model",
     "dtype",
     &c::dtype,
     "weight dtype: auto | float32 | bfloat16 | float16 (auto: bfloat16 on cuda, float32 on cpu; the CPU backend "
     "computes in fp32)",
     {.choices = dtypes}},
    {"model",
     "quantization",
     &c::quantization,
     "none | fp8: the linear layers quantized to FP8 e4m3 at load with a scale per output row (cuda: FP8 "
     "weights and kernels; cpu: fp32 arithmetic on the FP8 values). An FP8 checkpoint is FP8 either way",
     {.choices = quantizations}},
    {"model", "tokenizer", &c::tokenizer_path,
     "folder with tokenizer.json when not the model's (\"\" = path), e.g. a tokenizer lent to a dummy model", any},

    {"engine",
     "device",
     &c::device,
     "backend: cpu | cuda | auto (cuda when a CUDA device is visible)",
     {.choices = devices}},
    {"engine",
     "tensor-parallel-size",
     &c::tensor_parallel_size,
     "ranks per model replica: cpu, threads of one process; cuda, one GPU each (engine.tensor-parallel-devices)",
     {.min = 1, .max = 64, .allowed = "1..64 (cuda: 1..8)"}},
    {"engine", "tensor-parallel-devices", &c::tensor_parallel_devices,
     "cuda: the GPU of each tensor-parallel rank, comma-separated (\"\" = 0..N-1); a GPU may repeat, its ranks "
     "then meet through peer loads on it (for tests; needs engine.num-device-blocks)",
     any},
    {"engine",
     "block-size",
     &c::block_size,
     "tokens per KV-cache block: a power of two in 1..256",
     {.min = 1, .max = 256, .holds = power_of_two_block, .allowed = "a power of two in 1..256"}},
    {"engine",
     "kv-cache-dtype",
     &c::kv_cache_dtype,
     "KV-cache element type: auto (the model dtype) | float32 | bfloat16 | float16 | fp8 (cuda: e4m3, scales 1.0); "
     "the model's dtype or fp8",
     {.choices = kv_dtypes}},
    {"engine",
     "gpu-memory-utilization",
     &c::gpu_memory_utilization,
     "cuda: fraction of GPU memory for weights + activations + KV cache, (0, 1]",
     {.min = 1e-9, .max = 1, .allowed = "(0, 1]"}},
    {"engine", "cuda-graphs", &c::cuda_graphs,
     "cuda: decode steps replay a CUDA graph captured per padded batch size (1, 2, 4, 8, 12, 16, 24, 32, 48, ...)",
     any},
    {"engine", "device-sampling", &c::device_sampling,
     "cuda: sample on the GPU, penalties and logprobs included (only tokens and asked-for logprobs come back), "
     "unless a step scores prompt tokens or verifies drafts",
     any},
    {"engine", "deterministic", &c::deterministic,
     "batch-invariant decoding: a seeded or greedy request gets the same tokens and logprobs, bit for bit, whatever "
     "else is in its batch, at any row, chunked or prefix-cached (cuda: fixed GEMM algorithms, attention split by "
     "context alone; slower, see docs/performance.md); needs speculative.method=none",
     any},
    {"engine",
     "kv-cache-mib",
     &c::kv_cache_mib,
     "CPU backend: MiB of device-tier KV blocks, >= 1",
     {.min = 1, .allowed = ">= 1"}},
    {"engine",
     "num-device-blocks",
     &c::num_device_blocks,
     "> 0: exact number of device KV blocks, overriding kv-cache-mib / gpu-memory-utilization; 0 = size from memory",
     {.min = 0, .allowed = "0 (size from memory) or a positive count"}},
    {"engine",
     "swap-space-gib",
     &c::swap_space_gib,
     "GiB of host memory for swapped-out KV blocks, 0..1024",
     {.min = 0, .max = 1024, .allowed = "0..1024"}},
    {"engine",
     "num-host-blocks",
     &c::num_host_blocks,
     ">= 0: exact number of host (swap) KV blocks, overriding swap-space-gib; -1 = size from memory",
     {.min = -1, .allowed = "-1 (size from swap-space-gib) or a count >= 0"}},
    {"engine",
     "max-num-seqs",
     &c::max_num_seqs,
     "sequences scheduled per step (seats), 1..4096",
     {.min = 1, .max = 4096, .allowed = "1..4096"}},
    {"engine",
     "max-num-batched-tokens",
     &c::max_num_batched_tokens,
     "tokens per step (decodes + prefill chunks), >= 1",
     {.min = 1, .allowed = ">= 1"}},
    {"engine",
     "max-prefill-tokens-with-decodes",
     &c::max_prefill_tokens_with_decodes,
     "prefill tokens in a step that also decodes, at most (bounds the stall a long prompt gives decoding "
     "sequences); 0 = prefills take the rest of max-num-batched-tokens",
     {.min = 0, .allowed = "0 (off) or >= 1"}},
    {"engine",
     "max-model-len",
     &c::max_model_len,
     "longest prompt + output; 0 = the model's context (max_position_embeddings)",
     {.min = 0, .allowed = "0 (the model's context) or a positive length"}},
    {"engine", "enable-prefix-caching", &c::enable_prefix_caching, "reuse the KV blocks of shared prompt prefixes",
     any},
    {"engine",
     "scheduler-policy",
     &c::scheduler_policy,
     "order of admission and preemption: fcfs | priority",
     {.choices = policies}},
    {"engine",
     "preemption-mode",
     &c::preemption_mode,
     "what a preempted sequence loses: swap (KV to host memory) | recompute (KV freed)",
     {.choices = preemption_modes}},
    {"engine",
     "cpu-threads",
     &c::cpu_threads,
     "CPU backend threads, 0..1024; 0 = all cores",
     {.min = 0, .max = 1024, .allowed = "0 (all cores) .. 1024"}},

    {"speculative",
     "method",
     &c::speculative_method,
     "speculative decoding: none | draft (a draft model) | self (the model's first layers) | ngram (prompt lookup)",
     {.choices = speculative_methods}},
    {"speculative",
     "draft-model",
     &c::draft_model,
     "draft model folder (for method=draft; it must share the model's vocabulary)",
     {.holds = draft_named, .allowed = "a model folder (speculative.method=draft needs one)"}},
    {"speculative",
     "draft-load-format",
     &c::draft_load_format,
     "how the draft's weights load: safetensors | dummy (random weights of the draft's config.json)",
     {.choices = load_formats}},
    {"speculative",
     "draft-layers",
     &c::draft_layers,
     "method=self: the model's first N layers (plus its final norm and LM head) draft",
     {.min = 1, .allowed = ">= 1 (and fewer than the model's layers)"}},
    {"speculative",
     "ngram-min",
     &c::ngram_min,
     "method=ngram: the shortest n-gram looked up, 1..16",
     {.min = 1, .max = 16, .allowed = "1..16"}},
    {"speculative",
     "ngram-max",
     &c::ngram_max,
     "method=ngram: the longest n-gram looked up (tried first), ngram-min..16",
     {.max = 16, .holds = ngram_ordered, .allowed = "ngram-min..16"}},
    {"speculative",
     "num-speculative-tokens",
     &c::num_speculative_tokens,
     "draft tokens proposed per step at most (k), 1..16; a request may lower it (num_speculative_tokens)",
     {.min = 1, .max = 16, .allowed = "1..16"}},
    {"speculative", "adaptive", &c::adaptive_speculation,
     "adapt each sequence's k to its recent acceptance (backs off when drafts are rejected)", any},

    {"debug", "fail-executor-step", &c::fail_executor_step,
     "a model step throws: the requests in it end with error step_failed, the others go on", fault_rule},
    {"debug", "crash-executor", &c::crash_executor,
     "the executor actor dies in a step: it is restarted on the same model and KV cache; the step's requests fail",
     fault_rule},
    {"debug", "fail-swap-copy", &c::fail_swap_copy,
     "a swap copy (device->host or host->device) fails: the sequences are recomputed instead, nobody fails",
     fault_rule},
    {"debug", "fail-draft", &c::fail_draft, "a draft proposal throws: the step runs without speculation", fault_rule},
    {"debug", "crash-draft", &c::crash_draft,
     "the draft actor dies in a proposal: it is restarted and its sequences start their drafts afresh", fault_rule},
    {"debug", "fail-tokenizer", &c::fail_tokenizer,
     "a prompt's encode or an output token's decode throws: that request ends with error tokenizer_error", fault_rule},
};

} // namespace

std::span<const engine_option> engine_options() {
  return table;
}

std::string_view category_doc(std::string_view category) {
  if (category == "debug")
    return "Testing only: faults made on purpose, to see the engine recover. 0 = never; N = one use in N fails.";
  return {};
}

std::string qualified_name(const engine_option& option) {
  return std::string(option.category) + "." + option.key;
}

std::string ini_value(const engine_option& option, const engine_config& cfg) {
  std::ostringstream out;
  std::visit(
      [&](auto member) {
        const auto& value = cfg.*member;
        using T = std::decay_t<decltype(value)>;
        if constexpr (std::is_same_v<T, std::string>) {
          out << '"';
          for (char ch : value)
            out << (ch == '"' || ch == '\\' ? "\\" : "") << ch;
          out << '"';
        } else if constexpr (std::is_same_v<T, bool>)
          out << (value ? "true" : "false");
        else
          out << value;
      },
      option.field);
  return out.str();
}

} // namespace troupe::actors
