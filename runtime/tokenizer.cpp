// The tokenizer's public operations: encode runs added-token split -> normalizer ->
// pre-tokenizer -> BPE; decode runs a decode_stream; the rest are table look-ups.
#include "runtime/tokenizer.hpp"

#include "runtime/tokenizer/byte_level.hpp"
#include "runtime/tokenizer/tokenizer_impl.hpp"
#include "runtime/tokenizer/utf8.hpp"

#include <stdexcept>
#include <utility>

namespace troupe::runtime {

using namespace tokenizer_detail;

void tokenizer::impl::split(std::string_view text, const std::function<void(std::string&&)>& on_piece,
                            const std::function<void(std::size_t)>& on_token) const {
  // Tokens with normalized=false match the raw text; the others match normalized text.
  split_on_added(
      text, raw_matcher, added,
      [&](std::string_view segment, bool at_origin) {
        std::string normalized(segment);
        normalize(normalizers, normalized);
        split_on_added(
            normalized, normalized_matcher, added,
            [&](std::string_view part, bool part_at_origin) {
              pre_tokenize_segment(pre_tokenizers, std::string(part), at_origin && part_at_origin, on_piece);
            },
            on_token);
      },
      on_token);
}

std::vector<token_id> tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  const auto& t = *impl_;
  std::string repaired;
  if (!is_valid_utf8(text)) {
    repaired = to_valid_utf8(text);
    text = repaired;
  }
  std::vector<token_id> ids;
  ids.reserve(text.size() / 3 + t.prefix.size() + t.suffix.size() + 4);
  if (add_special_tokens)
    ids = t.prefix;
  t.split(
      text,
      [&](std::string&& p) {
        if (t.byte_level_input) {
          t.model.encode_word(to_byte_level(p), ids);
        } else {
          t.model.encode_word(p, ids);
        }
      },
      [&](std::size_t index) { ids.push_back(t.added[index].id); });
  if (add_special_tokens)
    ids.insert(ids.end(), t.suffix.begin(), t.suffix.end());
  return ids;
}

std::vector<std::string> tokenizer::pre_tokenize(std::string_view text) const {
  const auto& t = *impl_;
  std::string repaired;
  if (!is_valid_utf8(text)) {
    repaired = to_valid_utf8(text);
    text = repaired;
  }
  std::vector<std::string> pieces;
  t.split(
      text, [&](std::string&& p) { pieces.push_back(std::move(p)); },
      [&](std::size_t index) { pieces.push_back(t.added[index].content); });
  return pieces;
}

std::string tokenizer::decode(std::span<const token_id> ids, bool skip_special_tokens) const {
  std::string out;
  decode_stream stream(*this, skip_special_tokens);
  for (const auto id : ids)
    stream.push(id, out);
  stream.finish(out);
  return out;
}

std::size_t tokenizer::vocab_size() const {
  return impl_->id_strings.size();
}
std::optional<token_id> tokenizer::bos_id() const {
  return impl_->bos;
}
std::optional<token_id> tokenizer::eos_id() const {
  return impl_->eos;
}
const std::string& tokenizer::chat_template() const {
  return impl_->chat_template;
}

std::optional<token_id> tokenizer::token_to_id(std::string_view token) const {
  if (const auto it = impl_->added_ids.find(token); it != impl_->added_ids.end())
    return it->second;
  if (const auto it = impl_->model.vocab.find(token); it != impl_->model.vocab.end())
    return it->second;
  return std::nullopt;
}

std::string tokenizer::id_to_token(token_id id) const {
  const auto& t = *impl_;
  if (id < 0 || static_cast<std::size_t>(id) >= t.id_strings.size() || t.id_flags[id] == 0) {
    throw std::out_of_range("tokenizer: token id " + std::to_string(id) + " is not in the vocab");
  }
  return t.id_strings[id];
}

bool tokenizer::is_special(token_id id) const {
  const auto& t = *impl_;
  return id >= 0 && static_cast<std::size_t>(id) < t.id_flags.size() && (t.id_flags[id] & id_special) != 0;
}

} // namespace troupe::runtime
