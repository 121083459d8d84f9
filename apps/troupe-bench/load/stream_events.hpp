// Reads what the server streams back — WebSocket frames and SSE `data:` payloads —
// into events, and applies each event to its request's record.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "apps/troupe-bench/load/request_record.hpp"

namespace troupe::bench {

struct stream_event {
  enum class kind {
    output,  // a chunk that carries generated text or token ids
    usage,   // token counts (SSE's include_usage chunk)
    done,    // the stream ended well (WebSocket done frame, SSE [DONE])
    error,   // the server refused or failed the request
    ignored, // anything else (SSE's empty finish chunk, unknown frame types)
  };
  kind what = kind::ignored;
  std::optional<std::int64_t> id; // WebSocket frames: the request's id when it is an integer
  int tokens = 0;                 // output: token ids in a WebSocket delta; 1 per SSE chunk
  std::optional<int> prompt_tokens, completion_tokens;
  std::string error;
};

// {"type":"delta"|"done"|"error",...}. Never throws: a frame that does not parse is an error event.
stream_event read_ws_frame(std::string_view text);

// One SSE data payload of /v1/completions: "[DONE]", a chunk, a usage chunk or {"error":{...}}.
stream_event read_sse_data(std::string_view data);

// Splits an SSE byte stream into the payloads of its `data:` lines, whatever the
// read boundaries; \r\n line ends are accepted.
class sse_splitter {
 public:
  template <class OnData>
  void feed(std::string_view bytes, OnData&& on_data) {
    pending_.append(bytes);
    std::size_t start = 0, end;
    while ((end = pending_.find('\n', start)) != std::string::npos) {
      std::string_view line(pending_.data() + start, end - start);
      if (!line.empty() && line.back() == '\r')
        line.remove_suffix(1);
      if (line.starts_with("data:")) {
        line.remove_prefix(5);
        if (line.starts_with(' '))
          line.remove_prefix(1);
        on_data(line);
      }
      start = end + 1;
    }
    pending_.erase(0, start);
  }

 private:
  std::string pending_;
};

// Records `event`, seen at `t` seconds: chunk times, usage, the end and its outcome.
// Returns true when the request has ended (done or error).
bool apply_event(const stream_event& event, double t, request_record& record);

} // namespace troupe::bench
