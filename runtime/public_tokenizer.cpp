// troupe::tokenizer (troupe/tokenizer.hpp), the public face of runtime's tokenizer:
// a host sees the calls, not runtime's headers.
#include "troupe/tokenizer.hpp"

#include "runtime/tokenizer.hpp"

namespace troupe {

struct tokenizer::impl {
  runtime::tokenizer tok;
};

tokenizer tokenizer::load(const std::string& path) {
  return tokenizer(std::make_shared<const impl>(impl{runtime::tokenizer::load(path)}));
}

std::vector<token_id> tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  return impl_->tok.encode(text, add_special_tokens);
}

std::string tokenizer::decode(std::span<const token_id> ids, bool skip_special_tokens) const {
  return impl_->tok.decode(ids, skip_special_tokens);
}

std::size_t tokenizer::vocab_size() const {
  return impl_->tok.vocab_size();
}

} // namespace troupe
