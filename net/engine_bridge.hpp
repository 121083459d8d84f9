// The bridge between one network session and the engine: an actor that sends
// the session's generate and cancel requests to the engine, acts as the sink
// of their streams, and hands every event back to the session through a push
// function (which hops onto the session's strand). Client ids ("tags") are
// mapped to engine request ids here, so a session never sees engine ids.
#pragma once

#include <chrono>
#include <functional>
#include <string>

#include <caf/all.hpp>

#include "troupe/engine.hpp"

namespace troupe::net {

struct bridge_event {
  enum class kind { delta, finished, failed };
  kind what = kind::delta;
  std::string tag;                            // the client's id for the request
  int index = 0;                              // delta: the choice (0 .. n-1) it belongs to
  std::string text;                           // delta
  std::vector<token_id> token_ids;            // delta
  std::vector<token_logprob> logprobs;        // delta, when asked: one per token id
  std::vector<token_logprob> prompt_logprobs; // first delta, when asked
  std::string prompt_text;                    // first delta, when echo was asked
  std::int64_t sampled_ns = 0;                // delta: steady_clock time the executor produced its tokens
  std::vector<tool_call> tool_calls;          // delta: calls completed in it, numbered from tool_call_index
  int tool_call_index = 0;
  std::string finish_reason;                  // delta: "stop" | "length" | "tool_calls" on the choice's last delta
  troupe::finished done;                      // finished
  troupe::failed error;                       // failed
};

using push_fn = std::function<void(bridge_event)>;

// The message of an engine_unavailable failure: the bridge's, and the server's once it saw the engine go.
inline constexpr const char* engine_gone_message =
    "the engine went away (its process ended or its host cannot be reached)";

// Messages a session sends to its bridge.
using bridge_generate_atom = caf::atom_constant<caf::atom("bgenerate")>;
using bridge_cancel_atom = caf::atom_constant<caf::atom("bcancel")>;

// Spawns a bridge for one session. The session must send it exit when it goes
// away: the engine then sees the sink die and aborts whatever is still running.
caf::actor spawn_bridge(caf::actor_system& sys, engine_actor engine, push_fn push);

} // namespace troupe::net
