// Fuzzes decoding of any id sequence (runtime/tokenizer/decode_stream,
// runtime/incremental_detokenizer) with the two bundled tokenizers: decode gives valid
// UTF-8, decode_stream's push + finish equals decode (also from a copy taken midway), and
// the incremental detokenizer never returns part of a character and streams exactly
// decode(prompt ++ output) minus decode(prompt) (see its header for the cut-character case).
//
// Input: byte 0 picks the tokenizer (bit 0) and skip_special_tokens (bit 1), byte 1 the
// prompt's length in ids; then two bytes per id, spread over the vocab plus a few unknown
// and negative ids.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "fuzz_support.hpp"
#include "runtime/incremental_detokenizer.hpp"
#include "tests/support/data_root.hpp"

namespace {

using troupe::fuzz::check;
using troupe::runtime::decode_stream;
using troupe::runtime::incremental_detokenizer;
using troupe::runtime::token_id;
using troupe::runtime::tokenizer;

const tokenizer& tokenizer_of(int which) {
  const std::filesystem::path& root = troupe::testing::data_root();
  static const tokenizer stories = tokenizer::load(root / "models/stories260k");
  static const tokenizer gpt2 = tokenizer::load(root / "tests/data/gpt2");
  return which == 0 ? stories : gpt2;
}

std::size_t char_len(const std::string& s, std::size_t i) {
  const auto b = static_cast<std::uint8_t>(s[i]);
  return b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
}

// Byte length of the longest common prefix of whole characters.
std::size_t common_prefix(const std::string& a, const std::string& b) {
  std::size_t i = 0;
  while (i < a.size() && i < b.size()) {
    const auto n = char_len(a, i);
    if (a.compare(i, n, b, i, n) != 0)
      break;
    i += n;
  }
  return i;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2)
    return 0;
  const tokenizer& tok = tokenizer_of(data[0] & 1);
  const bool skip = (data[0] & 2) != 0;
  const auto span_ids = static_cast<std::uint32_t>(tok.vocab_size()) + 8;
  std::vector<token_id> ids;
  for (std::size_t i = 2; i + 1 < size; i += 2) {
    const auto v = static_cast<std::uint32_t>(data[i] | (data[i + 1] << 8));
    ids.push_back(static_cast<token_id>(v % span_ids) - 4);
  }
  const std::size_t prompt_len = std::min<std::size_t>(data[1], ids.size());
  const std::span<const token_id> all(ids), prompt = all.first(prompt_len), output = all.subspan(prompt_len);

  const auto full = tok.decode(all, skip);
  check(troupe::fuzz::valid_utf8(full), "decode gives valid UTF-8");
  const auto prompt_text = tok.decode(prompt, skip);

  // decode_stream: push + finish == decode, and a copy finished midway == decode(prefix).
  decode_stream stream(tok, skip);
  std::string streamed;
  for (std::size_t i = 0; i < all.size(); ++i) {
    stream.push(all[i], streamed);
    if (i + 1 == prompt_len) {
      auto copy = stream;
      std::string partial = streamed;
      copy.finish(partial);
      check(partial == prompt_text, "a decode_stream copy finished midway gives decode(prefix)", partial);
    }
  }
  stream.finish(streamed);
  check(streamed == full, "decode_stream push + finish == decode", streamed);

  incremental_detokenizer detok(tok, prompt, skip);
  std::string text;
  for (const auto id : output) {
    const auto piece = detok.push(id);
    check(troupe::fuzz::valid_utf8(piece), "push returns whole characters", piece);
    text += piece;
  }
  const auto rest = detok.flush();
  check(troupe::fuzz::valid_utf8(rest), "flush returns whole characters", rest);
  text += rest;
  const auto expected =
      full.starts_with(prompt_text) ? full.substr(prompt_text.size()) : full.substr(common_prefix(prompt_text, full));
  check(text == expected, "streamed text == decode(prompt ++ output) minus decode(prompt)", text);
  return 0;
}
