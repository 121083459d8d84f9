// PCRE2 behind the tokenizer's regex: compile options that mimic Oniguruma, per-thread
// match state with a large JIT stack, and a fallback to the interpreter.
#include "runtime/tokenizer/regex.hpp"

#include "runtime/tokenizer/utf8.hpp"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <array>
#include <new>
#include <stdexcept>
#include <string>

namespace troupe::runtime::tokenizer_detail {
namespace {

// Per-thread match state, so a compiled pattern can be shared by all threads. The JIT stack
// is larger than PCRE2's 32 KiB default because patterns like \s+(?!\S) backtrack once per
// character over long runs of whitespace.
struct match_resources {
  pcre2_match_data* data = pcre2_match_data_create(1, nullptr);
  pcre2_match_context* context = pcre2_match_context_create(nullptr);
  pcre2_jit_stack* stack = pcre2_jit_stack_create(32 * 1024, 16 * 1024 * 1024, nullptr);
  match_resources() {
    if (context != nullptr && stack != nullptr)
      pcre2_jit_stack_assign(context, nullptr, stack);
  }
  ~match_resources() {
    pcre2_jit_stack_free(stack);
    pcre2_match_context_free(context);
    pcre2_match_data_free(data);
  }
  match_resources(const match_resources&) = delete;
  match_resources& operator=(const match_resources&) = delete;
};

match_resources& thread_match_resources() {
  thread_local match_resources resources;
  if (resources.data == nullptr)
    throw std::bad_alloc();
  return resources;
}

} // namespace

struct regex::compiled {
  explicit compiled(pcre2_code* c) : code(c) {}
  ~compiled() { pcre2_code_free(code); }
  compiled(const compiled&) = delete;
  compiled& operator=(const compiled&) = delete;
  pcre2_code* code;
};

regex::regex(std::string_view pattern) {
  // Oniguruma (what Hugging Face uses) also reads \uHHHH; PCRE2 does with ALT_BSUX, and
  // the EXTRA flag keeps \x{...} working.
  std::unique_ptr<pcre2_compile_context, void (*)(pcre2_compile_context*)> context(
      pcre2_compile_context_create(nullptr), pcre2_compile_context_free);
  if (context)
    pcre2_set_compile_extra_options(context.get(), PCRE2_EXTRA_ALT_BSUX);
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_ALT_BSUX, &error, &offset, context.get());
  if (code == nullptr) {
    std::array<PCRE2_UCHAR, 256> message{};
    pcre2_get_error_message(error, message.data(), message.size());
    throw std::invalid_argument(reinterpret_cast<const char*>(message.data()) + std::string(" at offset ") +
                                std::to_string(offset));
  }
  code_ = std::make_shared<const compiled>(code);
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE); // on failure the interpreter is used
}

void regex::for_each_match(std::string_view subject, const std::function<void(std::size_t, std::size_t)>& f) const {
  if (subject.empty())
    return;
  auto& r = thread_match_resources();
  const auto* text = reinterpret_cast<PCRE2_SPTR>(subject.data());
  std::size_t offset = 0;
  while (offset <= subject.size()) {
    int rc = pcre2_match(code_->code, text, subject.size(), offset, PCRE2_NO_UTF_CHECK, r.data, r.context);
    if (rc < 0 && rc != PCRE2_ERROR_NOMATCH) {
      // Out of JIT stack or similar: the interpreter keeps its state on the heap.
      rc = pcre2_match(code_->code, text, subject.size(), offset, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, r.data, r.context);
    }
    if (rc == PCRE2_ERROR_NOMATCH)
      break;
    if (rc < 0) {
      std::array<PCRE2_UCHAR, 256> message{};
      pcre2_get_error_message(rc, message.data(), message.size());
      throw std::runtime_error("tokenizer: regex match failed: " +
                               std::string(reinterpret_cast<const char*>(message.data())));
    }
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(r.data);
    const std::size_t start = ovector[0], end = ovector[1];
    if (end <= start) { // an empty match: step over one character
      if (start >= subject.size())
        break;
      offset = start + char_len(subject, start);
      continue;
    }
    f(start, end);
    offset = end;
  }
}

bool regex::matches_at_start(std::string_view s) const {
  auto& r = thread_match_resources();
  const int rc = pcre2_match(code_->code, reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), 0,
                             PCRE2_NO_UTF_CHECK | PCRE2_ANCHORED, r.data, r.context);
  return rc >= 0;
}

} // namespace troupe::runtime::tokenizer_detail
