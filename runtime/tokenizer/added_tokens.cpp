// Finding added tokens in text: a first-byte-bucketed leftmost-longest search, and the
// split around each match with Hugging Face's single_word / lstrip / rstrip rules.
#include "runtime/tokenizer/added_tokens.hpp"

#include "runtime/tokenizer/regex.hpp"
#include "runtime/tokenizer/utf8.hpp"

#include <algorithm>
#include <cstdint>
#include <utility>

namespace troupe::runtime::tokenizer_detail {
namespace {

// `\w` as Hugging Face's single_word check uses it.
bool is_word_char_at(std::string_view s, std::size_t pos) {
  static const regex word_char(R"(\w)");
  return word_char.matches_at_start(s.substr(pos, char_len(s, pos)));
}

} // namespace

void added_token_matcher::add(const std::vector<added_token>& tokens, std::size_t index) {
  const auto& p = tokens[index].pattern;
  if (p.empty())
    return;
  auto& bucket = buckets_[static_cast<std::uint8_t>(p[0])];
  bucket.push_back(index);
  std::stable_sort(bucket.begin(), bucket.end(),
                   [&](std::size_t a, std::size_t b) { return tokens[a].pattern.size() > tokens[b].pattern.size(); });
  empty_ = false;
}

std::optional<added_token_matcher::match> added_token_matcher::find(std::string_view text, std::size_t from,
                                                                    const std::vector<added_token>& tokens) const {
  for (std::size_t pos = from; pos < text.size(); ++pos) {
    for (const auto index : buckets_[static_cast<std::uint8_t>(text[pos])]) {
      const auto& p = tokens[index].pattern;
      if (text.substr(pos).starts_with(p))
        return match{pos, pos + p.size(), index};
    }
  }
  return std::nullopt;
}

void split_on_added(std::string_view text, const added_token_matcher& matcher, const std::vector<added_token>& tokens,
                    const std::function<void(std::string_view, bool)>& on_text,
                    const std::function<void(std::size_t)>& on_token) {
  std::size_t cursor = 0; // start of the text not yet handed out
  std::size_t from = 0;
  while (!matcher.empty()) {
    const auto m = matcher.find(text, from, tokens);
    if (!m)
      break;
    const auto& token = tokens[m->token];
    std::size_t start = m->start, stop = m->end;
    if (token.single_word) {
      const bool word_before = start > 0 && [&] {
        std::size_t p = start - 1;
        while (p > 0 && (byte_at(text, p) & 0xC0) == 0x80)
          --p;
        return is_word_char_at(text, p);
      }();
      const bool word_after = stop < text.size() && is_word_char_at(text, stop);
      if (word_before || word_after) {
        from = stop; // like Hugging Face, the skipped match is not searched again
        continue;
      }
    }
    if (token.lstrip)
      start = std::max(cursor, trailing_space_start(text.substr(0, start)));
    if (token.rstrip)
      stop += leading_space_len(text.substr(stop));
    if (cursor < start)
      on_text(text.substr(cursor, start - cursor), cursor == 0);
    on_token(m->token);
    cursor = from = stop;
  }
  if (cursor < text.size())
    on_text(text.substr(cursor), cursor == 0);
}

void load_added_tokens(const json_file& f, const boost::json::value& v, std::vector<added_token>& added) {
  for (const auto& entry : f.array(v, "added_tokens")) {
    const auto& o = f.object(entry, "added_tokens entry");
    added_token a;
    a.id = f.id(f.required(o, "id", "added_tokens entry"), "added_tokens id");
    a.content = f.string(f.required(o, "content", "added_tokens entry"), "added_tokens content");
    a.special = f.flag(o, "special", false);
    a.single_word = f.flag(o, "single_word", false);
    a.lstrip = f.flag(o, "lstrip", false);
    a.rstrip = f.flag(o, "rstrip", false);
    a.normalized = f.flag(o, "normalized", !a.special);
    added.push_back(std::move(a));
  }
}

} // namespace troupe::runtime::tokenizer_detail
