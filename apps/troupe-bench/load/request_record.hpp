// What the client saw of one request: when it was sent, when each content chunk
// arrived, when the stream ended, the server's token counts, and success or error.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace troupe::bench {

// Times are seconds on one steady clock, measured from the benchmark's start.
struct request_record {
  std::size_t index = 0;
  int priority = 0;
  int expected_prompt_tokens = 0; // what the workload built; counted when the server reports none
  double send_s = 0;              // the request started (connection set-up included when it has its own)
  std::vector<double> chunk_s;    // arrival of each chunk that carried output (text or token ids)
  double end_s = 0;               // the stream's end: the done frame, or [DONE]
  int prompt_tokens = 0;          // from the server's usage
  int output_tokens = 0;          // from the server's usage (else streamed_tokens)
  int streamed_tokens = 0;        // token ids seen in WebSocket deltas, or SSE content chunks
  bool usage_reported = false;
  bool success = false;
  std::string error; // why it failed; empty on success
};

} // namespace troupe::bench
