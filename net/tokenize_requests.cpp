// The bodies of /tokenize and /detokenize, read and written with Boost.JSON.
#include "net/tokenize_requests.hpp"

#include <boost/json.hpp>

namespace troupe::net {

std::variant<tokenize_request, api_error> parse_tokenize_request(std::string_view body) {
  boost::system::error_code ec;
  auto json = boost::json::parse(body, ec);
  const boost::json::string* prompt = nullptr;
  if (!ec && json.is_object())
    if (auto* p = json.as_object().if_contains("prompt"))
      prompt = p->if_string();
  if (!prompt)
    return invalid_request("expected a JSON object with a string 'prompt'", "prompt");
  tokenize_request out;
  out.prompt = std::string(prompt->data(), prompt->size()); // whole: a NUL inside does not end it
  if (auto* a = json.as_object().if_contains("add_special_tokens"); a && a->is_bool())
    out.add_special_tokens = a->as_bool();
  return out;
}

std::string tokenize_response(std::span<const token_id> ids, int max_model_len) {
  boost::json::object out;
  out["tokens"] = boost::json::value_from(std::vector<token_id>(ids.begin(), ids.end()));
  out["count"] = ids.size();
  out["max_model_len"] = max_model_len;
  return boost::json::serialize(out);
}

std::variant<std::vector<token_id>, api_error> parse_detokenize_request(std::string_view body, int vocab_size) {
  boost::system::error_code ec;
  auto json = boost::json::parse(body, ec);
  std::vector<token_id> ids;
  bool ok = !ec && json.is_object();
  const boost::json::array* tokens = nullptr;
  if (ok)
    if (auto* t = json.as_object().if_contains("tokens"))
      tokens = t->if_array();
  ok = tokens != nullptr;
  if (ok)
    for (const auto& v : *tokens) {
      if (!v.is_int64()) {
        ok = false;
        break;
      }
      ids.push_back(static_cast<token_id>(v.as_int64()));
    }
  if (!ok)
    return invalid_request("expected a JSON object with an integer array 'tokens'", "tokens");
  for (auto id : ids)
    if (id < 0 || id >= vocab_size)
      return invalid_request(
          "token id " + std::to_string(id) + " is outside the vocabulary (0.." + std::to_string(vocab_size - 1) + ")",
          "tokens");
  return ids;
}

std::string detokenize_response(std::string_view text) {
  boost::json::object out;
  out["prompt"] = text;
  return boost::json::serialize(out);
}

} // namespace troupe::net
