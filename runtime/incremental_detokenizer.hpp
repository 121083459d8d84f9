// Streaming detokenizer: turns generated ids into text as they arrive, for token-by-token
// output, giving exactly the text a full decode would give.
#pragma once

#include "runtime/tokenizer.hpp"

#include <cstddef>
#include <span>
#include <string>

namespace troupe::runtime {

// Contract (vLLM semantics): the concatenation of every push() and the final flush() is
// decode(prompt ++ output) with decode(prompt) removed from its front. push() never
// returns part of a UTF-8 character; it returns "" while the new token's text can still
// change (inside a character, inside a run of byte-fallback tokens, ...). O(1) amortized
// per token: it keeps a streaming decoder state, never re-decodes the sequence.
//
// When the prompt itself ends in something unresolved (e.g. the first bytes of a
// character), decode(prompt) ends in U+FFFD that decode(prompt ++ output) may not have;
// the output then starts where the two first differ (whole characters).
class incremental_detokenizer {
 public:
  // prompt_ids give the context: SentencePiece strips the leading space only at the very
  // start, and byte-fallback / byte-level characters can span the prompt/output boundary.
  incremental_detokenizer(const tokenizer& tok, std::span<const token_id> prompt_ids, bool skip_special_tokens = true);

  std::string push(token_id id); // text that became final with this token
  std::string flush();           // what is still held back; ends the stream

 private:
  std::string skip_prompt_tail(std::string text);

  decode_stream stream_;
  std::string prompt_tail_;      // end of decode(prompt) the stream had not yet committed
  std::size_t tail_matched_ = 0; // bytes of prompt_tail_ seen again in the output so far
  bool in_tail_ = false;
};

} // namespace troupe::runtime
