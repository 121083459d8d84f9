// The engine actor and spawn_engine: loads the model, sizes the KV cache,
// spawns executor, kv_cache and scheduler, and then spawns one request actor
// per generate. It is the only handle a client or a host application needs.
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <filesystem>
#include <thread>
#include <unordered_map>

#include "actors/executor.hpp"
#include "actors/kv_cache.hpp"
#include "actors/request.hpp"
#include "actors/scheduler.hpp"
#include "runtime/cpu/cpu_model_runner.hpp"
#include "runtime/generation_config.hpp"
#include "runtime/model_config.hpp"
#include "runtime/model_weights.hpp"
#include "runtime/safetensors.hpp"
#include "troupe/engine.hpp"

namespace troupe {

namespace {

struct engine_state {
  std::shared_ptr<const actors::request_context> ctx;
  scheduler_actor scheduler;
  kv_cache_actor kv;
  executor_actor executor;
  request_id next_id = 1;
  std::unordered_map<request_id, request_actor> requests;
  static inline const char* name = "engine";
};

using engine_pointer = engine_actor::stateful_pointer<engine_state>;

engine_actor::behavior_type engine_behavior(engine_pointer self, std::shared_ptr<const actors::request_context> ctx,
                                            scheduler_actor scheduler, kv_cache_actor kv, executor_actor executor) {
  auto& st = self->state;
  st.ctx = std::move(ctx);
  st.scheduler = std::move(scheduler);
  st.kv = std::move(kv);
  st.executor = std::move(executor);
  // The engine's parts live and die with it.
  self->link_to(st.scheduler);
  self->link_to(st.kv);
  self->link_to(st.executor);
  self->set_down_handler([self](const caf::down_msg& msg) {
    auto& reqs = self->state.requests;
    for (auto it = reqs.begin(); it != reqs.end(); ++it)
      if (it->second.address() == msg.source) {
        reqs.erase(it);
        break;
      }
  });
  return {
      [self](generate_atom, request_spec& spec, sink_actor& sink) -> request_id {
        auto& st = self->state;
        auto id = st.next_id++;
        auto req = actors::spawn_request(self->system(), id, std::move(spec), std::move(sink), st.ctx);
        self->link_to(req);
        self->monitor(req);
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
        self->request(self->state.scheduler, caf::infinite, stats_atom::value)
            .then([rp](engine_stats& s) mutable { rp.deliver(std::move(s)); },
                  [rp](caf::error& e) mutable { rp.deliver(std::move(e)); });
        return rp;
      },
  };
}

int blocks_for_bytes(double bytes, std::size_t block_bytes) {
  return static_cast<int>(std::min(bytes / static_cast<double>(block_bytes), 1e9));
}

} // namespace

engine_actor spawn_engine(caf::actor_system& sys, const engine_config& cfg) {
  validate(cfg);
  // Logs go to stderr: stdout belongs to the apps' output (troupe-generate streams text there).
  auto log = spdlog::get("engine");
  if (!log)
    log = spdlog::stderr_color_mt("engine");
  auto model = runtime::load_model_config(cfg.model_path);
  auto store = runtime::tensor_store::open(cfg.model_path);
  auto weights = runtime::load_model_weights(store, model);
  auto tokenizer = std::make_shared<const runtime::tokenizer>(runtime::tokenizer::load(cfg.model_path));
  auto stop_ids = runtime::default_stop_token_ids(runtime::load_generation_config(cfg.model_path), model);

  int max_model_len = cfg.max_model_len > 0 ? cfg.max_model_len : model.max_position_embeddings;
  if (max_model_len > model.max_position_embeddings)
    throw config_error("invalid value for engine.max-model-len: '" + std::to_string(cfg.max_model_len) +
                       "' (allowed: up to the model's context, " + std::to_string(model.max_position_embeddings) +
                       ")");
  // KV geometry: one block = K and V of every layer for block-size tokens, fp32 on the CPU backend.
  const std::size_t block_bytes = 2 * sizeof(float) * static_cast<std::size_t>(model.num_hidden_layers) *
                                  model.num_key_value_heads * cfg.block_size * model.head_dim;
  int device_blocks = cfg.num_device_blocks > 0 ? cfg.num_device_blocks
                                                : blocks_for_bytes(cfg.kv_cache_mib * 1048576.0, block_bytes);
  int host_blocks = cfg.num_host_blocks >= 0 ? cfg.num_host_blocks
                                             : blocks_for_bytes(cfg.swap_space_gib * 1073741824.0, block_bytes);
  if (device_blocks < 1)
    throw config_error("the KV cache gets no block: raise engine.kv-cache-mib or engine.num-device-blocks");
  // A sequence alone must always fit: otherwise it would be preempted with nothing
  // to make room and never come back. Cap the context at what the cache holds.
  if (static_cast<long long>(device_blocks) * cfg.block_size < max_model_len) {
    int capped = device_blocks * cfg.block_size;
    log->warn("engine: the KV cache holds {} tokens ({} blocks of {}): max-model-len lowered from {} to {}",
              capped, device_blocks, cfg.block_size, max_model_len, capped);
    max_model_len = capped;
  }
  std::size_t threads = cfg.cpu_threads > 0 ? static_cast<std::size_t>(cfg.cpu_threads)
                                            : std::max(1u, std::thread::hardware_concurrency());
  auto runner = std::make_shared<runtime::cpu_model_runner>(
      model, std::move(weights), runtime::kv_cache_config{device_blocks, cfg.block_size, host_blocks}, threads);
  log->info("engine: {} on cpu ({} threads); KV cache {} device + {} host blocks of {} tokens ({} KiB each); "
            "max-model-len {}; {} scheduling, {} preemption, prefix caching {}",
            cfg.model_path, threads, device_blocks, host_blocks, cfg.block_size, block_bytes / 1024, max_model_len,
            cfg.scheduler_policy, cfg.preemption_mode, cfg.enable_prefix_caching ? "on" : "off");

  auto executor = actors::spawn_executor(sys, runner);
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
  auto scheduler = actors::spawn_scheduler(sys, sched, kv, executor);

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
  return sys.spawn(engine_behavior, std::shared_ptr<const actors::request_context>(std::move(ctx)), scheduler, kv,
                   executor);
}

} // namespace troupe
