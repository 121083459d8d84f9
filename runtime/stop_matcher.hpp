// Finds stop strings in streamed text, across token boundaries. Text that might
// be the start of a stop string is held back until it is known not to be, so a
// stop string is never emitted, not even in part.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace troupe::runtime {

class stop_matcher {
 public:
  explicit stop_matcher(std::vector<std::string> stop_strings);

  struct result {
    std::string text;     // safe to emit now
    bool stopped = false; // a stop string was found; text is everything before it
  };
  // Feed the next piece of detokenized text. may_stop = false (the output is still shorter
  // than min_tokens): a stop string completed in it is text like any other (vLLM's rule).
  result push(std::string_view piece, bool may_stop = true);
  // End of stream (not by a stop string): whatever was held back.
  std::string flush();

 private:
  std::vector<std::string> stops_;
  std::string pending_;
  bool stopped_ = false;
};

} // namespace troupe::runtime
