// The JSON and SSE answers of the completions endpoints, from the engine's events.
#include "net/generation_reply.hpp"

#include <boost/json.hpp>

#include <utility>

#include "net/openai_responses.hpp"

namespace troupe::net {

generation_reply::generation_reply(reply_shape shape, std::string model, std::int64_t created, std::uint64_t number,
                                   bool include_usage, bool want_logprobs)
    : shape_(shape),
      model_(std::move(model)),
      created_(created),
      include_usage_(include_usage),
      want_logprobs_(want_logprobs) {
  id_ = (chat() ? "chatcmpl-" : "cmpl-") + std::to_string(number);
}

std::optional<generation_reply::stream_opening> generation_reply::open_stream() {
  if (started_)
    return std::nullopt;
  started_ = true;
  stream_opening out;
  out.head =
      "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nConnection: close\r\n\r\n";
  if (chat())
    out.events.push_back(sse_event(chat_chunk(id_, created_, model_, "assistant", "", std::nullopt, include_usage_)));
  return out;
}

boost::json::value generation_reply::take_logprobs() {
  if (!want_logprobs_)
    return nullptr;
  boost::json::value out = chat() ? boost::json::value(chat_logprobs(logprobs_))
                                  : boost::json::value(completion_logprobs(logprobs_, text_offset_));
  logprobs_.clear();
  return out;
}

std::optional<std::string> generation_reply::on_delta(std::string_view prompt_text, std::string_view text,
                                                      std::span<const token_logprob> prompt_logprobs,
                                                      std::span<const token_logprob> logprobs) {
  std::string all = std::string(prompt_text) + std::string(text);
  if (want_logprobs_) {
    logprobs_.insert(logprobs_.end(), prompt_logprobs.begin(), prompt_logprobs.end());
    logprobs_.insert(logprobs_.end(), logprobs.begin(), logprobs.end());
  }
  if (!streaming()) {
    text_ += all;
    return std::nullopt;
  }
  if (all.empty())
    return std::nullopt;
  return sse_event(
      chat() ? chat_chunk(id_, created_, model_, std::nullopt, all, std::nullopt, include_usage_, take_logprobs())
             : completion_chunk(id_, created_, model_, all, std::nullopt, include_usage_, take_logprobs()));
}

std::vector<std::string> generation_reply::finish_stream(const finished& done) {
  const std::string_view reason = done.reason;
  auto pending = logprobs_.empty() ? boost::json::value(nullptr) : take_logprobs();
  std::vector<std::string> out;
  out.push_back(sse_event(
      chat() ? chat_chunk(id_, created_, model_, std::nullopt, std::nullopt, reason, include_usage_, std::move(pending))
             : completion_chunk(id_, created_, model_, "", reason, include_usage_, std::move(pending))));
  if (include_usage_)
    out.push_back(
        sse_event(usage_chunk(chat() ? endpoint::chat : endpoint::completions, id_, created_, model_, done.usage)));
  out.push_back(sse_done());
  return out;
}

std::string generation_reply::json_body(const finished& done) {
  return chat() ? chat_response(id_, created_, model_, text_, done.reason, done.usage, take_logprobs())
                : completion_response(id_, created_, model_, text_, done.reason, done.usage, take_logprobs());
}

std::vector<std::string> generation_reply::fail_stream(const api_error& error) const {
  return {sse_event(openai_error_body(error)), sse_done()};
}

api_error api_error_for(const failed& f) {
  if (f.code == "prompt_too_long")
    return {400, "invalid_request_error", f.message, "prompt", "context_length_exceeded"};
  if (f.code == "invalid_request" || f.code == "duplicate_id")
    return {400, "invalid_request_error", f.message, "", f.code};
  // step_failed, tokenizer_error (a prompt the tokenizer refuses is invalid_request), engine_error
  return {500, "server_error", f.message, "", f.code};
}

} // namespace troupe::net
