// What a loaded tokenizer holds: each stage of the Hugging Face pipeline plus the id
// tables; shared read-only by every copy of a tokenizer and by decode_streams.
#pragma once

#include "runtime/tokenizer.hpp"
#include "runtime/tokenizer/added_tokens.hpp"
#include "runtime/tokenizer/bpe_model.hpp"
#include "runtime/tokenizer/decoder.hpp"
#include "runtime/tokenizer/normalizer.hpp"
#include "runtime/tokenizer/pre_tokenizer.hpp"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace troupe::runtime {

namespace tokenizer_detail {
// id_flags bits
inline constexpr std::uint8_t id_known = 1, id_special = 2;
} // namespace tokenizer_detail

struct tokenizer::impl {
  tokenizer_detail::bpe_model model;

  std::vector<tokenizer_detail::added_token> added;
  tokenizer_detail::string_to_id added_ids;
  tokenizer_detail::added_token_matcher raw_matcher, normalized_matcher;

  std::vector<tokenizer_detail::normalizer_step> normalizers;
  std::vector<tokenizer_detail::pre_tokenizer_step> pre_tokenizers;
  bool byte_level_input = false; // pieces go through GPT-2's byte map before BPE
  std::vector<tokenizer_detail::decoder_step> decoders;
  bool has_post_processor = false;
  std::vector<token_id> prefix, suffix; // added around the encoding

  std::vector<std::string> id_strings; // id -> token text (added tokens win)
  std::vector<std::uint8_t> id_flags;
  std::optional<token_id> bos, eos;
  std::string chat_template;

  // Text -> the pieces BPE sees (on_piece, before the byte-level map) and the added
  // tokens found on the way (on_token, an index into `added`).
  void split(std::string_view text, const std::function<void(std::string&&)>& on_piece,
             const std::function<void(std::size_t)>& on_token) const;
};

} // namespace troupe::runtime
