// The request actor: one per generate request. It tokenizes and validates the
// request, hands the sequence to the scheduler, turns the sequence's tokens
// into text (never half a UTF-8 character, stop strings held back and cut),
// streams deltas to the client's sink and ends with finished or failed. It
// watches the sink: when the client goes away, the sequence is aborted.
#pragma once

#include <memory>

#include "actors/protocol.hpp"
#include "runtime/chat_template.hpp"
#include "runtime/fault_injector.hpp"
#include "runtime/structured/constraint_cache.hpp"
#include "runtime/tokenizer.hpp"

namespace troupe::actors {

struct request_context {
  std::shared_ptr<const runtime::tokenizer> tokenizer;
  std::vector<token_id> default_stop_ids; // the model's; dropped by ignore_eos
  int max_model_len = 0;
  int vocab_size = 0;
  int max_num_seqs = 1;                                    // n / best_of may ask for at most this many choices
  runtime::chat_format chat = runtime::chat_format::plain; // how `messages` become a prompt
  std::string default_system;                              // the template's system message, if it has one
  bool thinking_switch = false;                            // the template takes Qwen3's enable_thinking
  std::string model_name;
  scheduler_actor scheduler;
  std::shared_ptr<runtime::fault_injector> faults; // [debug] faults, or null
  // Structured output: compiled at admission (a bad constraint is the request's 400), found
  // again by the executor. Null: requests with a constraint are refused.
  std::shared_ptr<runtime::structured::constraint_cache> constraints;
};

// The engine links itself to the returned actor, so an engine shutdown ends it too.
request_actor spawn_request(caf::actor_system& sys, request_id id, request_spec spec, sink_actor sink,
                            std::shared_ptr<const request_context> ctx);

} // namespace troupe::actors
