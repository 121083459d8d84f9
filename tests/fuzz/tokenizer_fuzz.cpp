// Fuzzes tokenizer::encode and decode (runtime/tokenizer*) on any bytes as text, with the
// two bundled layouts: SentencePiece with byte fallback (stories260k) and GPT-2 byte-level.
// Ids stay in the vocab, decode gives valid UTF-8, and text comes back unchanged where
// the tokenizer promises it (tests/unit/tokenizer_test.cpp): valid UTF-8 without an added
// token's text and, for SentencePiece, without a literal U+2581 (which reads as a space).
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_support.hpp"
#include "runtime/tokenizer.hpp"
#include "tests/support/data_root.hpp"

namespace {

using troupe::fuzz::check;
using troupe::runtime::token_id;
using troupe::runtime::tokenizer;

struct subject {
  tokenizer tok;
  bool metaspace;                 // SentencePiece: U+2581 in the text is read as a space
  std::vector<std::string> added; // added tokens' text: split out, and dropped by decode
};

subject load(const char* folder, bool metaspace) {
  subject s{tokenizer::load(troupe::testing::data_root() / folder), metaspace, {}};
  for (std::size_t id = 0; id < s.tok.vocab_size(); ++id)
    if (s.tok.is_special(static_cast<token_id>(id)))
      s.added.push_back(s.tok.id_to_token(static_cast<token_id>(id)));
  return s;
}

const std::vector<subject>& subjects() {
  static const std::vector<subject> all = [] {
    std::vector<subject> v;
    v.push_back(load("models/stories260k", true));
    v.push_back(load("tests/data/gpt2", false));
    return v;
  }();
  return all;
}

bool round_trip_promised(const subject& s, std::string_view text) {
  if (!troupe::fuzz::valid_utf8(text))
    return false;
  if (s.metaspace && text.find("\u2581") != std::string_view::npos)
    return false;
  for (const auto& a : s.added)
    if (text.find(a) != std::string_view::npos)
      return false;
  return true;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto text = troupe::fuzz::as_text(data, size);
  for (const auto& s : subjects()) {
    const auto vocab = s.tok.vocab_size();
    for (const bool add_special : {false, true}) {
      const auto ids = s.tok.encode(text, add_special);
      for (const auto id : ids)
        check(id >= 0 && static_cast<std::size_t>(id) < vocab, "encode gives ids of the vocab");
      const auto decoded = s.tok.decode(ids);
      check(troupe::fuzz::valid_utf8(decoded), "decode gives valid UTF-8");
      if (round_trip_promised(s, text))
        check(decoded == text, "decode(encode(text)) == text", decoded);
      check(troupe::fuzz::valid_utf8(s.tok.decode(ids, /*skip_special_tokens=*/false)),
            "decode with special tokens gives valid UTF-8");
    }
  }
  return 0;
}
