// What a request asks of the sampler and of the stop logic, with the OpenAI /
// vLLM meanings, defaults and ranges. Plain C++ (runtime/ uses this type too);
// its CAF inspect overload is in troupe/messages.hpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "troupe/ids.hpp"

namespace troupe {

// max_tokens when a request does not say (OpenAI's default for /v1/completions).
inline constexpr int default_max_tokens = 16;
// temperature's upper end (OpenAI's range is [0, 2]).
inline constexpr float max_temperature = 2.0f;
// The most top alternatives a request may ask for (vLLM's default max_logprobs).
inline constexpr int max_logprobs = 20;
// logit_bias: at most this many entries (OpenAI's limit), each in [-max_logit_bias, max_logit_bias].
inline constexpr int max_logit_bias_entries = 300;
inline constexpr float max_logit_bias = 100.0f;
// n and best_of: at most this many choices per request (OpenAI's limit for n).
inline constexpr int max_choices = 128;

// Structured output: the output must be a sentence of a JSON schema, a regex, a grammar or one
// of a list of strings (OpenAI response_format, vLLM guided_* / structured_outputs). Sizes:
inline constexpr std::size_t max_constraint_text_bytes = 64 * 1024; // a schema's JSON, a regex, a grammar
inline constexpr int max_constraint_choices = 1024;

struct output_constraint {
  enum class kind : std::uint8_t { none, json_object, json_schema, regex, choice, grammar, tool_calls };
  kind type = kind::none;
  // json_schema: the schema as JSON text; regex: the pattern (the whole output matches it);
  // grammar: GBNF (llama.cpp's grammar format, root rule `root`); tool_calls: the chat format's
  // tool-call syntax around calls of the listed tools (set by the engine for a chat request
  // whose tool_choice is required or a function; its JSON is the engine's own); unused otherwise.
  std::string text;
  std::vector<std::string> choices; // choice: the output is exactly one of them
  bool empty() const { return type == kind::none; }
  bool operator==(const output_constraint&) const = default;
};

// The names the APIs use for each kind ("json_schema", "regex", ...).
const char* to_string(output_constraint::kind k);

// One logit_bias entry: bias is added to the token's logit before the sampler's transforms.
struct token_bias {
  token_id id = 0;
  float bias = 0.0f;
  bool operator==(const token_bias&) const = default;
};

struct sampling_params {
  float temperature = 1.0f;            // [0, max_temperature]; 0 = greedy
  float top_p = 1.0f;                  // (0, 1]
  int top_k = 0;                       // 0 or -1 = off
  float min_p = 0.0f;                  // [0, 1]
  std::optional<std::uint64_t> seed;   // same seed -> same draws; the same tokens whatever else is in the batch
                                       // on the CPU backend, and on the GPU with engine.deterministic
  float repetition_penalty = 1.0f;     // > 0; over prompt and output (HF / vLLM)
  float frequency_penalty = 0.0f;      // [-2, 2]; over output (OpenAI)
  float presence_penalty = 0.0f;       // [-2, 2]; over output (OpenAI)
  int max_tokens = default_max_tokens; // >= 1
  int min_tokens = 0; // [0, max_tokens]: no stop id nor stop string ends the output before this many tokens (vLLM)
  std::vector<std::string> stop;        // stop strings: matched across token boundaries, not emitted
  std::vector<token_id> stop_token_ids; // extra stop ids besides the model's defaults
  bool ignore_eos = false;              // don't stop on the model's default stop ids
  int logprobs = -1;                    // -1: none; n in [0, max_logprobs]: each output token's logprob plus the top n
  int prompt_logprobs = -1;             // -1: none; n >= 0: the same for every prompt token after the first
  std::vector<token_bias> logit_bias;   // at most max_logit_bias_entries, distinct ids (OpenAI's logit_bias)
  // n choices are returned; best_of (0: n) are generated and the n with the highest sum of their tokens' logprobs
  // returned. They share the prompt's KV blocks. Every choice is its own stream of deltas (delta::index).
  int n = 1;       // [1, max_choices]
  int best_of = 0; // 0, or [n, max_choices]
  // The output is constrained to this (none: free text). Compiled at admission (a bad schema,
  // regex or grammar is the request's error); the output ends with a stop id once complete.
  output_constraint constraint;

  // The one statement of the ranges above: the engine checks every request with it,
  // the server every HTTP and WebSocket request before it reaches the engine. Throws
  // invalid_argument_error whose param names the field and whose message says the
  // allowed range and the value ("top_p must be in (0, 1], got 0").
  void validate() const;
  bool greedy() const { return temperature == 0.0f; }
  // The sequences the request generates: best_of, or n.
  int choices() const { return best_of > 0 ? best_of : n; }
};

} // namespace troupe
