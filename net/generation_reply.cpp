// The JSON and SSE answers of the completions endpoints, from the engine's events.
#include "net/generation_reply.hpp"

#include <boost/json.hpp>

#include <algorithm>
#include <utility>

#include "net/openai_responses.hpp"

namespace troupe::net {

generation_reply::generation_reply(reply_shape shape, std::string model, std::int64_t created, std::uint64_t number,
                                   int n, bool include_usage, bool want_logprobs)
    : shape_(shape),
      model_(std::move(model)),
      created_(created),
      include_usage_(include_usage),
      want_logprobs_(want_logprobs),
      choices_(static_cast<std::size_t>(std::max(n, 1))) {
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
    for (int i = 0; i < static_cast<int>(choices_.size()); ++i)
      out.events.push_back(
          sse_event(chat_chunk(id_, created_, model_, i, "assistant", "", std::nullopt, include_usage_)));
  return out;
}

boost::json::value generation_reply::take_logprobs(choice& c) {
  if (!want_logprobs_)
    return nullptr;
  boost::json::value out = chat() ? boost::json::value(chat_logprobs(c.logprobs))
                                  : boost::json::value(completion_logprobs(c.logprobs, c.text_offset));
  c.logprobs.clear();
  return out;
}

std::string generation_reply::finish_chunk(int index, std::string_view reason) {
  auto& c = choices_[static_cast<std::size_t>(index)];
  c.finish_reason = reason;
  auto pending = c.logprobs.empty() ? boost::json::value(nullptr) : take_logprobs(c);
  return sse_event(
      chat() ? chat_chunk(id_, created_, model_, index, std::nullopt, std::nullopt, reason, include_usage_,
                          std::move(pending))
             : completion_chunk(id_, created_, model_, index, "", reason, include_usage_, std::move(pending)));
}

generation_reply::delta_chunks generation_reply::on_delta(int index, std::string_view prompt_text,
                                                          std::string_view text,
                                                          std::span<const token_logprob> prompt_logprobs,
                                                          std::span<const token_logprob> logprobs,
                                                          std::string_view finish_reason,
                                                          std::span<const tool_call> tool_calls, int first_call) {
  delta_chunks out;
  // The engine numbers choices 0 .. n-1; anything else belongs to no choice of this answer.
  if (index < 0 || index >= static_cast<int>(choices_.size()))
    return out;
  auto& c = choices_[static_cast<std::size_t>(index)];
  std::string all = std::string(prompt_text) + std::string(text);
  if (want_logprobs_) {
    c.logprobs.insert(c.logprobs.end(), prompt_logprobs.begin(), prompt_logprobs.end());
    c.logprobs.insert(c.logprobs.end(), logprobs.begin(), logprobs.end());
  }
  if (!streaming()) {
    c.text += all;
    c.tool_calls.insert(c.tool_calls.end(), tool_calls.begin(), tool_calls.end());
    if (!finish_reason.empty())
      c.finish_reason = finish_reason;
    return out;
  }
  if (!all.empty())
    out.text = sse_event(
        chat() ? chat_chunk(id_, created_, model_, index, std::nullopt, all, std::nullopt, include_usage_,
                            take_logprobs(c))
               : completion_chunk(id_, created_, model_, index, all, std::nullopt, include_usage_, take_logprobs(c)));
  if (!tool_calls.empty() && chat())
    out.text = out.text.value_or("") +
               sse_event(chat_tool_calls_chunk(id_, created_, model_, index, tool_calls, first_call, include_usage_));
  if (!finish_reason.empty())
    out.finish = finish_chunk(index, finish_reason);
  return out;
}

std::vector<std::string> generation_reply::finish_stream(const finished& done) {
  std::vector<std::string> out;
  for (int i = 0; i < static_cast<int>(choices_.size()); ++i)
    if (choices_[static_cast<std::size_t>(i)].finish_reason.empty())
      out.push_back(finish_chunk(i, done.reason));
  if (include_usage_)
    out.push_back(
        sse_event(usage_chunk(chat() ? endpoint::chat : endpoint::completions, id_, created_, model_, done.usage)));
  out.push_back(sse_done());
  return out;
}

std::string generation_reply::json_body(const finished& done) {
  std::vector<response_choice> list;
  list.reserve(choices_.size());
  for (auto& c : choices_)
    list.push_back({c.text, c.finish_reason.empty() ? std::string_view(done.reason) : c.finish_reason,
                    take_logprobs(c), c.tool_calls});
  return chat() ? chat_response(id_, created_, model_, std::move(list), done.usage)
                : completion_response(id_, created_, model_, std::move(list), done.usage);
}

std::vector<std::string> generation_reply::fail_stream(const api_error& error) const {
  return {sse_event(openai_error_body(error)), sse_done()};
}

api_error api_error_for(const failed& f) {
  if (f.code == "prompt_too_long")
    return {400, "invalid_request_error", f.message, "prompt", "context_length_exceeded"};
  if (f.code == "invalid_request" || f.code == "duplicate_id")
    return {400, "invalid_request_error", f.message, "", f.code};
  if (f.code == "engine_unavailable") // an engine in another process went away: another try may find one
    return {503, "server_error", f.message, "", f.code};
  // step_failed, tokenizer_error (a prompt the tokenizer refuses is invalid_request), engine_error
  return {500, "server_error", f.message, "", f.code};
}

} // namespace troupe::net
