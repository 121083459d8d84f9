// The model's output split, as it streams, into text for the client and the tool calls
// it wrote in its chat format's syntax (tool_syntax.hpp). Text that may be the start of a
// call is held back until it is known not to be one; nothing is lost: a call that does not
// parse (not JSON, no name) goes back into the text as written.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "runtime/tools/tool_syntax.hpp"
#include "troupe/tools.hpp"

namespace troupe::runtime::tools {

struct parsed_output {
  std::string text;             // content the client may see now
  std::vector<tool_call> calls; // completed calls (id empty: the caller names them)
};

class tool_call_parser {
 public:
  explicit tool_call_parser(tool_syntax s) : syntax_(s) {}

  // The next piece of decoded output.
  parsed_output push(std::string_view piece);
  // The output has ended: what was held back, as calls or text.
  parsed_output flush();

  int calls_made() const { return calls_made_; }
  tool_syntax syntax() const { return syntax_; }

 private:
  // hermes: complete <tool_call> blocks out of pending_.
  void scan_hermes(parsed_output& out);
  // llama3 / mistral: decides at the first non-space byte whether the output is calls
  // (held to the end) or text (streamed); mistral's marker may also come after text.
  void scan_trailing(parsed_output& out);
  // Text for the client, its trailing whitespace held back (dropped if a call follows).
  void emit(parsed_output& out, std::string_view text);
  // Emits pending_ but the longest tail that could begin `marker` (not empty).
  void release_text(parsed_output& out, std::string_view marker);
  // Parses the calls in `body` into out.calls; false (nothing added) when it is not calls.
  bool parse_calls(std::string_view body, parsed_output& out);

  tool_syntax syntax_;
  std::string pending_;     // output not yet released
  bool in_call_ = false;    // hermes: inside a <tool_call> block; llama3/mistral: holding calls to the end
  bool decided_ = false;    // llama3/mistral: the first non-space byte was seen
  std::string held_space_;  // whitespace after released text, sent only when more text follows
  int calls_made_ = 0;
};

} // namespace troupe::runtime::tools
