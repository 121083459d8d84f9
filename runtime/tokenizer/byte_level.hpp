// GPT-2's bytes-to-unicode map: every byte gets a printable stand-in character so that
// byte-level vocabularies can be stored as text (ByteLevel pre-tokenizer and decoder).
#pragma once

#include <string>
#include <string_view>

namespace troupe::runtime::tokenizer_detail {

// Each byte of s replaced by its stand-in character.
std::string to_byte_level(std::string_view s);

// A token's bytes as the ByteLevel decoder sees them: the stand-ins mapped back, or the
// token's own bytes when any character is not a stand-in (e.g. an added token).
void append_byte_level_token(std::string& out, std::string_view token);

} // namespace troupe::runtime::tokenizer_detail
