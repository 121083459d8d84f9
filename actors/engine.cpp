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
#include "runtime/cpu/shared_memory_collective.hpp"
#include "runtime/cuda/cuda_runner_factory.hpp"
#include "runtime/cuda_devices.hpp"
#include "runtime/dummy_weights.hpp"
#include "runtime/engine_plan.hpp"
#include "runtime/fault_injector.hpp"
#include "runtime/fp8_quantization.hpp"
#include "runtime/generation_config.hpp"
#include "runtime/model_config.hpp"
#include "runtime/model_draft.hpp"
#include "runtime/model_weights.hpp"
#include "runtime/ngram_draft.hpp"
#include "runtime/safetensors.hpp"
#include "runtime/weight_shard.hpp"
#include "troupe/engine.hpp"

namespace troupe {

namespace {

// What the engine supervises: its actors, and what a restarted one takes over.
struct engine_parts {
  scheduler_actor scheduler;
  kv_cache_actor kv;
  executor_actor executor;
  draft_actor draft;                             // null: no speculation
  std::shared_ptr<runtime::model_runner> runner; // outlives the executor: weights and KV cache (rank 0's)
  // Tensor parallelism: every rank's runner (rank 0 first); empty for one. The CPU ranks'
  // collectives live here (their runners hold pointers); a CUDA rank's runner owns its own.
  std::vector<std::shared_ptr<runtime::model_runner>> ranks;
  std::shared_ptr<std::vector<std::unique_ptr<runtime::collective>>> cpu_collectives;
  std::shared_ptr<runtime::draft_proposer> proposer;                  // outlives the draft actor
  std::shared_ptr<runtime::fault_injector> faults;                    // [debug] faults, or null
  std::shared_ptr<runtime::structured::constraint_cache> constraints; // shared with the request actors
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

// The executor, or a tensor-parallel group of them led by the one returned.
executor_actor spawn_executors(caf::actor_system& sys, const engine_parts& parts) {
  if (parts.ranks.size() > 1)
    return actors::spawn_executor_group(sys, parts.ranks, parts.faults, parts.constraints);
  return actors::spawn_executor(sys, parts.runner, parts.faults, parts.constraints);
}

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
    // A group's leader stops only when no rank is inside a collective any more (it waits for
    // every rank's answer, and one that died aborted the group first): the group may re-arm.
    parts.runner->reset_group();
    parts.executor = spawn_executors(self->system(), parts);
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
            return caf::make_error(caf::sec::invalid_argument, "token id " + std::to_string(id) +
                                                                   " is outside the vocabulary (0.." +
                                                                   std::to_string(ctx.vocab_size - 1) + ")");
        return ctx.tokenizer->decode(ids, true);
      },
      [self](stats_atom) -> caf::result<engine_stats> {
        auto rp = self->make_response_promise<engine_stats>();
        self->request(self->state.parts.scheduler, caf::infinite, stats_atom::value)
            .then(
                [rp, constraints = self->state.parts.constraints](engine_stats& s) mutable {
                  if (constraints) {
                    const auto c = constraints->stats();
                    s.constrained_requests = c.requests;
                    s.constraint_compiles = c.compiled;
                    s.constraint_cache_hits = c.hits;
                    s.constraint_compile_ms = c.compile_ms;
                  }
                  rp.deliver(std::move(s));
                },
                [rp](caf::error& e) mutable { rp.deliver(std::move(e)); });
        return rp;
      },
  };
}

std::size_t mib(std::size_t bytes) {
  return bytes >> 20;
}

// What a CUDA runner allocated, and why its pool has the blocks it has.
void log_memory_plan(spdlog::logger& log, const std::string& who, const runtime::cuda_memory_plan& memory,
                     const runtime::engine_plan& plan) {
  log.info(
      "engine: {}memory plan: {} MiB free of {} MiB at start; weights {} MiB, activations {} MiB "
      "({} tokens per step), KV pool {} MiB = {} blocks of {} KiB ({}), host swap {} MiB = {} blocks",
      who, mib(memory.free_at_start), mib(memory.total_bytes), mib(memory.weight_bytes), mib(memory.activation_bytes),
      plan.step_tokens, mib(memory.kv_pool_bytes), memory.num_blocks, memory.kv_block_bytes / 1024,
      memory.blocks_from_memory
          ? fmt::format("gpu-memory-utilization {}, capped at {}", plan.gpu_memory_utilization, plan.max_device_blocks)
          : std::string("engine.num-device-blocks"),
      mib(memory.host_pool_bytes), memory.num_host_blocks);
}

runtime::machine_info this_machine() {
  runtime::machine_info m;
  m.cuda_devices = runtime::cuda_device_count();
  m.device_memory_bytes = m.cuda_devices > 0 ? runtime::cuda_device_memory_bytes(0) : 0;
  m.cpu_cores = std::thread::hardware_concurrency();
#ifdef TROUPE_WITH_CUDA
  m.built_with_cuda = true;
#endif
  return m;
}

// The plan's speculative method's proposer, or null for none; the draft model's runner as
// runtime::plan_draft sizes it.
std::unique_ptr<runtime::draft_proposer> make_draft_proposer(const runtime::engine_plan& plan,
                                                             const runtime::model_config& target,
                                                             const runtime::model_weights& target_weights,
                                                             const runtime::machine_info& machine,
                                                             spdlog::logger& log) {
  using runtime::speculative_method;
  const auto& spec = plan.speculation;
  const char* adaptive = spec.adaptive ? ", adaptive" : "";
  if (spec.method == speculative_method::none)
    return nullptr;
  if (spec.method == speculative_method::ngram) {
    log.info("engine: speculative decoding by n-gram lookup (n {}..{}), k = {}{}", spec.ngram_min, spec.ngram_max,
             spec.k, adaptive);
    return std::make_unique<runtime::ngram_draft>(spec.ngram_min, spec.ngram_max);
  }
  const bool self_draft = spec.method == speculative_method::self;
  runtime::model_config draft_cfg = self_draft ? runtime::first_layers_config(target, spec.draft_layers)
                                               : runtime::load_model_config(spec.draft_model);
  const auto sizes = runtime::plan_draft(plan, target, draft_cfg, machine);
  const bool cuda = plan.backend == runtime::backend_kind::cuda;
  runtime::model_weights draft_weights;
  if (self_draft)
    draft_weights = runtime::first_layers_weights(target_weights, spec.draft_layers);
  else if (!spec.draft_dummy)
    draft_weights = runtime::load_model_weights(runtime::tensor_store::open(spec.draft_model), draft_cfg);
  else if (!cuda) // on CUDA the runner makes them on the GPU
    draft_weights = runtime::dummy_weights(draft_cfg, sizes.cuda.dummy_seed);
  const char* what = self_draft ? "the model's first layers" : spec.draft_model.c_str();
  if (cuda) {
    runtime::cuda_memory_plan memory;
    auto runner = runtime::make_cuda_model_runner(draft_cfg, draft_weights, sizes.cuda, &memory);
    log.info(
        "engine: speculative decoding with {} ({} layers) on the GPU: weights {} MiB, {} KV blocks ({} MiB), "
        "k = {}{}",
        what, draft_cfg.num_hidden_layers, mib(memory.weight_bytes), memory.num_blocks, mib(memory.kv_pool_bytes),
        spec.k, adaptive);
    return std::make_unique<runtime::model_draft>(std::move(runner), sizes.step_tokens);
  }
  log.info("engine: speculative decoding with {} ({} layers, {} KV blocks on the cpu), k = {}{}", what,
           draft_cfg.num_hidden_layers, sizes.blocks, spec.k, adaptive);
  auto runner = std::make_unique<runtime::cpu_model_runner>(draft_cfg, std::move(draft_weights), sizes.cpu_cache(), 1);
  return std::make_unique<runtime::model_draft>(std::move(runner));
}

} // namespace

engine_actor spawn_engine(caf::actor_system& sys, const engine_config& cfg) {
  // Logs go to stderr: stdout belongs to the apps' output (troupe-generate streams text there).
  auto log = spdlog::get("engine");
  if (!log)
    log = spdlog::stderr_color_mt("engine");
  auto model = runtime::load_model_config(cfg.model_path);
  const auto machine = this_machine();
  // From here on, the plan's typed values: cfg's strings are read only by plan_engine.
  const runtime::engine_plan plan = runtime::plan_engine(cfg, model, machine);
  const bool cuda = plan.backend == runtime::backend_kind::cuda;
  const bool dummy = plan.weights == runtime::weight_source::dummy;
  // load-format=dummy: the CUDA runner makes weights of the config's shapes on the GPU,
  // so nothing but config.json (and the tokenizer) is read.
  // Tensor-parallel ranks read their slices from the mapping themselves: the whole model is
  // loaded only where a part needs it (one rank, or self-speculation's first layers).
  const bool ranks_read_slices = plan.ranks.size() > 1;
  const bool whole_needed = !ranks_read_slices || plan.speculation.method == runtime::speculative_method::self;
  runtime::tensor_store store;
  if (!dummy)
    store = runtime::tensor_store::open(cfg.model_path);
  // model.quantization=fp8 rounds each loaded linear layer to FP8 (the whole model's, or a rank's
  // slices as it reads them): both backends then compute from the same FP8 values.
  const std::size_t hidden = static_cast<std::size_t>(model.hidden_size);
  auto quantized = [&plan, hidden](runtime::model_weights w) {
    if (plan.quantize_fp8)
      runtime::quantize_linears_fp8(w, hidden);
    return w;
  };
  runtime::model_weights weights;
  if (!dummy && whole_needed)
    weights = quantized(runtime::load_model_weights(store, model));
  if (!dummy && model.quantization)
    log->info("engine: quantized weights: {} ({})", runtime::to_string(*model.quantization),
              cuda && plan.fp8_weights    ? "kept FP8 on the GPU"
              : cuda && plan.int4_weights ? "kept INT4 on the GPU"
                                          : "dequantized at load");
  if (plan.quantize_fp8)
    log->info(
        "engine: model.quantization=fp8: the linear layers quantized to FP8 e4m3 at load, a scale per output "
        "row{}",
        cuda ? "" : " (the CPU computes in fp32 on the FP8 values)");
  // A dummy model of a published shape has no tokenizer of its own: model.tokenizer lends one.
  // Prompt ids past the model's vocabulary are refused per request (request actor), not here:
  // real models pad their embedding beyond the tokenizer's ids, and a lent tokenizer may be larger.
  const std::string& tokenizer_path = cfg.tokenizer_path.empty() ? cfg.model_path : cfg.tokenizer_path;
  auto tokenizer = std::make_shared<const runtime::tokenizer>(runtime::tokenizer::load(tokenizer_path));
  auto stop_ids = runtime::default_stop_token_ids(runtime::load_generation_config(cfg.model_path), model);

  // The draft is built before the target's weights move into its runner (self-speculation copies its layers).
  auto draft_proposer = make_draft_proposer(plan, model, weights, machine, *log);
  std::shared_ptr<runtime::model_runner> runner;
  std::vector<std::shared_ptr<runtime::model_runner>> rank_runners; // tensor parallelism: rank 0 first
  std::shared_ptr<std::vector<std::unique_ptr<runtime::collective>>> cpu_collectives;
  if (cuda && plan.ranks.size() > 1) {
    // One runner per rank on its GPU, built in parallel (their set-up meets in collectives);
    // each reads only its slices, and the executor group drives them (spawn_executor_group).
    const auto opt = plan.cuda_options();
    runtime::shard_weight_source slices;
    if (!dummy)
      slices = [&store, &model, &quantized](const runtime::shard_shape& s) {
        return quantized(runtime::load_model_weight_shard(store, model, s));
      };
    std::vector<runtime::cuda_memory_plan> memory;
    for (auto& r : runtime::make_cuda_rank_runners(model, slices, opt, plan.devices, &memory))
      rank_runners.push_back(std::move(r));
    runner = rank_runners.front();
    std::string gpus;
    for (int d : plan.devices)
      gpus += fmt::format("{}{}", gpus.empty() ? "" : ",", d);
    log->info(
        "engine: {} on {} tensor-parallel ranks, GPUs {} ({}: {}{} weights, {} KV cache, CUDA graphs {}, "
        "sampling on the {}{}), an executor actor each",
        cfg.model_path, plan.ranks.size(), gpus, runtime::cuda_device_description(opt.device), dummy ? "dummy " : "",
        runtime::to_string(plan.dtype), runtime::to_string(plan.kv), opt.cuda_graphs ? "on" : "off",
        opt.device_sampling ? "GPU" : "host",
        opt.deterministic ? ", deterministic: batch-invariant GEMMs and attention" : "");
    for (std::size_t r = 0; r < memory.size(); ++r)
      log_memory_plan(*log, fmt::format("rank {} (GPU {}) ", r, plan.devices[r]), memory[r], plan);
    weights = {}; // self-speculation's draft has its layers
  } else if (cuda) {
    const auto opt = plan.cuda_options();
    runtime::cuda_memory_plan memory;
    runner = runtime::make_cuda_model_runner(model, weights, opt, &memory);
    log->info("engine: {} on {} ({}{} weights, {} KV cache, CUDA graphs {}, sampling on the {}{})", cfg.model_path,
              runtime::cuda_device_description(opt.device), dummy ? "dummy " : "", runtime::to_string(plan.dtype),
              runtime::to_string(plan.kv), opt.cuda_graphs ? "on" : "off", opt.device_sampling ? "GPU" : "host",
              opt.deterministic ? ", deterministic: batch-invariant GEMMs and attention" : "");
    log_memory_plan(*log, "", memory, plan);
  } else if (plan.ranks.size() > 1) {
    // One runner per rank over its shard, meeting the others in a shared-memory group; each is
    // driven by an executor actor of its own (spawn_executor_group).
    const int ranks = static_cast<int>(plan.ranks.size());
    cpu_collectives =
        std::make_shared<std::vector<std::unique_ptr<runtime::collective>>>(runtime::make_shared_memory_group(ranks));
    for (int r = 0; r < ranks; ++r) {
      const runtime::shard_shape& shape = plan.ranks[static_cast<std::size_t>(r)];
      rank_runners.push_back(std::make_shared<runtime::cpu_model_runner>(
          model, quantized(runtime::load_model_weight_shard(store, model, shape)), plan.cpu_cache(), plan.cpu_threads,
          runtime::tensor_parallel_rank{shape, (*cpu_collectives)[static_cast<std::size_t>(r)].get()}));
    }
    weights = {}; // every rank holds its shard now
    runner = rank_runners.front();
    log->info("engine: {} on cpu, {} tensor-parallel ranks ({} threads each, float32), an executor actor each",
              cfg.model_path, ranks, plan.cpu_threads);
  } else {
    runner = std::make_shared<runtime::cpu_model_runner>(model, std::move(weights), plan.cpu_cache(), plan.cpu_threads);
    log->info("engine: {} on cpu ({} threads, float32{})", cfg.model_path, plan.cpu_threads,
              plan.deterministic ? ", deterministic (as the CPU kernels always are)" : "");
  }
  const int device_blocks = runner->cache_config().num_blocks;
  const int host_blocks = runner->cache_config().num_host_blocks;
  const int max_model_len = plan.context_that_fits(device_blocks);
  if (max_model_len < plan.max_model_len)
    log->warn("engine: the KV cache holds {} tokens ({} blocks of {}): max-model-len lowered from {} to {}",
              max_model_len, device_blocks, plan.block_size, plan.max_model_len, max_model_len);
  log->info(
      "engine: KV cache {} device + {} host blocks of {} tokens ({} KiB each); "
      "max-model-len {}; {} scheduling, {} preemption, prefix caching {}",
      device_blocks, host_blocks, plan.block_size, plan.kv_block_bytes / 1024, max_model_len,
      runtime::to_string(plan.scheduling.policy), runtime::to_string(plan.scheduling.preemption),
      plan.prefix_caching ? "on" : "off");

  std::shared_ptr<runtime::fault_injector> faults;
  if (plan.faults.any()) {
    std::string armed;
    for (std::size_t i = 0; i < runtime::num_fault_points; ++i)
      if (plan.faults.every[i] > 0)
        armed += fmt::format("{}{} (1 in {})", armed.empty() ? "" : ", ",
                             runtime::to_string(static_cast<runtime::fault_point>(i)), plan.faults.every[i]);
    log->warn("engine: [debug] fault injection is on: {}; for tests only", armed);
    faults = std::make_shared<runtime::fault_injector>(plan.faults);
  }
  engine_parts parts;
  parts.runner = runner;
  parts.ranks = std::move(rank_runners);
  parts.cpu_collectives = std::move(cpu_collectives);
  parts.faults = faults;
  // Structured output: the model's tokens as bytes, once; constraints compile against them.
  parts.constraints = std::make_shared<runtime::structured::constraint_cache>(
      std::make_shared<const runtime::structured::token_vocabulary>(
          runtime::structured::token_vocabulary::from_tokenizer(*tokenizer, model.vocab_size)));
  auto executor = spawn_executors(sys, parts);
#ifdef NDEBUG
  const bool check_invariants = false;
#else
  const bool check_invariants = true;
#endif
  if (model.sliding_window) {
    const auto sliding = std::count(model.sliding_layers.begin(), model.sliding_layers.end(), true);
    log->info("engine: sliding-window attention over {} positions on {} of {} layers{}", *model.sliding_window, sliding,
              model.num_hidden_layers,
              plan.sliding_window > 0 ? "; KV blocks behind every window go back to the pool" : "");
  }
  auto kv = actors::spawn_kv_cache(sys,
                                   runtime::block_manager_config{device_blocks, host_blocks, plan.block_size,
                                                                 plan.prefix_caching, plan.sliding_window},
                                   executor, plan.kv_block_bytes, check_invariants);
  actors::scheduler_settings sched;
  sched.policy = plan.scheduling;
  sched.max_model_len = max_model_len;
  sched.block_size = plan.block_size;
  sched.enable_prefix_caching = plan.prefix_caching;
  sched.num_speculative_tokens = plan.speculation.k;
  sched.adaptive_speculation = plan.speculation.adaptive;
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
  ctx->max_num_seqs = sched.policy.max_num_seqs;
  ctx->chat = runtime::detect_chat_format(ctx->tokenizer->chat_template());
  ctx->default_system = runtime::default_system_message(ctx->tokenizer->chat_template());
  ctx->thinking_switch = runtime::has_thinking_switch(ctx->tokenizer->chat_template());
  ctx->model_name = std::filesystem::path(cfg.model_path).lexically_normal().filename().string();
  if (ctx->model_name.empty())
    ctx->model_name = std::filesystem::path(cfg.model_path).lexically_normal().parent_path().filename().string();
  ctx->scheduler = scheduler;
  ctx->faults = faults;
  ctx->constraints = parts.constraints;
  parts.scheduler = scheduler;
  parts.kv = kv;
  parts.executor = executor;
  parts.draft = draft;
  parts.proposer = proposer;
  return sys.spawn(engine_behavior, std::shared_ptr<const actors::request_context>(std::move(ctx)), std::move(parts));
}

} // namespace troupe
