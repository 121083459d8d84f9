// vLLM's /tokenize and /detokenize: their request bodies read, their answers written.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "net/api_error.hpp"
#include "troupe/ids.hpp"

namespace troupe::net {

struct tokenize_request {
  std::string prompt;
  bool add_special_tokens = true;
};

// {"prompt": string, "add_special_tokens"?: bool}; anything else is a 400 naming "prompt".
std::variant<tokenize_request, api_error> parse_tokenize_request(std::string_view body);
// {"tokens": [ids], "count", "max_model_len"}.
std::string tokenize_response(std::span<const token_id> ids, int max_model_len);

// {"tokens": [integer ids]}, each in [0, vocab_size); anything else is a 400 naming "tokens".
std::variant<std::vector<token_id>, api_error> parse_detokenize_request(std::string_view body, int vocab_size);
// {"prompt": text}.
std::string detokenize_response(std::string_view text);

} // namespace troupe::net
