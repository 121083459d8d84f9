// Added tokens (special and not): tokens found in the text by exact match before the
// normalizer and BPE ever see it, honouring single_word / lstrip / rstrip.
#pragma once

#include "runtime/tokenizer.hpp"
#include "runtime/tokenizer/json_file.hpp"

#include <boost/json.hpp>

#include <array>
#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace troupe::runtime::tokenizer_detail {

struct added_token {
  token_id id = 0;
  std::string content;
  std::string pattern; // what is searched for: content, normalized when `normalized`
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = false;
  bool special = false;
};

// Leftmost-longest search over a set of added tokens (candidates bucketed by first byte and
// tried longest first).
class added_token_matcher {
 public:
  void add(const std::vector<added_token>& tokens, std::size_t index);
  bool empty() const { return empty_; }

  struct match {
    std::size_t start, end, token;
  };
  std::optional<match> find(std::string_view text, std::size_t from, const std::vector<added_token>& tokens) const;

 private:
  std::array<std::vector<std::size_t>, 256> buckets_;
  bool empty_ = true;
};

// Splits `text` on the matcher's added tokens, honouring single_word / lstrip / rstrip as
// Hugging Face does; on_text gets the plain stretches (and whether they start at 0),
// on_token the index of each token found.
void split_on_added(std::string_view text, const added_token_matcher& matcher, const std::vector<added_token>& tokens,
                    const std::function<void(std::string_view, bool)>& on_text,
                    const std::function<void(std::size_t)>& on_token);

// tokenizer.json's "added_tokens"; `pattern` is left for the loader to fill in, since it
// depends on the normalizer.
void load_added_tokens(const json_file& f, const boost::json::value& v, std::vector<added_token>& added);

} // namespace troupe::runtime::tokenizer_detail
