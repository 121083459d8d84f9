// The engine actor and spawn_engine: loads the model, sizes the KV cache,
// spawns executor, kv_cache and scheduler, and then spawns one request actor
// per generate. It is the only handle a client or a host application needs.
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <thread>
#include <unordered_map>

#include "actors/draft.hpp"
#include "actors/executor.hpp"
#include "actors/kv_cache.hpp"
#include "actors/request.hpp"
#include "actors/scheduler.hpp"
#include "runtime/cpu/cpu_model_runner.hpp"
#include "runtime/cuda_devices.hpp"
#include "runtime/cuda/cuda_runner_factory.hpp"
#include "runtime/dummy_weights.hpp"
#include "runtime/fault_injector.hpp"
#include "runtime/generation_config.hpp"
#include "runtime/model_draft.hpp"
#include "runtime/ngram_draft.hpp"
#include "runtime/model_config.hpp"
#include "runtime/model_weights.hpp"
#include "runtime/safetensors.hpp"
#include "troupe/engine.hpp"

namespace troupe {

namespace {

// What the engine supervises: its actors, and what a restarted one takes over.
struct engine_parts {
  scheduler_actor scheduler;
  kv_cache_actor kv;
  executor_actor executor;
  draft_actor draft;                                        // null: no speculation
  std::shared_ptr<runtime::model_runner> runner;            // outlives the executor: weights and KV cache
  std::shared_ptr<runtime::draft_proposer> proposer;        // outlives the draft actor
  std::shared_ptr<runtime::fault_injector> faults;          // [debug] faults, or null
};

struct engine_state {
  std::shared_ptr<const actors::request_context> ctx;
  engine_parts parts;
  request_id next_id = 1;
  std::unordered_map<request_id, request_actor> requests;     // for cancel
  std::unordered_map<caf::actor_addr, request_id> request_of; // a linked actor's exit: which request it was
  std::shared_ptr<spdlog::logger> log;
  static inline const char* name = "engine";
};

using engine_pointer = engine_actor::stateful_pointer<engine_state>;

// A linked part ended. The executor and the draft are restarted: the state that
// matters (model runner, KV cache, draft proposer) lives outside them, and the
// scheduler fails only the requests of the step that was lost. The scheduler
// and the KV cache hold every sequence's state: without them the engine cannot
// go on, so it stops too (its requests tell their clients). Request actors end
// on their own; their sinks have heard why.
void on_part_exit(engine_pointer self, const caf::exit_msg& msg) {
  auto& st = self->state;
  auto& parts = st.parts;
  if (msg.source == parts.executor.address()) {
    st.log->error("engine: the executor stopped ({}); restarting it", to_string(msg.reason));
    parts.executor = actors::spawn_executor(self->system(), parts.runner, parts.faults);
    self->link_to(parts.executor);
    self->send(parts.scheduler, restart_atom::value, parts.executor);
  } else if (parts.draft && msg.source == parts.draft.address()) {
    st.log->error("engine: the draft stopped ({}); restarting it", to_string(msg.reason));
    parts.draft = actors::spawn_draft(self->system(), parts.proposer, parts.faults, /*restarted=*/true);
    self->link_to(parts.draft);
    self->send(parts.scheduler, restart_atom::value, parts.draft);
  } else if (msg.source == parts.scheduler.address() || msg.source == parts.kv.address()) {
    st.log->error("engine: the {} stopped ({}); the engine stops",
                  msg.source == parts.kv.address() ? "KV cache" : "scheduler", to_string(msg.reason));
    self->quit(msg.reason);
  } else if (auto it = st.request_of.find(msg.source); it != st.request_of.end()) {
    // A request actor ended: finished, or failed and said so to its sink (even when it died: its
    // exit functor did, and aborted its sequence). Its link is how the engine learns it is gone.
    st.requests.erase(it->second);
    st.request_of.erase(it);
  } else if (msg.source == self->address() || msg.reason != caf::exit_reason::normal) {
    self->quit(msg.reason); // a shutdown sent to the engine, or a linked actor of its host that failed
  }
}

engine_actor::behavior_type engine_behavior(engine_pointer self, std::shared_ptr<const actors::request_context> ctx,
                                            engine_parts parts) {
  auto& st = self->state;
  st.ctx = std::move(ctx);
  st.parts = std::move(parts);
  st.log = spdlog::get("engine");
  // The engine's parts live and die with it; it supervises them (on_part_exit).
  self->link_to(st.parts.scheduler);
  self->link_to(st.parts.kv);
  self->link_to(st.parts.executor);
  if (st.parts.draft)
    self->link_to(st.parts.draft);
  self->set_exit_handler([self](caf::exit_msg& msg) { on_part_exit(self, msg); });
  return {
      [self](generate_atom, request_spec& spec, sink_actor& sink) -> request_id {
        auto& st = self->state;
        auto id = st.next_id++;
        auto req = actors::spawn_request(self->system(), id, std::move(spec), std::move(sink), st.ctx);
        self->link_to(req);
        st.request_of.emplace(req.address(), id);
        st.requests.emplace(id, std::move(req));
        return id;
      },
      [self](cancel_atom, request_id id) {
        auto it = self->state.requests.find(id);
        if (it != self->state.requests.end())
          self->send(it->second, cancel_atom::value);
      },
      [self](info_atom) -> model_info {
        const auto& ctx = *self->state.ctx;
        return {ctx.model_name, ctx.max_model_len, ctx.vocab_size, std::string(runtime::to_string(ctx.chat))};
      },
      [self](tokenize_atom, const std::string& text, bool add_special) -> caf::result<std::vector<token_id>> {
        try {
          return self->state.ctx->tokenizer->encode(text, add_special);
        } catch (const std::exception& e) {
          return caf::make_error(caf::sec::invalid_argument, std::string("cannot tokenize: ") + e.what());
        }
      },
      [self](detok_atom, const std::vector<token_id>& ids) -> caf::result<std::string> {
        const auto& ctx = *self->state.ctx;
        for (auto id : ids)
          if (id < 0 || id >= ctx.vocab_size)
            return caf::make_error(caf::sec::invalid_argument,
                                   "token id " + std::to_string(id) + " is outside the vocabulary (0.." +
                                       std::to_string(ctx.vocab_size - 1) + ")");
        return ctx.tokenizer->decode(ids, true);
      },
      [self](stats_atom) -> caf::result<engine_stats> {
        auto rp = self->make_response_promise<engine_stats>();
        self->request(self->state.parts.scheduler, caf::infinite, stats_atom::value)
            .then([rp](engine_stats& s) mutable { rp.deliver(std::move(s)); },
                  [rp](caf::error& e) mutable { rp.deliver(std::move(e)); });
        return rp;
      },
  };
}

runtime::fault_plan fault_plan_of(const engine_config& cfg) {
  using runtime::fault_point;
  runtime::fault_plan plan;
  plan[fault_point::executor_step] = cfg.fail_executor_step;
  plan[fault_point::executor_crash] = cfg.crash_executor;
  plan[fault_point::swap_copy] = cfg.fail_swap_copy;
  plan[fault_point::draft] = cfg.fail_draft;
  plan[fault_point::draft_crash] = cfg.crash_draft;
  plan[fault_point::tokenizer] = cfg.fail_tokenizer;
  return plan;
}

int blocks_for_bytes(double bytes, std::size_t block_bytes) {
  return static_cast<int>(std::min(bytes / static_cast<double>(block_bytes), 1e9));
}

// The backend, weight dtype and KV-cache dtype that `auto` and the explicit values resolve
// to on this machine; combinations a backend cannot serve are refused here, by key.
struct backend_choice {
  bool cuda = false;
  runtime::cuda_dtype dtype = runtime::cuda_dtype::float32;
  runtime::kv_cache_dtype kv = runtime::kv_cache_dtype::float32;
};

backend_choice resolve_backend(const engine_config& cfg) {
  backend_choice b;
  const bool have_device = runtime::cuda_device_count() > 0;
  b.cuda = cfg.device == "cuda" || (cfg.device == "auto" && have_device);
  if (cfg.device == "cuda" && !have_device) {
#ifdef TROUPE_WITH_CUDA
    const char* why = "no CUDA device is visible to this process";
#else
    const char* why = "troupe was built without CUDA";
#endif
    throw config_error(std::string("invalid value for engine.device: 'cuda' (") + why + "; allowed here: cpu, auto)");
  }
  if (!b.cuda) {
    if (cfg.dtype != "auto" && cfg.dtype != "float32")
      throw config_error("invalid value for model.dtype: '" + cfg.dtype +
                         "' (allowed on the CPU backend: auto, float32; the CPU backend computes in fp32, " +
                         cfg.dtype + " needs engine.device=cuda)");
    if (cfg.kv_cache_dtype != "auto" && cfg.kv_cache_dtype != "float32")
      throw config_error("invalid value for engine.kv-cache-dtype: '" + cfg.kv_cache_dtype +
                         "' (allowed on the CPU backend: auto, float32)");
    return b;
  }
  b.dtype = cfg.dtype == "float32"   ? runtime::cuda_dtype::float32
            : cfg.dtype == "float16" ? runtime::cuda_dtype::float16
                                     : runtime::cuda_dtype::bfloat16;
  // The cache stores the model's dtype (`auto`, or that dtype by name), or fp8.
  const runtime::kv_cache_dtype own = runtime::own_cache_dtype(b.dtype);
  const std::string own_name = runtime::to_string(own);
  if (cfg.kv_cache_dtype == "fp8")
    b.kv = runtime::kv_cache_dtype::fp8_e4m3;
  else if (cfg.kv_cache_dtype == "auto" || cfg.kv_cache_dtype == own_name)
    b.kv = own;
  else
    throw config_error("invalid value for engine.kv-cache-dtype: '" + cfg.kv_cache_dtype +
                       "' (allowed with model.dtype " + cfg.dtype +
                       (cfg.dtype == "auto" ? " (= " + own_name + " on cuda)" : std::string()) + ": auto, " + own_name +
                       ", fp8; the cache stores the model's dtype or fp8)");
  return b;
}
std::size_t mib(std::size_t bytes) { return bytes >> 20; }

// speculative.draft-load-format=dummy: the draft's random weights, the same on either backend's path.
constexpr std::uint64_t draft_dummy_seed = 0x5eed;

// speculative.method's proposer, or null for none. Draft models have their own KV pool: on
// the CPU backend engine.kv-cache-mib of it; on CUDA, on the target's GPU in its dtypes,
// enough for every seat at the longest context, but at most a tenth of the device's memory
// (the target's pool, sized afterwards, takes what the utilization target leaves).
std::unique_ptr<runtime::draft_proposer> make_draft_proposer(const engine_config& cfg, const backend_choice& backend,
                                                             int max_model_len, const runtime::model_config& target,
                                                             const runtime::model_weights& target_weights,
                                                             spdlog::logger& log) {
  if (cfg.speculative_method == "none")
    return nullptr;
  if (cfg.speculative_method == "ngram") {
    log.info("engine: speculative decoding by n-gram lookup (n {}..{}), k = {}{}", cfg.ngram_min, cfg.ngram_max,
             cfg.num_speculative_tokens, cfg.adaptive_speculation ? ", adaptive" : "");
    return std::make_unique<runtime::ngram_draft>(cfg.ngram_min, cfg.ngram_max);
  }
  runtime::model_config draft_cfg;
  runtime::model_weights draft_weights;
  if (cfg.speculative_method == "self") {
    if (cfg.draft_layers >= target.num_hidden_layers)
      throw config_error("invalid value for speculative.draft-layers: '" + std::to_string(cfg.draft_layers) +
                         "' (allowed: 1.." + std::to_string(target.num_hidden_layers - 1) + ", fewer than the model's " +
                         std::to_string(target.num_hidden_layers) + " layers)");
    draft_cfg = runtime::first_layers_config(target, cfg.draft_layers);
    draft_weights = runtime::first_layers_weights(target_weights, cfg.draft_layers);
  } else {
    draft_cfg = runtime::load_model_config(cfg.draft_model);
    if (draft_cfg.vocab_size != target.vocab_size)
      throw config_error("speculative.draft-model '" + cfg.draft_model + "' has a vocabulary of " +
                         std::to_string(draft_cfg.vocab_size) + " tokens; the model's has " +
                         std::to_string(target.vocab_size) + " (they must share a tokenizer)");
    if (cfg.draft_load_format != "dummy")
      draft_weights = runtime::load_model_weights(runtime::tensor_store::open(cfg.draft_model), draft_cfg);
    else if (!backend.cuda) // on CUDA the runner makes them on the GPU
      draft_weights = runtime::dummy_weights(draft_cfg, draft_dummy_seed);
  }
  const char* what = cfg.speculative_method == "self" ? "the model's first layers" : cfg.draft_model.c_str();
  if (backend.cuda) {
    const int blocks_per_seq = (max_model_len + cfg.num_speculative_tokens + cfg.block_size - 1) / cfg.block_size;
    const std::size_t block_bytes = runtime::kv_block_bytes(draft_cfg, cfg.block_size, backend.kv);
    const std::size_t tenth = runtime::cuda_device_memory_bytes(0) / 10;
    const long long wanted = static_cast<long long>(cfg.max_num_seqs) * blocks_per_seq;
    runtime::cuda_runner_options opt;
    opt.dtype = backend.dtype;
    opt.kv_dtype = backend.kv;
    opt.block_size = cfg.block_size;
    opt.num_blocks = static_cast<int>(std::max(1LL, std::min<long long>(wanted, tenth / block_bytes)));
    // Catch-up steps are split to this size (runtime::model_draft); single-token steps carry a token per seat.
    opt.max_num_batched_tokens = std::max(cfg.max_num_batched_tokens, cfg.max_num_seqs);
    opt.max_num_seqs = cfg.max_num_seqs;
    opt.max_blocks_per_seq = blocks_per_seq;
    opt.cuda_graphs = cfg.cuda_graphs;
    opt.device_sampling = false; // the draft samples on the host: it sends its distribution along
    opt.dummy_weights = cfg.speculative_method == "draft" && cfg.draft_load_format == "dummy";
    opt.dummy_seed = draft_dummy_seed;
    runtime::cuda_memory_plan plan;
    auto runner = runtime::make_cuda_model_runner(draft_cfg, draft_weights, opt, &plan);
    log.info(
        "engine: speculative decoding with {} ({} layers) on the GPU: weights {} MiB, {} KV blocks ({} MiB), "
        "k = {}{}",
        what, draft_cfg.num_hidden_layers, mib(plan.weight_bytes), plan.num_blocks, mib(plan.kv_pool_bytes),
        cfg.num_speculative_tokens, cfg.adaptive_speculation ? ", adaptive" : "");
    return std::make_unique<runtime::model_draft>(std::move(runner), opt.max_num_batched_tokens);
  }
  const auto block_bytes = runtime::kv_block_bytes(draft_cfg, cfg.block_size, runtime::kv_cache_dtype::float32);
  const int blocks = std::max(1, blocks_for_bytes(cfg.kv_cache_mib * 1048576.0, block_bytes));
  log.info("engine: speculative decoding with {} ({} layers, {} KV blocks on the cpu), k = {}{}", what,
           draft_cfg.num_hidden_layers, blocks, cfg.num_speculative_tokens,
           cfg.adaptive_speculation ? ", adaptive" : "");
  auto runner = std::make_unique<runtime::cpu_model_runner>(draft_cfg, std::move(draft_weights),
                                                            runtime::kv_cache_config{blocks, cfg.block_size, 0}, 1);
  return std::make_unique<runtime::model_draft>(std::move(runner));
}

} // namespace

engine_actor spawn_engine(caf::actor_system& sys, const engine_config& cfg) {
  validate(cfg);
  // Logs go to stderr: stdout belongs to the apps' output (troupe-generate streams text there).
  auto log = spdlog::get("engine");
  if (!log)
    log = spdlog::stderr_color_mt("engine");
  auto model = runtime::load_model_config(cfg.model_path);
  const backend_choice backend = resolve_backend(cfg);
  // load-format=dummy: the CUDA runner makes weights of the config's shapes on the GPU,
  // so nothing but config.json (and the tokenizer) is read.
  const bool dummy = cfg.load_format == "dummy";
  if (dummy && !backend.cuda)
    throw config_error("invalid value for model.load-format: 'dummy' (allowed on the CPU backend: safetensors; "
                       "dummy weights are made on the GPU and need engine.device=cuda)");
  if (dummy && cfg.speculative_method == "self")
    throw config_error("invalid value for speculative.method: 'self' (allowed with model.load-format=dummy: none, "
                       "draft, ngram; self-speculation copies the model's first layers from host weights)");
  runtime::model_weights weights;
  if (!dummy)
    weights = runtime::load_model_weights(runtime::tensor_store::open(cfg.model_path), model);
  // A dummy model of a published shape has no tokenizer of its own: model.tokenizer lends one.
  // Prompt ids past the model's vocabulary are refused per request (request actor), not here:
  // real models pad their embedding beyond the tokenizer's ids, and a lent tokenizer may be larger.
  const std::string& tokenizer_path = cfg.tokenizer_path.empty() ? cfg.model_path : cfg.tokenizer_path;
  auto tokenizer = std::make_shared<const runtime::tokenizer>(runtime::tokenizer::load(tokenizer_path));
  auto stop_ids = runtime::default_stop_token_ids(runtime::load_generation_config(cfg.model_path), model);

  int max_model_len = cfg.max_model_len > 0 ? cfg.max_model_len : model.max_position_embeddings;
  if (max_model_len > model.max_position_embeddings)
    throw config_error("invalid value for engine.max-model-len: '" + std::to_string(cfg.max_model_len) +
                       "' (allowed: up to the model's context, " + std::to_string(model.max_position_embeddings) +
                       ")");
  // KV geometry: one block = K and V of every layer for block-size tokens (fp32 on the
  // CPU backend, the cache dtype on CUDA).
  const std::size_t block_bytes =
      backend.cuda ? runtime::kv_block_bytes(model, cfg.block_size, backend.kv)
                   : runtime::kv_block_bytes(model, cfg.block_size, runtime::kv_cache_dtype::float32);
  int host_blocks = cfg.num_host_blocks >= 0 ? cfg.num_host_blocks
                                             : blocks_for_bytes(cfg.swap_space_gib * 1073741824.0, block_bytes);
  // The draft is built before the target's weights move into its runner (self-speculation copies its layers).
  auto draft_proposer = make_draft_proposer(cfg, backend, max_model_len, model, weights, *log);
  std::shared_ptr<runtime::model_runner> runner;
  if (backend.cuda) {
    // Sized from memory unless num-device-blocks says otherwise, and never beyond what
    // max-num-seqs full-length sequences need twice over (the second half serves the
    // prefix cache): a tiny model would otherwise get millions of blocks.
    const int blocks_per_seq = (max_model_len + cfg.block_size - 1) / cfg.block_size;
    runtime::cuda_runner_options opt;
    opt.dtype = backend.dtype;
    opt.kv_dtype = backend.kv;
    opt.block_size = cfg.block_size;
    opt.num_blocks = cfg.num_device_blocks;
    opt.max_blocks = static_cast<int>(std::min<long long>(2LL * cfg.max_num_seqs * blocks_per_seq, 1000000000LL));
    opt.gpu_memory_utilization = cfg.gpu_memory_utilization;
    opt.num_host_blocks = host_blocks;
    // Verification steps carry k + 1 tokens per sequence; the activations must hold them.
    const int verify_tokens = cfg.speculative_method == "none" ? 0 : cfg.max_num_seqs * (cfg.num_speculative_tokens + 1);
    opt.max_num_batched_tokens = std::max(cfg.max_num_batched_tokens, verify_tokens);
    opt.max_num_seqs = cfg.max_num_seqs;
    opt.max_blocks_per_seq = blocks_per_seq;
    opt.dummy_weights = dummy;
    opt.cuda_graphs = cfg.cuda_graphs;
    opt.device_sampling = cfg.device_sampling;
    runtime::cuda_memory_plan plan;
    runner = runtime::make_cuda_model_runner(model, weights, opt, &plan);
    log->info("engine: {} on {} ({}{} weights, {} KV cache, CUDA graphs {}, sampling on the {})", cfg.model_path,
              runtime::cuda_device_description(opt.device), dummy ? "dummy " : "", runtime::to_string(backend.dtype),
              runtime::to_string(backend.kv), opt.cuda_graphs ? "on" : "off", opt.device_sampling ? "GPU" : "host");
    log->info("engine: memory plan: {} MiB free of {} MiB at start; weights {} MiB, activations {} MiB "
              "({} tokens per step), KV pool {} MiB = {} blocks of {} KiB ({}), host swap {} MiB = {} blocks",
              mib(plan.free_at_start), mib(plan.total_bytes), mib(plan.weight_bytes), mib(plan.activation_bytes),
              cfg.max_num_batched_tokens, mib(plan.kv_pool_bytes), plan.num_blocks, plan.kv_block_bytes / 1024,
              plan.blocks_from_memory
                  ? fmt::format("gpu-memory-utilization {}, capped at {}", cfg.gpu_memory_utilization, opt.max_blocks)
                  : std::string("engine.num-device-blocks"),
              mib(plan.host_pool_bytes), plan.num_host_blocks);
  } else {
    int device_blocks = cfg.num_device_blocks > 0 ? cfg.num_device_blocks
                                                  : blocks_for_bytes(cfg.kv_cache_mib * 1048576.0, block_bytes);
    if (device_blocks < 1)
      throw config_error("the KV cache gets no block: raise engine.kv-cache-mib or engine.num-device-blocks");
    std::size_t threads = cfg.cpu_threads > 0 ? static_cast<std::size_t>(cfg.cpu_threads)
                                              : std::max(1u, std::thread::hardware_concurrency());
    runner = std::make_shared<runtime::cpu_model_runner>(
        model, std::move(weights), runtime::kv_cache_config{device_blocks, cfg.block_size, host_blocks}, threads);
    log->info("engine: {} on cpu ({} threads, float32)", cfg.model_path, threads);
  }
  const int device_blocks = runner->cache_config().num_blocks;
  host_blocks = runner->cache_config().num_host_blocks;
  // A sequence alone must always fit: otherwise it would be preempted with nothing
  // to make room and never come back. Cap the context at what the cache holds.
  if (static_cast<long long>(device_blocks) * cfg.block_size < max_model_len) {
    int capped = device_blocks * cfg.block_size;
    log->warn("engine: the KV cache holds {} tokens ({} blocks of {}): max-model-len lowered from {} to {}",
              capped, device_blocks, cfg.block_size, max_model_len, capped);
    max_model_len = capped;
  }
  log->info("engine: KV cache {} device + {} host blocks of {} tokens ({} KiB each); "
            "max-model-len {}; {} scheduling, {} preemption, prefix caching {}",
            device_blocks, host_blocks, cfg.block_size, block_bytes / 1024, max_model_len, cfg.scheduler_policy,
            cfg.preemption_mode, cfg.enable_prefix_caching ? "on" : "off");

  std::shared_ptr<runtime::fault_injector> faults;
  if (auto plan = fault_plan_of(cfg); plan.any()) {
    std::string armed;
    for (std::size_t i = 0; i < runtime::num_fault_points; ++i)
      if (plan.every[i] > 0)
        armed += fmt::format("{}{} (1 in {})", armed.empty() ? "" : ", ",
                             runtime::to_string(static_cast<runtime::fault_point>(i)), plan.every[i]);
    log->warn("engine: [debug] fault injection is on: {}; for tests only", armed);
    faults = std::make_shared<runtime::fault_injector>(plan);
  }
  auto executor = actors::spawn_executor(sys, runner, faults);
#ifdef NDEBUG
  const bool check_invariants = false;
#else
  const bool check_invariants = true;
#endif
  auto kv = actors::spawn_kv_cache(
      sys, runtime::block_manager_config{device_blocks, host_blocks, cfg.block_size, cfg.enable_prefix_caching},
      executor, block_bytes, check_invariants);
  actors::scheduler_settings sched;
  sched.policy.max_num_seqs = cfg.max_num_seqs;
  sched.policy.max_num_batched_tokens = cfg.max_num_batched_tokens;
  sched.policy.policy =
      cfg.scheduler_policy == "priority" ? runtime::scheduling_policy::priority : runtime::scheduling_policy::fcfs;
  sched.policy.preemption =
      cfg.preemption_mode == "recompute" ? runtime::preemption_mode::recompute : runtime::preemption_mode::swap;
  sched.max_model_len = max_model_len;
  sched.block_size = cfg.block_size;
  sched.enable_prefix_caching = cfg.enable_prefix_caching;
  sched.num_speculative_tokens = cfg.num_speculative_tokens;
  sched.adaptive_speculation = cfg.adaptive_speculation;
  draft_actor draft;
  std::shared_ptr<runtime::draft_proposer> proposer = std::move(draft_proposer);
  if (proposer)
    draft = actors::spawn_draft(sys, proposer, faults);
  auto scheduler = actors::spawn_scheduler(sys, sched, kv, executor, draft);

  auto ctx = std::make_shared<actors::request_context>();
  ctx->tokenizer = std::move(tokenizer);
  ctx->default_stop_ids = std::move(stop_ids);
  ctx->max_model_len = max_model_len;
  ctx->vocab_size = model.vocab_size;
  ctx->chat = runtime::detect_chat_format(ctx->tokenizer->chat_template());
  ctx->default_system = runtime::default_system_message(ctx->tokenizer->chat_template());
  ctx->model_name = std::filesystem::path(cfg.model_path).lexically_normal().filename().string();
  if (ctx->model_name.empty())
    ctx->model_name = std::filesystem::path(cfg.model_path).lexically_normal().parent_path().filename().string();
  ctx->scheduler = scheduler;
  ctx->faults = faults;
  engine_parts parts{scheduler, kv, executor, draft, runner, proposer, faults};
  return sys.spawn(engine_behavior, std::shared_ptr<const actors::request_context>(std::move(ctx)), std::move(parts));
}

} // namespace troupe
