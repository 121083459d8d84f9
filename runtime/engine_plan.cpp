// The engine plan: typed choices and sizes from the config, the model and the machine.
#include "runtime/engine_plan.hpp"

#include <algorithm>
#include <set>
#include <sstream>
#include <stdexcept>

#include "runtime/errors.hpp"
#include "runtime/kv_geometry.hpp"

namespace troupe::runtime {

namespace {

// speculative.draft-load-format=dummy: the draft's random weights, the same on either backend.
constexpr std::uint64_t draft_dummy_seed = 0x5eed;

int blocks_for_bytes(double bytes, std::size_t block_bytes) {
  return static_cast<int>(std::min(bytes / static_cast<double>(block_bytes), 1e9));
}

[[noreturn]] void refuse(const std::string& key, const std::string& value, const std::string& allowed) {
  throw config_error("invalid value for " + key + ": '" + value + "' (" + allowed + ")");
}

backend_kind backend_of(const engine_config& cfg, const machine_info& machine) {
  const bool have_device = machine.cuda_devices > 0;
  if (cfg.device == "cuda" && !have_device)
    refuse("engine.device", cfg.device,
           std::string(machine.built_with_cuda ? "no CUDA device is visible to this process"
                                               : "troupe was built without CUDA") +
               "; allowed here: cpu, auto");
  return cfg.device == "cuda" || (cfg.device == "auto" && have_device) ? backend_kind::cuda : backend_kind::cpu;
}

cuda_dtype dtype_of(const std::string& name) {
  return name == "float32" ? cuda_dtype::float32 : name == "float16" ? cuda_dtype::float16 : cuda_dtype::bfloat16;
}

// The cache stores the model's dtype (`auto`, or that dtype by name), or fp8.
kv_cache_dtype kv_dtype_of(const engine_config& cfg, cuda_dtype dtype) {
  const kv_cache_dtype own = own_cache_dtype(dtype);
  const std::string own_name = to_string(own);
  if (cfg.kv_cache_dtype == "fp8")
    return kv_cache_dtype::fp8_e4m3;
  if (cfg.kv_cache_dtype == "auto" || cfg.kv_cache_dtype == own_name)
    return own;
  refuse("engine.kv-cache-dtype", cfg.kv_cache_dtype,
         "allowed with model.dtype " + cfg.dtype + (cfg.dtype == "auto" ? " (= " + own_name + " on cuda)" : "") +
             ": auto, " + own_name + ", fp8; the cache stores the model's dtype or fp8");
}

speculative_method method_of(const std::string& name) {
  return name == "draft"   ? speculative_method::draft
         : name == "self"  ? speculative_method::self
         : name == "ngram" ? speculative_method::ngram
                           : speculative_method::none;
}

fault_plan faults_of(const engine_config& cfg) {
  fault_plan plan;
  plan[fault_point::executor_step] = cfg.fail_executor_step;
  plan[fault_point::executor_crash] = cfg.crash_executor;
  plan[fault_point::swap_copy] = cfg.fail_swap_copy;
  plan[fault_point::draft] = cfg.fail_draft;
  plan[fault_point::draft_crash] = cfg.crash_draft;
  plan[fault_point::tokenizer] = cfg.fail_tokenizer;
  return plan;
}

// Each CUDA rank's GPU: engine.tensor-parallel-devices, or one GPU a rank from device 0.
std::vector<int> rank_devices(const engine_config& cfg, const machine_info& machine) {
  const int n = cfg.tensor_parallel_size;
  const std::string size = std::to_string(n);
  const std::string visible = std::to_string(machine.cuda_devices) + " visible";
  if (n > 8)
    refuse("engine.tensor-parallel-size", size, "allowed on the cuda backend: 1..8 (one host's GPUs)");
  std::vector<int> devices;
  if (cfg.tensor_parallel_devices.empty()) {
    if (n > machine.cuda_devices)
      refuse("engine.tensor-parallel-size", size,
             size + " ranks need " + size + " GPUs, " + visible +
                 "; engine.tensor-parallel-devices may place ranks on fewer GPUs, for tests");
    for (int r = 0; r < n; ++r)
      devices.push_back(r);
    return devices;
  }
  std::string item;
  std::istringstream in(cfg.tensor_parallel_devices);
  while (std::getline(in, item, ',')) {
    std::size_t used = 0;
    int d = -1;
    try {
      d = std::stoi(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != item.size() || d < 0)
      refuse("engine.tensor-parallel-devices", cfg.tensor_parallel_devices,
             "allowed: GPU numbers separated by commas, e.g. 0,1");
    if (d >= machine.cuda_devices)
      refuse("engine.tensor-parallel-devices", cfg.tensor_parallel_devices,
             "GPU " + std::to_string(d) + " does not exist, " + visible);
    devices.push_back(d);
  }
  if (static_cast<int>(devices.size()) != n)
    refuse("engine.tensor-parallel-devices", cfg.tensor_parallel_devices,
           "names " + std::to_string(devices.size()) + " GPUs for engine.tensor-parallel-size=" + size);
  if (std::set<int>(devices.begin(), devices.end()).size() < devices.size() && cfg.num_device_blocks <= 0)
    refuse("engine.tensor-parallel-devices", cfg.tensor_parallel_devices,
           "ranks that share a GPU need engine.num-device-blocks: their pools cannot be sized from memory");
  return devices;
}

} // namespace

std::vector<rank_slice> head_slices(const model_config& model, int ranks, int block_size, kv_cache_dtype kv) {
  std::vector<rank_slice> slices;
  for (const auto& shape : shard_shapes(model, ranks))
    slices.push_back({shape, kv_block_bytes(model, block_size, kv, shape.kv_heads)});
  return slices;
}

engine_plan plan_engine(const engine_config& cfg, const model_config& model, const machine_info& machine) {
  validate(cfg);
  engine_plan p;
  p.backend = backend_of(cfg, machine);
  const bool cuda = p.backend == backend_kind::cuda;
  p.weights = cfg.load_format == "dummy" ? weight_source::dummy : weight_source::safetensors;
  if (cuda) {
    p.devices = rank_devices(cfg, machine);
    p.dtype = dtype_of(cfg.dtype);
    p.kv = kv_dtype_of(cfg, p.dtype);
  } else {
    if (!cfg.tensor_parallel_devices.empty())
      refuse("engine.tensor-parallel-devices", cfg.tensor_parallel_devices,
             "allowed on the CPU backend: \"\"; its ranks are threads, not GPUs");
    if (cfg.dtype != "auto" && cfg.dtype != "float32")
      refuse("model.dtype", cfg.dtype,
             "allowed on the CPU backend: auto, float32; the CPU backend computes in fp32, " + cfg.dtype +
                 " needs engine.device=cuda");
    if (cfg.kv_cache_dtype != "auto" && cfg.kv_cache_dtype != "float32")
      refuse("engine.kv-cache-dtype", cfg.kv_cache_dtype, "allowed on the CPU backend: auto, float32");
    // load-format=dummy: the CUDA runner makes weights of the config's shapes on the GPU.
    if (p.weights == weight_source::dummy)
      refuse("model.load-format", cfg.load_format,
             "allowed on the CPU backend: safetensors; dummy weights are made on the GPU and need engine.device=cuda");
  }

  p.quantize_fp8 = cfg.quantization == "fp8";
  if (p.quantize_fp8 && model.quantization && model.quantization->scheme == quantization_scheme::awq)
    refuse("model.quantization", cfg.quantization,
           "allowed for this checkpoint: none; it is quantized already (" + to_string(*model.quantization) + ")");
  // Its experts would stay unquantized beside FP8 attention and shared expert: refused rather than half done.
  if (p.quantize_fp8 && model.moe)
    refuse(
        "model.quantization", cfg.quantization,
        "allowed for a mixture-of-experts model (" + model.model_type + "): none; its experts are not quantized yet");
  p.fp8_weights = p.quantize_fp8 || (model.quantization && model.quantization->scheme != quantization_scheme::awq);
  p.int4_weights = model.quantization && model.quantization->scheme == quantization_scheme::awq;

  p.max_model_len = cfg.max_model_len > 0 ? cfg.max_model_len : model.max_position_embeddings;
  if (p.max_model_len > model.max_position_embeddings)
    refuse("engine.max-model-len", std::to_string(cfg.max_model_len),
           "allowed: up to the model's context, " + std::to_string(model.max_position_embeddings));

  // KV geometry: one block = K and V of every layer for block-size tokens.
  p.block_size = cfg.block_size;
  p.blocks_per_seq = blocks_for_tokens(p.max_model_len, p.block_size);
  p.sliding_window = model.every_layer_window();
  p.kv_block_bytes = kv_block_bytes(model, p.block_size, p.kv);
  p.ranks = head_slices(model, cfg.tensor_parallel_size, p.block_size, p.kv);
  p.host_blocks = cfg.num_host_blocks >= 0 ? cfg.num_host_blocks
                                           : blocks_for_bytes(cfg.swap_space_gib * 1073741824.0, p.kv_block_bytes);
  p.cpu_kv_bytes = static_cast<std::size_t>(cfg.kv_cache_mib) << 20;
  if (cuda) {
    // Sized from memory unless num-device-blocks says otherwise, and never beyond what
    // max-num-seqs full-length sequences need twice over (the second half serves the
    // prefix cache): a tiny model would otherwise get millions of blocks.
    p.device_blocks = cfg.num_device_blocks;
    p.max_device_blocks =
        static_cast<int>(std::min<long long>(2LL * cfg.max_num_seqs * p.blocks_per_seq, 1000000000LL));
  } else {
    p.device_blocks = cfg.num_device_blocks > 0
                          ? cfg.num_device_blocks
                          : blocks_for_bytes(static_cast<double>(p.cpu_kv_bytes), p.kv_block_bytes);
    if (p.device_blocks < 1)
      throw config_error("the KV cache gets no block: raise engine.kv-cache-mib or engine.num-device-blocks");
  }

  p.scheduling.max_num_seqs = cfg.max_num_seqs;
  p.scheduling.max_num_batched_tokens = cfg.max_num_batched_tokens;
  p.scheduling.max_prefill_tokens_with_decodes = cfg.max_prefill_tokens_with_decodes;
  p.scheduling.policy = cfg.scheduler_policy == "priority" ? scheduling_policy::priority : scheduling_policy::fcfs;
  p.scheduling.preemption = cfg.preemption_mode == "recompute" ? preemption_mode::recompute : preemption_mode::swap;
  p.prefix_caching = cfg.enable_prefix_caching;

  auto& spec = p.speculation;
  spec.method = method_of(cfg.speculative_method);
  if (spec.method != speculative_method::none) {
    spec.k = cfg.num_speculative_tokens;
    spec.adaptive = cfg.adaptive_speculation;
    spec.ngram_min = cfg.ngram_min;
    spec.ngram_max = cfg.ngram_max;
    spec.draft_model = cfg.draft_model;
    spec.draft_dummy = cfg.draft_load_format == "dummy";
  }
  if (spec.method == speculative_method::self) {
    if (p.weights == weight_source::dummy)
      refuse("speculative.method", cfg.speculative_method,
             "allowed with model.load-format=dummy: none, draft, ngram; self-speculation copies the model's first "
             "layers from host weights");
    if (cfg.draft_layers >= model.num_hidden_layers)
      refuse("speculative.draft-layers", std::to_string(cfg.draft_layers),
             "allowed: 1.." + std::to_string(model.num_hidden_layers - 1) + ", fewer than the model's " +
                 std::to_string(model.num_hidden_layers) + " layers");
    spec.draft_layers = cfg.draft_layers;
  }
  // Verification steps carry k + 1 tokens per sequence; the activations must hold them.
  p.step_tokens = std::max(cfg.max_num_batched_tokens, spec.k > 0 ? cfg.max_num_seqs * (spec.k + 1) : 0);

  p.gpu_memory_utilization = cfg.gpu_memory_utilization;
  p.cuda_graphs = cfg.cuda_graphs;
  p.device_sampling = cfg.device_sampling;
  // Speculation's drafts change with the batch (adaptive k weighs the step's cost; a model draft
  // is sampled against its own q), so the emitted tokens would too.
  if (cfg.deterministic && spec.method != speculative_method::none)
    refuse("speculative.method", cfg.speculative_method,
           "allowed with engine.deterministic=true: none; how many drafts a step verifies depends on the batch");
  p.deterministic = cfg.deterministic;
  p.cpu_threads = cfg.cpu_threads > 0 ? static_cast<std::size_t>(cfg.cpu_threads) : std::max(1u, machine.cpu_cores);
  p.faults = faults_of(cfg);
  return p;
}

cuda_runner_options engine_plan::cuda_options() const {
  cuda_runner_options opt;
  opt.dtype = dtype;
  opt.kv_dtype = kv;
  opt.device = devices.empty() ? 0 : devices.front();
  opt.block_size = block_size;
  opt.num_blocks = device_blocks;
  opt.max_blocks = max_device_blocks;
  opt.gpu_memory_utilization = gpu_memory_utilization;
  opt.num_host_blocks = host_blocks;
  opt.max_num_batched_tokens = step_tokens;
  opt.max_num_seqs = scheduling.max_num_seqs;
  opt.max_blocks_per_seq = blocks_per_seq;
  opt.dummy_weights = weights == weight_source::dummy;
  opt.cuda_graphs = cuda_graphs;
  opt.device_sampling = device_sampling;
  opt.deterministic = deterministic;
  opt.fp8_weights = fp8_weights;
  opt.int4_weights = int4_weights;
  return opt;
}

int engine_plan::context_that_fits(int cache_blocks) const {
  // The positions a step may still read or write: window - 1 before its first token, up to a whole step's tokens
  // from there, and a block more where the window starts inside one.
  if (sliding_window > 0 &&
      cache_blocks >= blocks_for_tokens(sliding_window - 1 + scheduling.max_num_batched_tokens, block_size) + 1)
    return max_model_len;
  return static_cast<int>(std::min<long long>(max_model_len, static_cast<long long>(cache_blocks) * block_size));
}

draft_runner_plan plan_draft(const engine_plan& plan, const model_config& target, const model_config& draft,
                             const machine_info& machine) {
  const auto& spec = plan.speculation;
  if (draft.vocab_size != target.vocab_size)
    throw config_error("speculative.draft-model '" + spec.draft_model + "' has a vocabulary of " +
                       std::to_string(draft.vocab_size) + " tokens; the model's has " +
                       std::to_string(target.vocab_size) + " (they must share a tokenizer)");
  draft_runner_plan d;
  d.cuda.block_size = plan.block_size;
  d.cuda.dummy_seed = draft_dummy_seed;
  if (plan.backend == backend_kind::cpu) {
    d.blocks = std::max(1, blocks_for_bytes(static_cast<double>(plan.cpu_kv_bytes),
                                            kv_block_bytes(draft, plan.block_size, kv_cache_dtype::float32)));
    return d;
  }
  const int seats = plan.scheduling.max_num_seqs;
  const int blocks_per_seq = blocks_for_tokens(plan.max_model_len + spec.k, plan.block_size);
  const std::size_t tenth = machine.device_memory_bytes / 10;
  const long long wanted = static_cast<long long>(seats) * blocks_per_seq;
  d.blocks = static_cast<int>(
      std::max(1LL, std::min<long long>(wanted, tenth / kv_block_bytes(draft, plan.block_size, plan.kv))));
  // Catch-up steps are split to this size (runtime::model_draft); single-token steps carry a token per seat.
  d.step_tokens = std::max(plan.scheduling.max_num_batched_tokens, seats);
  auto& opt = d.cuda;
  opt.dtype = plan.dtype;
  opt.kv_dtype = plan.kv;
  opt.num_blocks = d.blocks;
  opt.max_num_batched_tokens = d.step_tokens;
  opt.max_num_seqs = seats;
  opt.max_blocks_per_seq = blocks_per_seq;
  opt.cuda_graphs = plan.cuda_graphs;
  opt.device_sampling = false; // the draft samples on the host: it sends its distribution along
  opt.dummy_weights = spec.method == speculative_method::draft && spec.draft_dummy;
  return d;
}

std::string_view to_string(backend_kind b) {
  return b == backend_kind::cuda ? "cuda" : "cpu";
}

std::string_view to_string(speculative_method m) {
  switch (m) {
    case speculative_method::draft:
      return "draft";
    case speculative_method::self:
      return "self";
    case speculative_method::ngram:
      return "ngram";
    default:
      return "none";
  }
}

} // namespace troupe::runtime
