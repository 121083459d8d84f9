// Fuzzes the OpenAI request parsers (net/openai_requests, with net/sampling_fields,
// net/prompt_fields and net/json_fields) on any bytes as a POST body: each body is
// read by both parsers, and either becomes a request within the server's limits or a
// 400 whose error body a client can parse.
#include <cstddef>
#include <cstdint>
#include <string>
#include <variant>

#include "fuzz_support.hpp"
#include "net/openai_requests.hpp"

namespace {

using namespace troupe;
using namespace troupe::net;
using fuzz::check;

void check_spec(const request_spec& spec, const request_limits& limits) {
  check(spec.prompt_ids.size() <= static_cast<std::size_t>(limits.max_prompt_tokens), "prompt_ids within the limit");
  for (const auto id : spec.prompt_ids)
    check(id >= 0, "prompt ids are >= 0");
  const auto& p = spec.params;
  check(p.max_tokens >= 1 && p.max_tokens <= limits.max_tokens_limit, "max_tokens within [1, limit]");
  check(p.stop.size() <= limits.max_stop_strings, "stop strings within the limit");
  for (const auto& s : p.stop)
    check(!s.empty() && s.size() <= limits.max_stop_length, "stop string lengths");
  check(p.logprobs >= -1 && p.logprobs <= limits.max_logprobs, "logprobs within the limit");
  check(spec.num_speculative_tokens >= -1 && spec.num_speculative_tokens <= 16, "num_speculative_tokens range");
  try {
    p.validate(); // the engine checks again: a request let through must pass
  } catch (const std::exception& e) {
    check(false, "an accepted request fails sampling_params::validate", e.what());
  }
}

void check_error(const api_error& e) {
  check(e.status == 400 && !e.message.empty(), "a refusal is a 400 with a message");
  const auto body = openai_error_body(e);
  check(fuzz::parses_as_json(body), "the error body is JSON", body);
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const request_limits limits; // the server's defaults
  const auto body = fuzz::as_text(data, size);

  const auto completion = parse_completion_request(body, limits);
  if (const auto* r = std::get_if<completion_request>(&completion)) {
    check_spec(r->spec, limits);
    check(r->spec.prompt.empty() || r->spec.prompt_ids.empty(), "one prompt source: text or ids");
    check(r->spec.messages.empty(), "completions carry no messages");
    check(r->logprobs >= -1 && r->logprobs <= limits.max_logprobs, "completions logprobs range");
    check(!r->include_usage || r->stream, "include_usage only with stream");
  } else {
    check_error(std::get<api_error>(completion));
  }

  const auto chat = parse_chat_request(body, limits);
  if (const auto* r = std::get_if<chat_request>(&chat)) {
    check_spec(r->spec, limits);
    check(!r->spec.messages.empty(), "a chat has messages");
    for (const auto& m : r->spec.messages) {
      check(m.role == "system" || m.role == "user" || m.role == "assistant" || m.role == "tool", "roles are known",
            m.role);
      check(m.role == "tool" || m.tool_call_id.empty(), "only tool messages answer a call", m.role);
      check(m.role == "assistant" || m.tool_calls.empty(), "only assistant messages make calls", m.role);
    }
    check(r->spec.tools.size() <= static_cast<std::size_t>(max_tools), "tools within the limit");
    for (const auto& t : r->spec.tools)
      check(valid_tool_name(t.name), "tool names are valid", t.name);
    check(r->top_logprobs >= -1 && r->top_logprobs <= limits.max_logprobs, "top_logprobs range");
    check(!r->include_usage || r->stream, "include_usage only with stream");
  } else {
    check_error(std::get<api_error>(chat));
  }
  return 0;
}
