// Streaming detokenizer on top of decode_stream, plus the bookkeeping that removes the
// prompt's own text from what is returned.
#include "runtime/incremental_detokenizer.hpp"

#include <algorithm>
#include <cstdint>

namespace troupe::runtime {
namespace {

std::size_t char_len_at(const std::string& s, std::size_t i) {
  const auto b = static_cast<std::uint8_t>(s[i]);
  const std::size_t n = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
  return std::min(n, s.size() - i);
}

} // namespace

incremental_detokenizer::incremental_detokenizer(const tokenizer& tok, std::span<const token_id> prompt_ids,
                                                 bool skip_special_tokens)
    : stream_(tok, skip_special_tokens) {
  std::string committed;
  for (const auto id : prompt_ids)
    stream_.push(id, committed);
  // decode(prompt) = committed + what finishing now would add. That tail is part of the
  // prompt's text, so when the output starts with it again it must not be returned.
  auto ended = stream_;
  ended.finish(prompt_tail_);
  in_tail_ = !prompt_tail_.empty();
}

std::string incremental_detokenizer::push(token_id id) {
  std::string text;
  stream_.push(id, text);
  return skip_prompt_tail(std::move(text));
}

std::string incremental_detokenizer::flush() {
  std::string text;
  stream_.finish(text);
  return skip_prompt_tail(std::move(text));
}

// Drops the characters that repeat the prompt's tail; from the first one that differs
// (or once the whole tail has been seen) everything passes.
std::string incremental_detokenizer::skip_prompt_tail(std::string text) {
  if (!in_tail_)
    return text;
  std::size_t i = 0;
  while (i < text.size() && tail_matched_ < prompt_tail_.size()) {
    const auto len = char_len_at(text, i);
    if (prompt_tail_.compare(tail_matched_, len, text, i, len) != 0 ||
        char_len_at(prompt_tail_, tail_matched_) != len) {
      in_tail_ = false; // the output diverged from the prompt's tail
      return text.substr(i);
    }
    i += len;
    tail_matched_ += len;
  }
  if (tail_matched_ == prompt_tail_.size())
    in_tail_ = false;
  return text.substr(i);
}

} // namespace troupe::runtime
