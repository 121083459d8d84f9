// What a client says to the engine and hears back: a generate request, the deltas
// and the end (finished or failed) that stream to its sink, the served model's
// facts, and their CAF inspect overloads. The engine's own messages, step by step,
// are in actors/protocol.hpp.
#pragma once

#include <caf/atom.hpp>
#include <caf/error.hpp>
#include <caf/meta/load_callback.hpp>
#include <caf/meta/type_name.hpp>
#include <caf/none.hpp>
#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "troupe/ids.hpp"
#include "troupe/sampling_params.hpp"
#include "troupe/tools.hpp"
#include "troupe/wire_bits.hpp"

namespace troupe {

// Atoms of the client's conversation (at most 10 characters: CAF 0.17 encodes them in 60 bits).
using generate_atom = caf::atom_constant<caf::atom("generate")>;
using cancel_atom = caf::atom_constant<caf::atom("cancel")>;
using stats_atom = caf::atom_constant<caf::atom("stats")>;
using info_atom = caf::atom_constant<caf::atom("info")>;
using tokenize_atom = caf::atom_constant<caf::atom("tokenize")>;
using detok_atom = caf::atom_constant<caf::atom("detokenize")>;

// ---------------------------------------------------------------------------
// A generate request.

struct chat_turn {
  std::string role; // system | user | assistant | tool
  std::string content;
  std::vector<tool_call> tool_calls; // assistant: the calls it made (content may then be empty)
  std::string tool_call_id;          // tool: the call this message answers
};

struct request_spec {
  std::string prompt;               // tokenized by the engine when prompt_ids and messages are empty
  std::vector<token_id> prompt_ids; // used as given when not empty
  std::vector<chat_turn> messages;  // a chat: rendered with the model's chat format, then tokenized
  bool add_special_tokens = true;   // BOS etc. when tokenizing `prompt`
  sampling_params params;
  int priority = 0;                // lower = more urgent (scheduler-policy=priority)
  int num_speculative_tokens = -1; // -1: the engine's setting; 0: never speculate; n: at most n draft tokens
  bool echo = false;               // the first delta carries the prompt's text (OpenAI's echo)
  // Chat only: the functions offered to the model (rendered into the prompt in the chat
  // format's tool syntax unless tool_choice is none) and which must be called. The
  // model's calls come back parsed, in delta::tool_calls.
  std::vector<tool_function> tools;
  tool_choice choice_of_tool;
  bool parallel_tool_calls = true; // false: at most one call per choice
  // Chat only: vLLM's chat_template_kwargs.enable_thinking, Qwen3's switch. false: the prompt
  // ends in an empty think block, so the model answers without thinking. A template without
  // the switch ignores it, as Jinja ignores a variable it does not use.
  bool enable_thinking = true;
};

// ---------------------------------------------------------------------------
// What streams back to the client's sink.

// One token's log-probability with its text, and the alternatives the request asked for.
struct logprob_alternative {
  token_id id = 0;
  std::string token; // the token's own text (valid UTF-8; a lone byte shows as U+FFFD)
  float logprob = 0.0f;
};
struct token_logprob {
  token_id id = 0;
  std::string token;
  float logprob = 0.0f;                 // NaN for a prompt's first token (nothing predicts it)
  std::vector<logprob_alternative> top; // most likely first
};

struct delta {
  request_id id = 0;
  int index = 0;                              // the choice (0 .. n-1) these tokens belong to
  std::string text;                           // new text, never half a UTF-8 character
  std::vector<token_id> token_ids;            // the tokens that produced it
  std::vector<token_logprob> logprobs;        // one per token_ids entry, when params.logprobs >= 0
  std::vector<token_logprob> prompt_logprobs; // first delta only, when params.prompt_logprobs >= 0
  std::string prompt_text;                    // first delta only, when the request asked for echo
  std::int64_t sampled_ns = 0;                // steady_clock time the executor produced these tokens
  // Calls the model completed in these tokens (their text is not in `text`), each whole,
  // numbered within the choice from 0 (tool_call_index of the first).
  std::vector<tool_call> tool_calls;
  int tool_call_index = 0;
  // Non-empty on the last delta of choice `index`: "stop" | "length" | "tool_calls" (a choice that made a call and
  // then stopped; each choice ends with exactly one such delta, maybe without text). A cancelled request's unfinished choices end with finished::reason instead.
  std::string finish_reason;
};

struct usage_info {
  int prompt_tokens = 0;
  int completion_tokens = 0;
  int cached_tokens = 0; // prompt tokens served by the prefix cache
};

struct timings_info {
  double queue_ms = 0; // arrival -> first scheduled
  double ttft_ms = 0;  // arrival -> first token
  double tpot_ms = 0;  // mean time per output token after the first
  double e2e_ms = 0;   // arrival -> finished
};

struct finished {
  request_id id = 0;
  std::string reason; // "cancelled", or choice 0's finish_reason ("stop" | "length")
  usage_info usage;   // completion_tokens: every choice's tokens, best_of's unreturned ones included
  timings_info timings;
};

struct failed {
  request_id id = 0;
  // invalid_request | prompt_too_long: the request's own fault (HTTP 400);
  // step_failed: the model step it was in failed (the engine goes on without it);
  // tokenizer_error: its prompt or output could not be (de)tokenized;
  // engine_error: a part of the engine failed for good.
  std::string code;
  std::string message;
};

// A client's receiver of deltas; every request ends with one finished or one failed.
using sink_actor = caf::typed_actor<caf::reacts_to<delta>, caf::reacts_to<finished>, caf::reacts_to<failed>>;

// What a front end needs to know of the served model.
struct model_info {
  std::string name; // the model folder's name
  int max_model_len = 0;
  int vocab_size = 0;
  std::string chat_format; // plain | llama2 | llama3 | chatml | mistral
};

// ---------------------------------------------------------------------------
// inspect overloads (CAF needs one per message type).

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, token_bias& x) {
  auto bias = bits_of(x.bias);
  return f(caf::meta::type_name("token_bias"), x.id, bias);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, output_constraint& x) {
  return f(caf::meta::type_name("output_constraint"), x.type, x.text, x.choices);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, sampling_params& x) {
  bool has_seed = x.seed.has_value();
  std::uint64_t seed = x.seed.value_or(0);
  auto load = caf::meta::load_callback([&]() -> caf::error {
    x.seed = has_seed ? std::optional<std::uint64_t>(seed) : std::nullopt;
    return caf::none;
  });
  auto temperature = bits_of(x.temperature), top_p = bits_of(x.top_p), min_p = bits_of(x.min_p);
  auto repetition = bits_of(x.repetition_penalty), frequency = bits_of(x.frequency_penalty),
       presence = bits_of(x.presence_penalty);
  return f(caf::meta::type_name("sampling_params"), temperature, top_p, x.top_k, min_p, has_seed, seed, repetition,
           frequency, presence, x.max_tokens, x.stop, x.stop_token_ids, x.ignore_eos, x.logprobs, x.prompt_logprobs,
           x.min_tokens, x.logit_bias, x.n, x.best_of, x.constraint, load);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, tool_call& x) {
  return f(caf::meta::type_name("tool_call"), x.id, x.name, x.arguments);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, tool_function& x) {
  return f(caf::meta::type_name("tool_function"), x.name, x.description, x.parameters);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, tool_choice& x) {
  return f(caf::meta::type_name("tool_choice"), x.type, x.function);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, chat_turn& x) {
  return f(caf::meta::type_name("chat_turn"), x.role, x.content, x.tool_calls, x.tool_call_id);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, request_spec& x) {
  return f(caf::meta::type_name("request_spec"), x.prompt, x.prompt_ids, x.messages, x.add_special_tokens, x.params,
           x.priority, x.num_speculative_tokens, x.echo, x.tools, x.choice_of_tool, x.parallel_tool_calls,
           x.enable_thinking);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, model_info& x) {
  return f(caf::meta::type_name("model_info"), x.name, x.max_model_len, x.vocab_size, x.chat_format);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, delta& x) {
  return f(caf::meta::type_name("delta"), x.id, x.text, x.token_ids, x.logprobs, x.prompt_logprobs, x.prompt_text,
           x.sampled_ns, x.tool_calls, x.tool_call_index, x.index, x.finish_reason);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, logprob_alternative& x) {
  auto logprob = bits_of(x.logprob);
  return f(caf::meta::type_name("logprob_alternative"), x.id, x.token, logprob);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, token_logprob& x) {
  auto logprob = bits_of(x.logprob);
  return f(caf::meta::type_name("token_logprob"), x.id, x.token, logprob, x.top);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, usage_info& x) {
  return f(caf::meta::type_name("usage_info"), x.prompt_tokens, x.completion_tokens, x.cached_tokens);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, timings_info& x) {
  auto queue = bits_of(x.queue_ms), ttft = bits_of(x.ttft_ms), tpot = bits_of(x.tpot_ms), e2e = bits_of(x.e2e_ms);
  return f(caf::meta::type_name("timings_info"), queue, ttft, tpot, e2e);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, finished& x) {
  return f(caf::meta::type_name("finished"), x.id, x.reason, x.usage, x.timings);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, failed& x) {
  return f(caf::meta::type_name("failed"), x.id, x.code, x.message);
}

} // namespace troupe
