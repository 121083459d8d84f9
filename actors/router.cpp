// The router actor and its per-request relays (see troupe/router.hpp).
#include "troupe/router.hpp"

#include <caf/all.hpp>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <memory>
#include <unordered_map>

#include "runtime/replica_chooser.hpp"
#include "troupe/errors.hpp"

namespace troupe {

namespace {

using relay_started_atom = caf::atom_constant<caf::atom("rstarted")>;
using relay_ended_atom = caf::atom_constant<caf::atom("rended")>;
using relay_fail_atom = caf::atom_constant<caf::atom("rfail")>;

const char* const replica_gone =
    "the engine serving this request went away (its process ended or its host cannot be "
    "reached) after it had sent tokens";
const char* const all_gone =
    "no engine is left behind the router (their processes ended or their hosts cannot be "
    "reached)";

// One request's sink towards its replica: gives its events the router's id, tells the router when the first
// token came and when the request ended, and ends when the client's sink does (the replica then sees its sink
// go and aborts the request).
caf::behavior relay(caf::event_based_actor* self, request_id id, sink_actor sink, caf::actor router) {
  auto started = std::make_shared<bool>(false);
  auto end = [self, id, router] {
    self->send(router, relay_ended_atom::value, id);
    self->quit();
  };
  self->monitor(sink);
  self->set_down_handler([end](caf::down_msg&) { end(); });
  return {
      [self, id, sink, router, started](delta& d) {
        if (!*started) {
          *started = true;
          self->send(router, relay_started_atom::value, id);
        }
        d.id = id;
        self->send(sink, std::move(d));
      },
      [self, id, sink, end](finished& f) {
        f.id = id;
        self->send(sink, std::move(f));
        end();
      },
      [self, id, sink, end](failed& f) {
        f.id = id;
        self->send(sink, std::move(f));
        end();
      },
      [self, id, sink, end](relay_fail_atom, const std::string& message) {
        self->send(sink, failed{id, "engine_unavailable", message});
        end();
      },
  };
}

struct replica {
  engine_actor engine;
  bool up = true;
  int in_flight = 0;
};

struct routed_request {
  caf::actor relay;
  request_spec spec; // kept until the first token, to send the request elsewhere if its replica goes
  std::vector<std::uint64_t> prefix;
  int replica = -1;
  request_id engine_id = 0; // the replica's id, once it answered
  bool started = false, cancelled = false;
};

struct router_state {
  std::vector<replica> replicas;
  std::unique_ptr<runtime::replica_chooser> chooser;
  router_config cfg;
  std::unordered_map<request_id, routed_request> requests;
  request_id next_id = 1;
  static inline const char* name = "router";
};

using router_pointer = caf::stateful_actor<router_state>*;

// The text a request's prompt begins with, as far as routing can tell before tokenizing.
std::string routing_text(const request_spec& spec) {
  if (!spec.prompt_ids.empty())
    return std::string(reinterpret_cast<const char*>(spec.prompt_ids.data()),
                       spec.prompt_ids.size() * sizeof(token_id));
  if (spec.messages.empty())
    return spec.prompt;
  std::string text;
  for (const auto& m : spec.messages)
    text += m.role + '\n' + m.content + '\n';
  return text;
}

void fail_request(router_pointer self, request_id id, const char* message) {
  auto it = self->state.requests.find(id);
  if (it != self->state.requests.end())
    self->send(it->second.relay, relay_fail_atom::value, std::string(message));
}

// Sends a request to the replica the policy picks; fails it when none is up.
void dispatch(router_pointer self, request_id id) {
  auto& st = self->state;
  auto& q = st.requests.at(id);
  std::vector<runtime::replica_load> loads;
  for (const auto& r : st.replicas)
    loads.push_back({r.up, r.in_flight});
  const auto choice = st.chooser->choose(q.prefix, loads);
  if (!choice) {
    q.replica = -1;
    fail_request(self, id, all_gone);
    return;
  }
  const int r = choice->replica;
  q.replica = r;
  q.engine_id = 0;
  ++st.replicas[static_cast<std::size_t>(r)].in_flight;
  st.chooser->record(r, q.prefix);
  self->request(st.replicas[static_cast<std::size_t>(r)].engine, caf::infinite, generate_atom::value, q.spec,
                caf::actor_cast<sink_actor>(q.relay))
      .then(
          [self, id, r](request_id engine_id) {
            auto it = self->state.requests.find(id);
            if (it == self->state.requests.end() || it->second.replica != r)
              return; // ended, or sent elsewhere meanwhile
            it->second.engine_id = engine_id;
            if (it->second.cancelled)
              self->send(self->state.replicas[static_cast<std::size_t>(r)].engine, cancel_atom::value, engine_id);
          },
          [](caf::error&) {}); // a replica that went away is handled by its down message
}

void on_replica_down(router_pointer self, const caf::down_msg& msg) {
  auto& st = self->state;
  int gone = -1;
  for (std::size_t r = 0; r < st.replicas.size(); ++r)
    if (st.replicas[r].up && st.replicas[r].engine.address() == msg.source)
      gone = static_cast<int>(r);
  if (gone < 0)
    return;
  st.replicas[static_cast<std::size_t>(gone)].up = false;
  st.replicas[static_cast<std::size_t>(gone)].in_flight = 0;
  st.chooser->forget(gone);
  spdlog::warn("router: engine {} went away; {} of {} left", gone,
               std::count_if(st.replicas.begin(), st.replicas.end(), [](const replica& r) { return r.up; }),
               st.replicas.size());
  for (auto& [id, q] : st.requests) {
    if (q.replica != gone)
      continue;
    if (q.started || q.cancelled)
      fail_request(self, id, replica_gone);
    else
      dispatch(self, id); // no token yet: another replica takes it from the start
  }
  if (std::none_of(st.replicas.begin(), st.replicas.end(), [](const replica& r) { return r.up; }))
    self->quit(caf::exit_reason::user_shutdown); // after the relays got their failures: sends are ordered
}

// An engine that is up, for the questions any replica answers; the first one.
const replica* any_up(router_pointer self) {
  for (const auto& r : self->state.replicas)
    if (r.up)
      return &r;
  return nullptr;
}

template <class T>
void add_samples(std::vector<T>& into, const std::vector<T>& from) {
  for (const T x : from)
    if (into.size() < engine_stats::max_samples)
      into.push_back(x);
}

// The replicas' counters summed, their samples pooled: the router as one engine.
void add_stats(engine_stats& a, const engine_stats& b) {
  a.steps += b.steps;
  a.prefill_tokens += b.prefill_tokens;
  a.decode_tokens += b.decode_tokens;
  a.preemptions_swap += b.preemptions_swap;
  a.preemptions_recompute += b.preemptions_recompute;
  a.swap_fallbacks += b.swap_fallbacks;
  a.swap_out_bytes += b.swap_out_bytes;
  a.swap_in_bytes += b.swap_in_bytes;
  a.swap_in_reused_bytes += b.swap_in_reused_bytes;
  a.prefix_queries += b.prefix_queries;
  a.prefix_hits += b.prefix_hits;
  a.window_released_blocks += b.window_released_blocks;
  a.requests_finished += b.requests_finished;
  a.requests_failed += b.requests_failed;
  a.requests_aborted += b.requests_aborted;
  a.spec_drafted += b.spec_drafted;
  a.spec_accepted += b.spec_accepted;
  a.spec_verifications += b.spec_verifications;
  a.running += b.running;
  a.waiting += b.waiting;
  a.swapped += b.swapped;
  a.device_blocks_free += b.device_blocks_free;
  a.device_blocks_total += b.device_blocks_total;
  a.host_blocks_free += b.host_blocks_free;
  a.host_blocks_total += b.host_blocks_total;
  a.last_step_decodes += b.last_step_decodes;
  a.last_step_prefill_tokens += b.last_step_prefill_tokens;
  add_samples(a.decodes_in_prefill_steps, b.decodes_in_prefill_steps);
  add_samples(a.host_overhead_us, b.host_overhead_us);
  add_samples(a.step_device_us, b.step_device_us);
  add_samples(a.step_host_us, b.step_host_us);
  add_samples(a.step_gap_us, b.step_gap_us);
  add_samples(a.resume_swap_us, b.resume_swap_us);
  add_samples(a.resume_recompute_us, b.resume_recompute_us);
  add_samples(a.draft_us, b.draft_us);
  add_samples(a.verify_us, b.verify_us);
  a.constrained_requests += b.constrained_requests;
  a.constraint_compiles += b.constraint_compiles;
  a.constraint_cache_hits += b.constraint_cache_hits;
  a.constraint_compile_ms += b.constraint_compile_ms;
  add_samples(a.constraint_mask_us, b.constraint_mask_us);
  a.step_failures += b.step_failures;
  a.executor_restarts += b.executor_restarts;
  a.draft_failures += b.draft_failures;
  a.draft_restarts += b.draft_restarts;
  a.swap_copy_failures += b.swap_copy_failures;
  a.swap_in_failures += b.swap_in_failures;
}

caf::behavior router_behavior(router_pointer self, std::vector<engine_actor> engines, router_config cfg,
                              runtime::routing_policy policy) {
  auto& st = self->state;
  st.cfg = cfg;
  for (auto& e : engines) {
    self->monitor(e);
    st.replicas.push_back({std::move(e)});
  }
  st.chooser = std::make_unique<runtime::replica_chooser>(static_cast<int>(st.replicas.size()), policy, cfg.load_margin,
                                                          static_cast<std::size_t>(cfg.max_blocks_per_replica));
  self->set_down_handler([self](caf::down_msg& msg) { on_replica_down(self, msg); });
  return {
      [self](generate_atom, request_spec& spec, sink_actor& sink) -> request_id {
        auto& st = self->state;
        const auto id = st.next_id++;
        routed_request q;
        q.relay = self->spawn(relay, id, std::move(sink), caf::actor_cast<caf::actor>(self));
        q.prefix = runtime::prefix_block_hashes(routing_text(spec), static_cast<std::size_t>(st.cfg.prefix_block_bytes),
                                                static_cast<std::size_t>(st.cfg.max_prefix_blocks));
        q.spec = std::move(spec);
        st.requests.emplace(id, std::move(q));
        dispatch(self, id);
        return id;
      },
      [self](cancel_atom, request_id id) {
        auto& st = self->state;
        auto it = st.requests.find(id);
        if (it == st.requests.end())
          return;
        it->second.cancelled = true;
        if (it->second.engine_id != 0 && it->second.replica >= 0)
          self->send(st.replicas[static_cast<std::size_t>(it->second.replica)].engine, cancel_atom::value,
                     it->second.engine_id);
      },
      [self](relay_started_atom, request_id id) {
        auto it = self->state.requests.find(id);
        if (it == self->state.requests.end())
          return;
        it->second.started = true;
        it->second.spec = {}; // never sent again
      },
      [self](relay_ended_atom, request_id id) {
        auto& st = self->state;
        auto it = st.requests.find(id);
        if (it == st.requests.end())
          return;
        if (it->second.replica >= 0 && st.replicas[static_cast<std::size_t>(it->second.replica)].up)
          --st.replicas[static_cast<std::size_t>(it->second.replica)].in_flight;
        st.requests.erase(it);
      },
      [self](info_atom a) -> caf::result<model_info> {
        if (const auto* r = any_up(self))
          return self->delegate(r->engine, a);
        return caf::make_error(caf::sec::request_receiver_down, all_gone);
      },
      [self](tokenize_atom a, std::string& text, bool add_special) -> caf::result<std::vector<token_id>> {
        if (const auto* r = any_up(self))
          return self->delegate(r->engine, a, std::move(text), add_special);
        return caf::make_error(caf::sec::request_receiver_down, all_gone);
      },
      [self](detok_atom a, std::vector<token_id>& ids) -> caf::result<std::string> {
        if (const auto* r = any_up(self))
          return self->delegate(r->engine, a, std::move(ids));
        return caf::make_error(caf::sec::request_receiver_down, all_gone);
      },
      [self](stats_atom) -> caf::result<engine_stats> {
        auto rp = self->make_response_promise<engine_stats>();
        auto total = std::make_shared<engine_stats>();
        auto pending = std::make_shared<int>(0);
        for (const auto& r : self->state.replicas)
          if (r.up)
            ++*pending;
        if (*pending == 0)
          return caf::make_error(caf::sec::request_receiver_down, all_gone);
        for (const auto& r : self->state.replicas) {
          if (!r.up)
            continue;
          // A replica that dies meanwhile never answers (CAF drops requests to a dead proxy): the timeout
          // bounds the wait, and the stats then hold the others'.
          self->request(r.engine, std::chrono::seconds(10), stats_atom::value)
              .then(
                  [rp, total, pending](engine_stats& s) mutable {
                    add_stats(*total, s);
                    if (--*pending == 0)
                      rp.deliver(std::move(*total));
                  },
                  [rp, total, pending](caf::error&) mutable {
                    if (--*pending == 0)
                      rp.deliver(std::move(*total));
                  });
        }
        return rp;
      },
  };
}

} // namespace

engine_actor spawn_router(caf::actor_system& sys, std::vector<engine_actor> engines, const router_config& cfg) {
  const auto policy = runtime::parse_routing_policy(cfg.policy);
  if (!policy)
    throw config_error("invalid value for router.policy: '" + cfg.policy +
                       "' (allowed: cache-aware, round-robin, least-loaded)");
  if (cfg.load_margin < 0)
    throw config_error("invalid value for router.load-margin: '" + std::to_string(cfg.load_margin) +
                       "' (allowed: 0 or more)");
  if (cfg.prefix_block_bytes < 1 || cfg.max_prefix_blocks < 1 || cfg.max_blocks_per_replica < 1)
    throw config_error("router: prefix_block_bytes, max_prefix_blocks and max_blocks_per_replica must be >= 1");
  if (engines.empty())
    throw config_error("router.engines: a router needs at least one engine");
  // Every replica must serve the same model: a request may land on any of them.
  caf::scoped_actor self{sys};
  std::string first_name;
  for (std::size_t i = 0; i < engines.size(); ++i) {
    model_info info;
    bool answered = false;
    std::string why;
    self->request(engines[i], std::chrono::seconds(30), info_atom::value)
        .receive(
            [&](model_info& x) {
              info = std::move(x);
              answered = true;
            },
            [&](caf::error& e) { why = sys.render(e); });
    if (!answered)
      throw config_error("router.engines: engine " + std::to_string(i) + " does not answer: " + why);
    if (i == 0)
      first_name = info.name;
    else if (info.name != first_name)
      throw config_error("router.engines: engine " + std::to_string(i) + " serves '" + info.name +
                         "' but engine 0 serves '" + first_name + "': every engine must serve the same model");
  }
  return caf::actor_cast<engine_actor>(sys.spawn(router_behavior, std::move(engines), cfg, *policy));
}

} // namespace troupe
