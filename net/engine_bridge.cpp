// Bridge actor: tag <-> request id bookkeeping, and events that arrive before
// the engine's reply (a fast first delta) are held until the id is known.
#include "net/engine_bridge.hpp"

#include <map>
#include <unordered_map>

namespace troupe::net {

namespace {

struct bridge_state {
  engine_actor engine;
  push_fn push;
  std::unordered_map<request_id, std::string> tag_of;
  std::map<std::string, request_id> id_of;
  std::unordered_map<request_id, std::vector<bridge_event>> early; // events for ids not yet known
  std::map<std::string, bool> cancel_on_arrival;                   // cancelled before the engine answered
  bool engine_down = false; // the engine (one in another process) went away: every request fails at once
  static inline const char* name = "bridge";
};

using bridge_pointer = caf::stateful_actor<bridge_state>*;

void forward(bridge_pointer self, request_id rid, bridge_event ev) {
  auto& st = self->state;
  auto it = st.tag_of.find(rid);
  if (it == st.tag_of.end()) {
    st.early[rid].push_back(std::move(ev));
    return;
  }
  ev.tag = it->second;
  bool last = ev.what != bridge_event::kind::delta;
  if (last) {
    st.id_of.erase(it->second);
    st.tag_of.erase(it);
  }
  st.push(std::move(ev));
}

void fail_now(bridge_pointer self, const std::string& tag, std::string code, std::string message) {
  bridge_event ev;
  ev.what = bridge_event::kind::failed;
  ev.tag = tag;
  ev.error = {0, std::move(code), std::move(message)};
  self->state.push(std::move(ev));
}

// The engine died: every request in flight fails now, and so does every later one. Those still waiting for their
// id too: a request to a proxy of a dead remote actor is dropped without an answer (CAF 0.17), so their
// generate request may never return.
void on_engine_down(bridge_pointer self) {
  auto& st = self->state;
  st.engine_down = true;
  for (const auto& [tag, rid] : st.id_of)
    fail_now(self, tag, "engine_unavailable", engine_gone_message);
  st.id_of.clear();
  st.tag_of.clear();
  st.early.clear();
  st.cancel_on_arrival.clear();
}

caf::behavior bridge_behavior(bridge_pointer self, engine_actor engine, push_fn push) {
  self->state.engine = std::move(engine);
  self->state.push = std::move(push);
  self->monitor(self->state.engine);
  self->set_down_handler([self](caf::down_msg&) { on_engine_down(self); });
  return {
      [self](bridge_generate_atom, const std::string& tag, request_spec& spec) {
        auto& st = self->state;
        if (st.id_of.contains(tag)) {
          fail_now(self, tag, "duplicate_id", "a request with this id is already in flight on this connection");
          return;
        }
        if (st.engine_down) {
          fail_now(self, tag, "engine_unavailable", engine_gone_message);
          return;
        }
        st.id_of[tag] = 0; // reserved until the engine answers
        self->request(st.engine, caf::infinite, generate_atom::value, std::move(spec),
                      caf::actor_cast<sink_actor>(self))
            .then(
                [self, tag](request_id rid) {
                  auto& st = self->state;
                  if (!st.id_of.contains(tag)) // failed meanwhile: the engine went down
                    return;
                  st.id_of[tag] = rid;
                  st.tag_of[rid] = tag;
                  if (st.cancel_on_arrival.erase(tag) > 0)
                    self->send(st.engine, cancel_atom::value, rid);
                  auto held = st.early.find(rid);
                  if (held != st.early.end()) {
                    auto events = std::move(held->second);
                    st.early.erase(held);
                    for (auto& ev : events)
                      forward(self, rid, std::move(ev));
                  }
                },
                [self, tag](caf::error& err) {
                  auto& st = self->state;
                  if (st.id_of.erase(tag) == 0) // failed already, when the engine went down
                    return;
                  st.cancel_on_arrival.erase(tag);
                  if (st.engine_down || err == caf::sec::request_receiver_down)
                    fail_now(self, tag, "engine_unavailable", engine_gone_message);
                  else
                    fail_now(self, tag, "engine_error", to_string(err));
                });
      },
      [self](bridge_cancel_atom, const std::string& tag) -> bool {
        auto& st = self->state;
        auto it = st.id_of.find(tag);
        if (it == st.id_of.end())
          return false;
        if (it->second == 0) {
          st.cancel_on_arrival[tag] = true;
          return true;
        }
        self->send(st.engine, cancel_atom::value, it->second);
        return true;
      },
      [self](delta& d) {
        bridge_event ev;
        ev.what = bridge_event::kind::delta;
        ev.index = d.index;
        ev.text = std::move(d.text);
        ev.token_ids = std::move(d.token_ids);
        ev.logprobs = std::move(d.logprobs);
        ev.prompt_logprobs = std::move(d.prompt_logprobs);
        ev.prompt_text = std::move(d.prompt_text);
        ev.tool_calls = std::move(d.tool_calls);
        ev.tool_call_index = d.tool_call_index;
        ev.sampled_ns = d.sampled_ns;
        ev.finish_reason = std::move(d.finish_reason);
        forward(self, d.id, std::move(ev));
      },
      [self](finished& f) {
        bridge_event ev;
        ev.what = bridge_event::kind::finished;
        ev.done = f;
        forward(self, f.id, std::move(ev));
      },
      [self](troupe::failed& f) {
        bridge_event ev;
        ev.what = bridge_event::kind::failed;
        ev.error = f;
        forward(self, f.id, std::move(ev));
      },
  };
}

} // namespace

caf::actor spawn_bridge(caf::actor_system& sys, engine_actor engine, push_fn push) {
  return sys.spawn(bridge_behavior, std::move(engine), std::move(push));
}

} // namespace troupe::net
