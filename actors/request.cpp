// Request actor: validation, detokenization, stop strings, timings.
#include "actors/request.hpp"

#include <algorithm>
#include <chrono>
#include <limits>
#include <optional>
#include <random>

#include "runtime/choices.hpp"
#include "runtime/errors.hpp"
#include "runtime/finish_check.hpp"
#include "runtime/incremental_detokenizer.hpp"
#include "runtime/stop_matcher.hpp"
#include "runtime/tools/tool_call_parser.hpp"
#include "runtime/tools/tool_request.hpp"

namespace troupe::actors {

namespace {

using clock = std::chrono::steady_clock;

// One choice (n / best_of) of the request: its text so far and how it ended.
struct choice_state {
  std::unique_ptr<runtime::incremental_detokenizer> detok;
  std::unique_ptr<runtime::stop_matcher> stops;
  std::unique_ptr<runtime::tools::tool_call_parser> tool_calls; // when the request offers tools
  int tokens = 0;
  double cumulative_logprob = 0; // best_of's ranking: the sum of its tokens' logprobs
  bool first_delta_sent = false;
  std::string finish_reason; // set once it ended
  std::vector<delta> held;   // best_of > n: its deltas wait until every choice has ended
};

struct request_state {
  request_id id = 0;
  sink_actor sink;
  std::shared_ptr<const request_context> ctx;
  std::vector<token_id> prompt_ids;
  runtime::sampling_params params;
  std::vector<choice_state> choices; // params.choices() of them
  int choices_running = 0;
  bool client_logprobs = false; // the client asked for logprobs (best_of asks the engine for them anyway)
  clock::time_point arrival = clock::now();
  std::optional<clock::time_point> first_token, first_scheduled;
  int cached_tokens = 0;
  bool echo = false;                                           // the first delta of each choice carries the prompt text
  std::string prompt_text;                                     // the prompt as the client gave it (echo)
  std::vector<token_logprob> prompt_logprobs;                  // when asked: on the first delta of each choice
  std::mt19937_64 call_ids{std::random_device{}()};            // names the model's tool calls
  bool done = false;                                           // finished or failed was sent
  std::shared_ptr<bool> ended = std::make_shared<bool>(false); // the same, for the exit functor
  static inline const char* name = "request";
};

using request_pointer = request_actor::stateful_pointer<request_state>;

// A token's own text for logprobs, special tokens included. decode() answers
// valid UTF-8: a byte-fallback token alone (half a character) shows as U+FFFD.
std::string token_text(const runtime::tokenizer& tok, token_id id) {
  const token_id one[] = {id};
  return tok.decode(one, /*skip_special_tokens=*/false);
}

token_logprob with_text(const runtime::tokenizer& tok, const runtime::token_logprobs& lp) {
  token_logprob out{lp.token, token_text(tok, lp.token), lp.logprob, {}};
  for (std::size_t i = 0; i < lp.top_ids.size(); ++i)
    out.top.push_back({lp.top_ids[i], token_text(tok, lp.top_ids[i]), lp.top_logprobs[i]});
  return out;
}

double ms_between(clock::time_point a, clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// The scheduler's sequences of the choices still running: cancel, a failure, the client gone.
void abort_running_choices(request_pointer self) {
  auto& st = self->state;
  for (std::size_t i = 0; i < st.choices.size(); ++i)
    if (st.choices[i].finish_reason.empty())
      self->send(st.ctx->scheduler, abort_atom::value, runtime::choice_seq_id(st.id, static_cast<int>(i)));
}

void fail(request_pointer self, std::string code, std::string message) {
  auto& st = self->state;
  if (st.done)
    return;
  abort_running_choices(self);
  st.done = *st.ended = true;
  self->send(st.sink, failed{st.id, std::move(code), std::move(message)});
  self->quit();
}

void finish(request_pointer self, std::string reason) {
  auto& st = self->state;
  if (st.done)
    return;
  st.done = *st.ended = true;
  auto now = clock::now();
  finished f;
  f.id = st.id;
  f.reason = std::move(reason);
  int completion_tokens = 0;
  for (const auto& c : st.choices)
    completion_tokens += c.tokens;
  f.usage = {static_cast<int>(st.prompt_ids.size()), completion_tokens, st.cached_tokens};
  f.timings.e2e_ms = ms_between(st.arrival, now);
  if (st.first_scheduled)
    f.timings.queue_ms = ms_between(st.arrival, *st.first_scheduled);
  if (st.first_token) {
    f.timings.ttft_ms = ms_between(st.arrival, *st.first_token);
    // Per output token of one choice: the choices decode side by side.
    const int per_choice = completion_tokens / std::max<int>(1, static_cast<int>(st.choices.size()));
    if (per_choice > 1)
      f.timings.tpot_ms = ms_between(*st.first_token, now) / (per_choice - 1);
  }
  self->send(st.sink, std::move(f));
  self->quit();
}

// Tokenizes and validates; on success returns the sequence to schedule.
std::optional<sequence_spec> admit(request_pointer self, request_spec& spec) {
  auto& st = self->state;
  const auto& ctx = *st.ctx;
  runtime::tools::tool_plan tools;
  try {
    spec.params.validate();
    tools = runtime::tools::plan_tools(ctx.chat, !spec.messages.empty(), spec.tools, spec.choice_of_tool,
                                       spec.parallel_tool_calls, spec.params.constraint);
    if (!tools.constraint.empty())
      spec.params.constraint = tools.constraint;
    if (!spec.params.constraint.empty()) {
      if (!ctx.constraints)
        throw runtime::invalid_argument_error("this engine does not take structured-output constraints",
                                              "response_format");
      ctx.constraints->get(spec.params.constraint); // compiled now, so that a bad one fails here
    }
    if (spec.prompt_ids.empty())
      runtime::maybe_throw(ctx.faults.get(), runtime::fault_point::tokenizer);
    if (!spec.prompt_ids.empty()) {
      st.prompt_ids = std::move(spec.prompt_ids);
    } else if (!spec.messages.empty()) {
      std::vector<runtime::chat_message> chat;
      for (auto& m : spec.messages)
        chat.push_back({std::move(m.role), std::move(m.content), std::move(m.tool_calls), std::move(m.tool_call_id)});
      // A template without the switch ignores enable_thinking, as Jinja ignores a variable it does not use.
      const runtime::chat_options options{.enable_thinking = spec.enable_thinking || !ctx.thinking_switch};
      auto text = runtime::render_chat(ctx.chat, chat, ctx.default_system, tools.prompt_tools, options);
      st.prompt_ids = ctx.tokenizer->encode(text, !runtime::rendered_includes_bos(ctx.chat));
    } else {
      st.prompt_ids = ctx.tokenizer->encode(spec.prompt, spec.add_special_tokens);
    }
  } catch (const runtime::invalid_argument_error& e) {
    fail(self, "invalid_request", e.what());
    return std::nullopt;
  } catch (const std::exception& e) {
    fail(self, "tokenizer_error", std::string("the prompt could not be tokenized: ") + e.what());
    return std::nullopt;
  }
  if (st.prompt_ids.empty()) {
    fail(self, "invalid_request", "the prompt is empty");
    return std::nullopt;
  }
  for (auto t : st.prompt_ids)
    if (t < 0 || t >= ctx.vocab_size) {
      fail(self, "invalid_request",
           "prompt token id " + std::to_string(t) + " is outside the vocabulary (0.." +
               std::to_string(ctx.vocab_size - 1) + ")");
      return std::nullopt;
    }
  for (const auto& b : spec.params.logit_bias)
    if (b.id >= ctx.vocab_size) {
      fail(self, "invalid_request",
           "logit_bias token id " + std::to_string(b.id) + " is outside the vocabulary (0.." +
               std::to_string(ctx.vocab_size - 1) + ")");
      return std::nullopt;
    }
  if (static_cast<int>(st.prompt_ids.size()) >= ctx.max_model_len) {
    fail(self, "prompt_too_long",
         "the prompt has " + std::to_string(st.prompt_ids.size()) + " tokens; this model's context is " +
             std::to_string(ctx.max_model_len) + " tokens, and at least one must be left for the output");
    return std::nullopt;
  }
  const int choices = spec.params.choices();
  if (choices > ctx.max_num_seqs) {
    fail(self, "invalid_request",
         std::string(spec.params.best_of > 0 ? "best_of" : "n") + " = " + std::to_string(choices) + " needs " +
             std::to_string(choices) + " sequences at once; this engine runs at most " +
             std::to_string(ctx.max_num_seqs) + " (engine.max-num-seqs)");
    return std::nullopt;
  }
  st.params = spec.params;
  st.client_logprobs = spec.params.logprobs >= 0;
  // best_of ranks the choices by their tokens' logprobs: the engine computes them even when the client did not ask.
  if (choices > spec.params.n && spec.params.logprobs < 0)
    spec.params.logprobs = 0;
  st.echo = spec.echo;
  if (st.echo)
    st.prompt_text = !spec.prompt.empty() ? spec.prompt : ctx.tokenizer->decode(st.prompt_ids);
  st.choices.resize(static_cast<std::size_t>(choices));
  for (auto& c : st.choices) {
    c.detok = std::make_unique<runtime::incremental_detokenizer>(*ctx.tokenizer, st.prompt_ids);
    c.stops = std::make_unique<runtime::stop_matcher>(spec.params.stop);
    if (tools.parse_calls)
      c.tool_calls = std::make_unique<runtime::tools::tool_call_parser>(runtime::tools::tool_syntax_for(ctx.chat));
  }
  st.choices_running = choices;
  sequence_spec seq;
  seq.id = st.id;
  seq.prompt_ids = st.prompt_ids;
  seq.params = spec.params;
  seq.seed = spec.params.seed ? *spec.params.seed : std::random_device{}() * 0x9e3779b97f4a7c15ULL + st.id;
  seq.priority = spec.priority;
  seq.num_speculative_tokens = spec.num_speculative_tokens;
  seq.stop_ids = runtime::stop_ids_for(spec.params, ctx.default_stop_ids);
  return seq;
}

// best_of > n: every choice has ended; the n best go to the client, re-indexed best first.
void send_best_choices(request_pointer self) {
  auto& st = self->state;
  std::vector<double> scores;
  for (const auto& c : st.choices)
    scores.push_back(c.cumulative_logprob);
  const auto best = runtime::best_choices(scores, st.params.n);
  for (std::size_t rank = 0; rank < best.size(); ++rank)
    for (auto& d : st.choices[static_cast<std::size_t>(best[rank])].held) {
      d.index = static_cast<int>(rank);
      self->send(st.sink, std::move(d));
    }
  // finished::reason is the first returned choice's.
  std::swap(st.choices[0].finish_reason, st.choices[static_cast<std::size_t>(best.front())].finish_reason);
}

// The delta's text goes through the choice's tool-call parser: text that is a call leaves
// d.text and comes back as a named call in d.tool_calls.
void split_tool_calls(request_state& st, choice_state& choice, delta& d, bool ended) {
  d.tool_call_index = choice.tool_calls->calls_made();
  auto out = choice.tool_calls->push(d.text);
  if (ended) {
    auto tail = choice.tool_calls->flush();
    out.text += tail.text;
    for (auto& c : tail.calls)
      out.calls.push_back(std::move(c));
  }
  d.text = std::move(out.text);
  for (auto& c : out.calls) {
    c.id = runtime::tools::new_call_id(choice.tool_calls->syntax(), st.call_ids);
    d.tool_calls.push_back(std::move(c));
  }
}

// A choice's new tokens become a delta: text (never half a character, stop strings cut), logprobs, and its end.
void on_tokens(request_pointer self, sequence_tokens& msg) {
  auto& st = self->state;
  if (st.done)
    return;
  const int index = runtime::choice_index(msg.id);
  if (index < 0 || index >= static_cast<int>(st.choices.size()))
    return;
  auto& choice = st.choices[static_cast<std::size_t>(index)];
  if (!choice.finish_reason.empty())
    return; // ended by a stop string: what its sequence computed meanwhile is not part of it
  auto now = clock::now();
  if (!st.first_token) {
    st.first_token = now;
    st.first_scheduled = clock::time_point(clock::duration(msg.first_scheduled_ns));
  }
  if (index == 0 && st.cached_tokens == 0)
    st.cached_tokens = msg.cached_tokens;
  delta d;
  d.id = st.id;
  d.index = index;
  d.sampled_ns = msg.sampled_ns;
  const auto& tok = *st.ctx->tokenizer;
  if (!choice.first_delta_sent) {
    if (st.echo)
      d.prompt_text = st.prompt_text;
    if (st.params.prompt_logprobs >= 0) {
      if (st.prompt_logprobs.empty()) {
        // Nothing predicts the first prompt token: its logprob is NaN (null on the wire).
        st.prompt_logprobs.push_back(
            {st.prompt_ids[0], token_text(tok, st.prompt_ids[0]), std::numeric_limits<float>::quiet_NaN(), {}});
        for (const auto& lp : msg.prompt_logprobs)
          st.prompt_logprobs.push_back(with_text(tok, lp));
      }
      d.prompt_logprobs = st.prompt_logprobs;
    }
  }
  bool stopped_by_string = false;
  try {
    for (std::size_t i = 0; i < msg.ids.size(); ++i) {
      const token_id t = msg.ids[i];
      ++choice.tokens;
      d.token_ids.push_back(t);
      if (i < msg.logprobs.size()) {
        choice.cumulative_logprob += msg.logprobs[i].logprob;
        if (st.client_logprobs)
          d.logprobs.push_back(with_text(tok, msg.logprobs[i]));
      }
      // A stop token ends the sequence and is not text.
      if (msg.finish_reason == "stop" && t == msg.ids.back())
        break;
      runtime::maybe_throw(st.ctx->faults.get(), runtime::fault_point::tokenizer);
      auto piece = choice.stops->push(choice.detok->push(t), choice.tokens >= st.params.min_tokens);
      d.text += piece.text;
      if (piece.stopped) {
        stopped_by_string = true;
        break;
      }
    }
    if (!stopped_by_string && !msg.finish_reason.empty()) {
      auto tail = choice.stops->push(choice.detok->flush());
      d.text += tail.text;
      if (!tail.stopped)
        d.text += choice.stops->flush();
    }
  } catch (const std::exception& e) {
    // This request's text is lost, nobody else's: its sequences stop, the client hears why.
    // This choice's sequence stops here (unless it just ended); fail() aborts the other choices.
    if (msg.finish_reason.empty())
      self->send(st.ctx->scheduler, abort_atom::value, msg.id);
    choice.finish_reason = "failed";
    fail(self, "tokenizer_error", std::string("the output could not be detokenized: ") + e.what());
    return;
  }
  if (choice.tool_calls)
    split_tool_calls(st, choice, d, stopped_by_string || !msg.finish_reason.empty());
  if (stopped_by_string) {
    self->send(st.ctx->scheduler, abort_atom::value, msg.id);
    choice.finish_reason = "stop";
  } else if (!msg.finish_reason.empty()) {
    choice.finish_reason = msg.finish_reason;
  }
  // OpenAI's reason for a reply that made calls and then stopped.
  if (choice.finish_reason == "stop" && choice.tool_calls && choice.tool_calls->calls_made() > 0)
    choice.finish_reason = "tool_calls";
  d.finish_reason = choice.finish_reason;
  if (!d.text.empty() || !d.token_ids.empty() || !d.prompt_text.empty() || !d.finish_reason.empty() ||
      !d.tool_calls.empty()) {
    choice.first_delta_sent = true;
    if (static_cast<int>(st.choices.size()) > st.params.n)
      choice.held.push_back(std::move(d));
    else
      self->send(st.sink, std::move(d));
  }
  if (choice.finish_reason.empty() || --st.choices_running > 0)
    return;
  if (static_cast<int>(st.choices.size()) > st.params.n)
    send_best_choices(self);
  finish(self, st.choices[0].finish_reason);
}

request_actor::behavior_type request_behavior(request_pointer self, request_id id, request_spec spec, sink_actor sink,
                                              std::shared_ptr<const request_context> ctx) {
  auto& st = self->state;
  st.id = id;
  st.sink = std::move(sink);
  st.ctx = std::move(ctx);
  // However this actor ends (an engine failure or shutdown included), the client hears of it.
  // (The functor may run after the state is gone: it holds copies, and a shared flag.)
  // Its sequence is aborted too, so that an unexpected end frees the sequence's blocks.
  self->attach_functor([sink = st.sink, id = st.id, ended = st.ended, scheduler = st.ctx->scheduler,
                        choices = spec.params.choices()](const caf::error& reason) {
    if (*ended)
      return;
    for (int i = 0; i < std::clamp(choices, 1, max_choices); ++i) // aborting an ended choice is a no-op
      caf::anon_send(scheduler, abort_atom::value, runtime::choice_seq_id(id, i));
    caf::anon_send(sink, failed{id, "engine_error", "the request ended unexpectedly: " + to_string(reason)});
  });
  if (auto seq = admit(self, spec)) { // else it failed and has quit already
    // The client may go away at any time: then the sequence is aborted and its blocks come back.
    self->monitor(st.sink);
    self->set_down_handler([self](const caf::down_msg&) {
      abort_running_choices(self);
      self->state.done = *self->state.ended = true; // nobody is left to tell
      self->quit();
    });
    self->send(st.ctx->scheduler, enqueue_atom::value, std::move(*seq), caf::actor_cast<request_actor>(self));
  }
  return {
      [self](tokens_atom, sequence_tokens& msg) { on_tokens(self, msg); },
      [self](failed& f) {
        f.id = self->state.id;
        fail(self, std::move(f.code), std::move(f.message));
      },
      [self](cancel_atom) {
        if (self->state.done)
          return;
        abort_running_choices(self);
        finish(self, "cancelled");
      },
  };
}

} // namespace

request_actor spawn_request(caf::actor_system& sys, request_id id, request_spec spec, sink_actor sink,
                            std::shared_ptr<const request_context> ctx) {
  return sys.spawn(request_behavior, id, std::move(spec), std::move(sink), std::move(ctx));
}

} // namespace troupe::actors
