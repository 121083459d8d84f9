// A compiled PCRE2 pattern (UTF + UCP, JIT when available) read the way Hugging Face's
// Oniguruma reads it, for the Split / ByteLevel / Digits pre-tokenizers.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string_view>

namespace troupe::runtime::tokenizer_detail {

// Copies share the compiled pattern; matching keeps its state per thread, so one pattern
// can be used by all threads at once.
class regex {
 public:
  // Throws std::invalid_argument with PCRE2's message.
  explicit regex(std::string_view pattern);

  // Calls f(start, end) for each non-empty match, left to right. `subject` must be valid
  // UTF-8 (checked once by the caller, hence PCRE2_NO_UTF_CHECK, which also keeps the
  // loop linear).
  void for_each_match(std::string_view subject, const std::function<void(std::size_t, std::size_t)>& f) const;

  // Whether the pattern matches at the very start of s.
  bool matches_at_start(std::string_view s) const;

 private:
  struct compiled; // owns the pcre2_code; keeps pcre2.h out of this header
  std::shared_ptr<const compiled> code_;
};

} // namespace troupe::runtime::tokenizer_detail
