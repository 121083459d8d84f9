// The pre-tokenizer: cuts normalized text into the pieces BPE sees one at a time (ByteLevel
// with GPT-2's split regex, Metaspace, Split, Digits).
#pragma once

#include "runtime/tokenizer/json_file.hpp"
#include "runtime/tokenizer/regex.hpp"

#include <boost/json.hpp>

#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace troupe::runtime::tokenizer_detail {

enum class prepend_scheme { always, first, never };

struct pre_tokenizer_step {
  enum class kind { byte_level, metaspace, split_regex, split_literal };
  explicit pre_tokenizer_step(kind k) : what(k) {}
  kind what;
  bool add_prefix_space = false; // byte_level
  std::string replacement;       // metaspace
  prepend_scheme scheme = prepend_scheme::always;
  bool split = true;       // metaspace
  std::string literal;     // split_literal
  std::optional<regex> re; // split_regex, byte_level with use_regex
};

// Runs the steps over one stretch of text; at_origin says it starts at offset 0 of the
// original text (Metaspace's prepend_scheme "first"). on_piece gets each non-empty piece.
void pre_tokenize_segment(std::span<const pre_tokenizer_step> steps, std::string text, bool at_origin,
                          const std::function<void(std::string&&)>& on_piece);

// Appends the steps of tokenizer.json's "pre_tokenizer" (a Sequence is flattened) and sets
// byte_level_input once a ByteLevel step is added: its pieces go through GPT-2's byte map
// before BPE.
void load_pre_tokenizer(const json_file& f, const boost::json::value& v, std::vector<pre_tokenizer_step>& steps,
                        bool& byte_level_input);

} // namespace troupe::runtime::tokenizer_detail
