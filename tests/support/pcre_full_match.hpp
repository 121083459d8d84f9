// PCRE2 as the tests' reference for whole-string matches (UTF mode, anchored at both ends,
// newline LF only): the regex and GBNF front ends are checked against it; and for a match
// anywhere in the text (JSON Schema's "pattern").
#pragma once

#define PCRE2_CODE_UNIT_WIDTH 8
#include <doctest/doctest.h>
#include <pcre2.h>

#include <cstdint>
#include <string>

namespace troupe::test {

class pcre_full_match {
 public:
  // extra_options: PCRE2_ALT_BSUX (\uHHHH as in JavaScript), PCRE2_DOTALL, ...
  explicit pcre_full_match(const std::string& pattern, std::uint32_t extra_options = 0) {
    auto* context = pcre2_compile_context_create(nullptr);
    pcre2_set_newline(context, PCRE2_NEWLINE_LF);
    int error = 0;
    PCRE2_SIZE offset = 0;
    code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                          PCRE2_UTF | PCRE2_ANCHORED | PCRE2_ENDANCHORED | extra_options, &error, &offset, context);
    pcre2_compile_context_free(context);
    REQUIRE_MESSAGE(code_ != nullptr, "PCRE2 refuses the test pattern " << pattern);
    data_ = pcre2_match_data_create_from_pattern(code_, nullptr);
  }
  ~pcre_full_match() {
    pcre2_match_data_free(data_);
    pcre2_code_free(code_);
  }
  pcre_full_match(const pcre_full_match&) = delete;
  pcre_full_match& operator=(const pcre_full_match&) = delete;

  bool matches(const std::string& text) {
    const int rc = pcre2_match(code_, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), 0, 0, data_, nullptr);
    REQUIRE_MESSAGE((rc >= 0 || rc == PCRE2_ERROR_NOMATCH), "PCRE2 match error " << rc);
    return rc >= 0;
  }

 private:
  pcre2_code* code_ = nullptr;
  pcre2_match_data* data_ = nullptr;
};

// Does `pattern` match somewhere in `text` (UTF mode, newline LF)? As JSON Schema's "pattern".
inline bool pcre_search(const std::string& pattern, const std::string& text) {
  auto* context = pcre2_compile_context_create(nullptr);
  pcre2_set_newline(context, PCRE2_NEWLINE_LF);
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), PCRE2_UTF, &error,
                                   &offset, context);
  pcre2_compile_context_free(context);
  REQUIRE_MESSAGE(code != nullptr, "PCRE2 refuses the test pattern " << pattern);
  auto* data = pcre2_match_data_create_from_pattern(code, nullptr);
  const int rc = pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), 0, 0, data, nullptr);
  pcre2_match_data_free(data);
  pcre2_code_free(code);
  REQUIRE_MESSAGE((rc >= 0 || rc == PCRE2_ERROR_NOMATCH), "PCRE2 match error " << rc);
  return rc >= 0;
}

} // namespace troupe::test
