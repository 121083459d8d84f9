// The answer to one /v1/completions or /v1/chat/completions request, built from the
// engine's events: one JSON body at the end, or an SSE stream of chunks (OpenAI's
// shapes, logprobs and usage included). It returns bytes; the HTTP session writes them.
#pragma once

#include <boost/json/value.hpp>

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "net/api_error.hpp"
#include "troupe/messages.hpp"

namespace troupe::net {

// How a generation request is answered.
enum class reply_shape { completion_json, chat_json, completion_sse, chat_sse };

class generation_reply {
 public:
  // number: the server's count of answers, which makes the response id ("cmpl-7", "chatcmpl-7").
  // n: the choices the answer holds (the request's sampling_params::n).
  generation_reply(reply_shape shape, std::string model, std::int64_t created, std::uint64_t number, int n,
                   bool include_usage, bool want_logprobs);

  bool streaming() const { return shape_ == reply_shape::completion_sse || shape_ == reply_shape::chat_sse; }
  bool stream_started() const { return started_; }

  // The stream's first bytes, the first time only: the HTTP head (a close-delimited
  // body: the stream ends with [DONE] and the connection closes) and, for chat, one
  // chunk per choice that carries the assistant's role (vLLM's order).
  struct stream_opening {
    std::string head;
    std::vector<std::string> events;
  };
  std::optional<stream_opening> open_stream();

  // What one delta adds to a stream: the chunk with its text, and the choice's last
  // chunk when the delta ends the choice.
  struct delta_chunks {
    std::optional<std::string> text;   // none while the tokens have no text yet (and made no call)
    std::optional<std::string> finish; // finish_reason and the logprobs still pending
  };
  // A delta of choice `index` (echo: the prompt's text and logprobs lead, OpenAI's order;
  // finish_reason: set on the choice's last delta). Collected for a JSON answer, which
  // gets no chunks. In a stream, tokens that have no text yet (half a character) wait,
  // logprobs and all, for the choice's next chunk.
  // tool_calls: the calls completed in this delta, numbered from first_call within the
  // choice (chat only; streamed as one chunk after the text's).
  delta_chunks on_delta(int index, std::string_view prompt_text, std::string_view text,
                        std::span<const token_logprob> prompt_logprobs, std::span<const token_logprob> logprobs,
                        std::string_view finish_reason, std::span<const tool_call> tool_calls = {},
                        int first_call = 0);

  // The events that end a stream: the last chunk of each choice that no delta ended
  // (done.reason, with the logprobs of tokens that never became text, a stop token's),
  // the usage chunk when asked, [DONE].
  std::vector<std::string> finish_stream(const finished& done);
  // The JSON body of an answer that is not streamed: each choice's reason is its own
  // last delta's, else done.reason.
  std::string json_body(const finished& done);
  // A failure once the stream's head is out: the error travels in the stream, as vLLM does.
  std::vector<std::string> fail_stream(const api_error& error) const;

 private:
  struct choice {
    std::string text;                    // a JSON answer's text so far
    std::vector<token_logprob> logprobs; // not yet sent (streaming) or the whole answer's
    std::size_t text_offset = 0;         // completions' text_offset of the next token
    std::string finish_reason;           // the engine's; empty while the choice runs
    std::vector<tool_call> tool_calls;   // a JSON answer's calls
  };

  bool chat() const { return shape_ == reply_shape::chat_json || shape_ == reply_shape::chat_sse; }
  // The "logprobs" of a response or chunk for the choice's tokens collected so far (then cleared).
  boost::json::value take_logprobs(choice& c);
  // The chunk that ends choice `index` with `reason`, carrying its pending logprobs.
  std::string finish_chunk(int index, std::string_view reason);

  reply_shape shape_;
  std::string model_, id_;
  std::int64_t created_ = 0;
  bool include_usage_ = false, want_logprobs_ = false;
  bool started_ = false;
  std::vector<choice> choices_; // by index
};

// How an engine failure is answered: the request's own fault (invalid_request,
// prompt_too_long, duplicate_id) is a 400, anything else a 500.
api_error api_error_for(const failed& f);

} // namespace troupe::net
