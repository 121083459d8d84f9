// The answer to one /v1/completions or /v1/chat/completions request, built from the
// engine's events: one JSON body at the end, or an SSE stream of chunks (OpenAI's
// shapes, logprobs and usage included). It returns bytes; the HTTP session writes them.
#pragma once

#include <boost/json/value.hpp>

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "net/api_error.hpp"
#include "troupe/messages.hpp"

namespace troupe::net {

// How a generation request is answered.
enum class reply_shape { completion_json, chat_json, completion_sse, chat_sse };

class generation_reply {
 public:
  // number: the server's count of answers, which makes the response id ("cmpl-7", "chatcmpl-7").
  generation_reply(reply_shape shape, std::string model, std::int64_t created, std::uint64_t number, bool include_usage,
                   bool want_logprobs);

  bool streaming() const { return shape_ == reply_shape::completion_sse || shape_ == reply_shape::chat_sse; }
  bool stream_started() const { return started_; }

  // The stream's first bytes, the first time only: the HTTP head (a close-delimited
  // body: the stream ends with [DONE] and the connection closes) and, for chat, the
  // chunk that carries the assistant's role.
  struct stream_opening {
    std::string head;
    std::vector<std::string> events;
  };
  std::optional<stream_opening> open_stream();

  // A delta (echo: the prompt's text and logprobs lead, OpenAI's order). Collected for
  // a JSON answer; for a stream, the chunk's SSE event, or nothing while the tokens
  // have no text yet (half a character: they wait, logprobs and all, for the next one).
  std::optional<std::string> on_delta(std::string_view prompt_text, std::string_view text,
                                      std::span<const token_logprob> prompt_logprobs,
                                      std::span<const token_logprob> logprobs);

  // The events that end a stream: the chunk with the finish reason (and the logprobs of
  // tokens that never became text, a stop token's), the usage chunk when asked, [DONE].
  std::vector<std::string> finish_stream(const finished& done);
  // The JSON body of an answer that is not streamed.
  std::string json_body(const finished& done);
  // A failure once the stream's head is out: the error travels in the stream, as vLLM does.
  std::vector<std::string> fail_stream(const api_error& error) const;

 private:
  bool chat() const { return shape_ == reply_shape::chat_json || shape_ == reply_shape::chat_sse; }
  // The "logprobs" of a response or chunk for the tokens collected so far (then cleared).
  boost::json::value take_logprobs();

  reply_shape shape_;
  std::string model_, id_;
  std::int64_t created_ = 0;
  bool include_usage_ = false, want_logprobs_ = false;
  bool started_ = false;
  std::string text_;                    // a JSON answer's text so far
  std::vector<token_logprob> logprobs_; // not yet sent (streaming) or the whole answer's
  std::size_t text_offset_ = 0;         // completions' text_offset of the next token
};

// How an engine failure is answered: the request's own fault (invalid_request,
// prompt_too_long, duplicate_id) is a 400, anything else a 500.
api_error api_error_for(const failed& f);

} // namespace troupe::net
