// The completions and chat request parsers: the endpoint-specific fields here,
// the shared ones in sampling_fields and prompt_fields.
#include "net/openai_requests.hpp"

#include <algorithm>

#include "net/json_fields.hpp"
#include "net/prompt_fields.hpp"
#include "net/sampling_fields.hpp"
#include "net/tool_fields.hpp"

namespace troupe::net {

namespace {

// user: accepted and ignored, but it must be a string.
void read_user(const boost::json::object& body) {
  read_string(body, "user");
}

// OpenAI's rule: with best_of > n the n best are known only once every choice has ended,
// so there is nothing to stream.
void refuse_streamed_best_of(const sampling_params& p, bool stream) {
  require(!stream || p.best_of <= p.n,
          "best_of > n cannot be streamed (best_of " + std::to_string(p.best_of) + ", n " + std::to_string(p.n) +
              "): set stream to false, or best_of to n",
          "best_of");
}

// stream and stream_options.include_usage; stream_options only with stream, as OpenAI requires.
void read_streaming(const boost::json::object& body, bool& stream, bool& include_usage) {
  stream = read_bool(body, "stream").value_or(false);
  auto* options = find_field(body, "stream_options");
  if (!options)
    return;
  if (!options->is_object())
    reject("'stream_options' must be an object", "stream_options");
  require(stream, "stream_options is only allowed when stream is true", "stream_options");
  if (auto* usage = find_field(options->get_object(), "include_usage"))
    include_usage = to_bool(*usage, "stream_options.include_usage");
}
} // namespace

std::variant<completion_request, api_error> parse_completion_request(std::string_view text,
                                                                     const request_limits& limits) {
  try {
    boost::json::monotonic_resource arena;
    auto body = parse_object(text, limits.max_json_depth, &arena);
    completion_request req;
    req.model = std::string(read_string(body, "model").value_or(""));
    auto* prompt = find_field(body, "prompt");
    if (!prompt)
      reject("'prompt' is required", "prompt");
    read_prompt(*prompt, limits, req.spec);
    if (auto suffix = read_string(body, "suffix"))
      require(suffix->empty(), "suffix is not supported", "suffix");
    read_user(body);
    read_streaming(body, req.stream, req.include_usage);
    req.echo = read_bool(body, "echo").value_or(false);
    req.logprobs = read_logprobs_count(body, "logprobs", limits);
    if (auto b = read_bool(body, "add_special_tokens"))
      req.spec.add_special_tokens = *b;
    read_sampling_fields(body, limits, default_max_tokens, req.spec);
    req.spec.params.logprobs = req.logprobs;
    req.spec.echo = req.echo;
    // echo with logprobs scores the prompt too (OpenAI: the prompt's tokens lead the logprobs).
    if (req.echo && req.logprobs >= 0 && req.spec.params.prompt_logprobs < 0)
      req.spec.params.prompt_logprobs = req.logprobs;
    validate_sampling(req.spec.params);
    refuse_streamed_best_of(req.spec.params, req.stream);
    return req;
  } catch (const request_rejected& r) {
    return r.error();
  }
}

std::variant<chat_request, api_error> parse_chat_request(std::string_view text, const request_limits& limits) {
  try {
    boost::json::monotonic_resource arena;
    auto body = parse_object(text, limits.max_json_depth, &arena);
    chat_request req;
    req.model = std::string(read_string(body, "model").value_or(""));
    auto* messages = find_field(body, "messages");
    if (!messages)
      reject("'messages' is required", "messages");
    req.spec.messages = read_messages(*messages);
    read_tool_fields(body, req.spec);
    read_chat_template_kwargs(body, req.spec);
    read_user(body);
    read_streaming(body, req.stream, req.include_usage);
    bool logprobs = read_bool(body, "logprobs").value_or(false);
    int top = read_logprobs_count(body, "top_logprobs", limits);
    require(top < 0 || logprobs, "top_logprobs requires logprobs to be true", "top_logprobs");
    req.top_logprobs = logprobs ? std::max(top, 0) : -1;
    // The chat template writes BOS and friends itself (vLLM's default for chat).
    req.spec.add_special_tokens = read_bool(body, "add_special_tokens").value_or(false);
    // No max_tokens means "until the context is full"; the engine stops at the context edge.
    read_sampling_fields(body, limits, limits.max_tokens_limit, req.spec);
    // max_completion_tokens supersedes the deprecated max_tokens.
    if (auto n = read_max_tokens(body, "max_completion_tokens", limits))
      req.spec.params.max_tokens = *n;
    req.spec.params.logprobs = req.top_logprobs;
    validate_sampling(req.spec.params);
    refuse_streamed_best_of(req.spec.params, req.stream);
    return req;
  } catch (const request_rejected& r) {
    return r.error();
  }
}

} // namespace troupe::net
