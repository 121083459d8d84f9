// Loads Hugging Face tokenizer.json files and implements BPE encode/decode for them: the
// added-token split, normalizers, pre-tokenizers, the merge loop and the decoder chain.
#include "runtime/tokenizer.hpp"

#include "runtime/errors.hpp"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <boost/json.hpp>

#include <algorithm>
#include <array>
#include <fstream>
#include <functional>
#include <queue>
#include <sstream>
#include <stdexcept>
#include <unordered_map>
#include <utility>

namespace troupe::runtime {
namespace {

namespace fs = std::filesystem;
namespace json = boost::json;

// ---------------------------------------------------------------------------------------
// UTF-8
// ---------------------------------------------------------------------------------------

constexpr std::string_view replacement_char = "\xEF\xBF\xBD"; // U+FFFD

std::uint8_t byte_at(std::string_view s, std::size_t i) {
  return static_cast<std::uint8_t>(s[i]);
}

// Length of the character at s[i] of a valid UTF-8 string.
std::size_t char_len(std::string_view s, std::size_t i) {
  const auto b = byte_at(s, i);
  const std::size_t n = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
  return std::min(n, s.size() - i);
}

enum class utf8_status { valid, invalid, incomplete };

// Checks the sequence starting at s[pos] with the same rules (and the same "maximal
// subpart" lengths for bad input) as Rust's String::from_utf8_lossy, which is what Hugging
// Face's decoders use: `len` is the character's length, the number of bytes that make up
// one U+FFFD, or the bytes seen so far of a sequence that the string ends inside.
utf8_status check_utf8_char(std::string_view s, std::size_t pos, std::size_t& len) {
  const auto b0 = byte_at(s, pos);
  if (b0 < 0x80) {
    len = 1;
    return utf8_status::valid;
  }
  std::size_t need = 0;
  std::uint8_t lo = 0x80, hi = 0xBF; // allowed range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 3;
    if (b0 == 0xE0)
      lo = 0xA0; // no overlong forms
    if (b0 == 0xED)
      hi = 0x9F; // no surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 4;
    if (b0 == 0xF0)
      lo = 0x90;
    if (b0 == 0xF4)
      hi = 0x8F; // nothing above U+10FFFF
  } else {
    len = 1;
    return utf8_status::invalid;
  }
  for (std::size_t i = 1; i < need; ++i) {
    if (pos + i >= s.size()) {
      len = i;
      return utf8_status::incomplete;
    }
    const auto b = byte_at(s, pos + i);
    const std::uint8_t l = i == 1 ? lo : 0x80, h = i == 1 ? hi : 0xBF;
    if (b < l || b > h) {
      len = i;
      return utf8_status::invalid;
    }
  }
  len = need;
  return utf8_status::valid;
}

bool is_valid_utf8(std::string_view s) {
  for (std::size_t i = 0, len = 0; i < s.size(); i += len) {
    if (check_utf8_char(s, i, len) != utf8_status::valid)
      return false;
  }
  return true;
}

// Each maximal invalid subsequence becomes one U+FFFD.
std::string to_valid_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 8);
  for (std::size_t i = 0, len = 0; i < s.size(); i += len) {
    if (check_utf8_char(s, i, len) == utf8_status::valid) {
      out.append(s.substr(i, len));
    } else {
      out.append(replacement_char);
    }
  }
  return out;
}

char32_t decode_char(std::string_view s, std::size_t i, std::size_t len) {
  const auto b0 = byte_at(s, i);
  if (len == 1)
    return b0;
  char32_t c = b0 & (len == 2 ? 0x1F : len == 3 ? 0x0F : 0x07);
  for (std::size_t k = 1; k < len; ++k)
    c = (c << 6) | (byte_at(s, i + k) & 0x3F);
  return c;
}

void append_char(std::string& out, char32_t c) {
  if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (c >> 6)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (c >> 12)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (c >> 18)));
    out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

// The Unicode White_Space property (what Rust's char::is_whitespace and `\s` test).
bool is_white_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

// Byte length of the run of whitespace at the start of s.
std::size_t leading_space_len(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size()) {
    const auto len = char_len(s, i);
    if (!is_white_space(decode_char(s, i, len)))
      break;
    i += len;
  }
  return i;
}

// Where the run of whitespace at the end of s starts.
std::size_t trailing_space_start(std::string_view s) {
  std::size_t start = 0; // just past the last non-space character
  for (std::size_t i = 0; i < s.size();) {
    const auto len = char_len(s, i);
    if (!is_white_space(decode_char(s, i, len)))
      start = i + len;
    i += len;
  }
  return start;
}

std::string replace_all(std::string_view s, std::string_view from, std::string_view to) {
  std::string out;
  out.reserve(s.size());
  std::size_t pos = 0;
  while (true) {
    const auto hit = s.find(from, pos);
    if (hit == std::string_view::npos)
      break;
    out.append(s.substr(pos, hit - pos));
    out.append(to);
    pos = hit + from.size();
  }
  out.append(s.substr(pos));
  return out;
}

// ---------------------------------------------------------------------------------------
// GPT-2's bytes-to-unicode map: every byte gets a printable stand-in character so that
// byte-level vocabularies can be stored as text.
// ---------------------------------------------------------------------------------------

struct byte_level_alphabet {
  std::array<std::string, 256> encoded;    // byte -> UTF-8 of its stand-in
  std::array<std::int16_t, 324> decoded{}; // stand-in code point -> byte, -1 if none
};

const byte_level_alphabet& byte_alphabet() {
  static const byte_level_alphabet table = [] {
    byte_level_alphabet t;
    t.decoded.fill(-1);
    char32_t next_extra = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      const char32_t c = printable ? static_cast<char32_t>(b) : next_extra++;
      append_char(t.encoded[b], c);
      t.decoded[c] = static_cast<std::int16_t>(b);
    }
    return t;
  }();
  return table;
}

std::string to_byte_level(std::string_view s) {
  const auto& alphabet = byte_alphabet();
  std::string out;
  out.reserve(s.size() * 2);
  for (const char ch : s)
    out.append(alphabet.encoded[static_cast<std::uint8_t>(ch)]);
  return out;
}

// A token's bytes as the ByteLevel decoder sees them: the stand-ins mapped back, or the
// token's own bytes when any character is not a stand-in (e.g. an added token).
void append_byte_level_token(std::string& out, std::string_view token) {
  const auto& alphabet = byte_alphabet();
  const auto mark = out.size();
  for (std::size_t i = 0; i < token.size();) {
    const auto len = char_len(token, i);
    const auto c = decode_char(token, i, len);
    if (c >= alphabet.decoded.size() || alphabet.decoded[c] < 0) {
      out.resize(mark);
      out.append(token);
      return;
    }
    out.push_back(static_cast<char>(alphabet.decoded[c]));
    i += len;
  }
}

// "<0xAB>" -> 0xAB, as the ByteFallback decoder recognises byte tokens.
std::optional<std::uint8_t> parse_byte_token(std::string_view t) {
  if (t.size() != 6 || !t.starts_with("<0x") || t.back() != '>')
    return std::nullopt;
  int value = 0;
  for (const char ch : t.substr(3, 2)) {
    int digit = -1;
    if (ch >= '0' && ch <= '9')
      digit = ch - '0';
    if (ch >= 'a' && ch <= 'f')
      digit = ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F')
      digit = ch - 'A' + 10;
    if (digit < 0)
      return std::nullopt;
    value = value * 16 + digit;
  }
  return static_cast<std::uint8_t>(value);
}

std::string byte_token_name(int b) {
  static constexpr char hex[] = "0123456789ABCDEF";
  return std::string{'<', '0', 'x', hex[b >> 4], hex[b & 15], '>'};
}

// ---------------------------------------------------------------------------------------
// PCRE2 regex (UTF + UCP, JIT when available)
// ---------------------------------------------------------------------------------------

// Per-thread match state, so a compiled pattern can be shared by all threads. The JIT stack
// is larger than PCRE2's 32 KiB default because patterns like \s+(?!\S) backtrack once per
// character over long runs of whitespace.
struct match_resources {
  pcre2_match_data* data = pcre2_match_data_create(1, nullptr);
  pcre2_match_context* context = pcre2_match_context_create(nullptr);
  pcre2_jit_stack* stack = pcre2_jit_stack_create(32 * 1024, 16 * 1024 * 1024, nullptr);
  match_resources() {
    if (context != nullptr && stack != nullptr)
      pcre2_jit_stack_assign(context, nullptr, stack);
  }
  ~match_resources() {
    pcre2_jit_stack_free(stack);
    pcre2_match_context_free(context);
    pcre2_match_data_free(data);
  }
  match_resources(const match_resources&) = delete;
  match_resources& operator=(const match_resources&) = delete;
};

match_resources& thread_match_resources() {
  thread_local match_resources resources;
  if (resources.data == nullptr)
    throw std::bad_alloc();
  return resources;
}

class regex {
 public:
  // Throws std::invalid_argument with PCRE2's message.
  explicit regex(std::string_view pattern) {
    // Oniguruma (what Hugging Face uses) also reads \uHHHH; PCRE2 does with ALT_BSUX, and
    // the EXTRA flag keeps \x{...} working.
    std::unique_ptr<pcre2_compile_context, void (*)(pcre2_compile_context*)> context(
        pcre2_compile_context_create(nullptr), pcre2_compile_context_free);
    if (context)
      pcre2_set_compile_extra_options(context.get(), PCRE2_EXTRA_ALT_BSUX);
    int error = 0;
    PCRE2_SIZE offset = 0;
    pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                     PCRE2_UTF | PCRE2_UCP | PCRE2_ALT_BSUX, &error, &offset, context.get());
    if (code == nullptr) {
      std::array<PCRE2_UCHAR, 256> message{};
      pcre2_get_error_message(error, message.data(), message.size());
      throw std::invalid_argument(reinterpret_cast<const char*>(message.data()) + std::string(" at offset ") +
                                  std::to_string(offset));
    }
    code_ = std::shared_ptr<pcre2_code>(code, pcre2_code_free);
    pcre2_jit_compile(code, PCRE2_JIT_COMPLETE); // on failure the interpreter is used
  }

  // Calls f(start, end) for each non-empty match, left to right. `subject` must be valid
  // UTF-8 (checked once by the caller, hence PCRE2_NO_UTF_CHECK, which also keeps the
  // loop linear).
  template <class F>
  void for_each_match(std::string_view subject, F&& f) const {
    if (subject.empty())
      return;
    auto& r = thread_match_resources();
    const auto* text = reinterpret_cast<PCRE2_SPTR>(subject.data());
    std::size_t offset = 0;
    while (offset <= subject.size()) {
      int rc = pcre2_match(code_.get(), text, subject.size(), offset, PCRE2_NO_UTF_CHECK, r.data, r.context);
      if (rc < 0 && rc != PCRE2_ERROR_NOMATCH) {
        // Out of JIT stack or similar: the interpreter keeps its state on the heap.
        rc = pcre2_match(code_.get(), text, subject.size(), offset, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, r.data,
                         r.context);
      }
      if (rc == PCRE2_ERROR_NOMATCH)
        break;
      if (rc < 0) {
        std::array<PCRE2_UCHAR, 256> message{};
        pcre2_get_error_message(rc, message.data(), message.size());
        throw std::runtime_error("tokenizer: regex match failed: " +
                                 std::string(reinterpret_cast<const char*>(message.data())));
      }
      const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(r.data);
      const std::size_t start = ovector[0], end = ovector[1];
      if (end <= start) { // an empty match: step over one character
        if (start >= subject.size())
          break;
        offset = start + char_len(subject, start);
        continue;
      }
      f(start, end);
      offset = end;
    }
  }

  // Whether the pattern matches at the very start of s.
  bool matches_at_start(std::string_view s) const {
    auto& r = thread_match_resources();
    const int rc = pcre2_match(code_.get(), reinterpret_cast<PCRE2_SPTR>(s.data()), s.size(), 0,
                               PCRE2_NO_UTF_CHECK | PCRE2_ANCHORED, r.data, r.context);
    return rc >= 0;
  }

 private:
  std::shared_ptr<pcre2_code> code_;
};

// `\w` as Hugging Face's single_word check uses it.
bool is_word_char_at(std::string_view s, std::size_t pos) {
  static const regex word_char(R"(\w)");
  return word_char.matches_at_start(s.substr(pos, char_len(s, pos)));
}

// ---------------------------------------------------------------------------------------
// The loaded tokenizer
// ---------------------------------------------------------------------------------------

struct string_hash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};
using string_to_id = std::unordered_map<std::string, token_id, string_hash, std::equal_to<>>;

struct merge_info {
  std::int32_t rank;
  token_id merged;
};

std::uint64_t pair_key(token_id a, token_id b) {
  return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(a)) << 32) | static_cast<std::uint32_t>(b);
}

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
  void add(const std::vector<added_token>& tokens, std::size_t index) {
    const auto& p = tokens[index].pattern;
    if (p.empty())
      return;
    auto& bucket = buckets_[static_cast<std::uint8_t>(p[0])];
    bucket.push_back(index);
    std::stable_sort(bucket.begin(), bucket.end(),
                     [&](std::size_t a, std::size_t b) { return tokens[a].pattern.size() > tokens[b].pattern.size(); });
    empty_ = false;
  }
  bool empty() const { return empty_; }

  struct match {
    std::size_t start, end, token;
  };
  std::optional<match> find(std::string_view text, std::size_t from, const std::vector<added_token>& tokens) const {
    for (std::size_t pos = from; pos < text.size(); ++pos) {
      for (const auto index : buckets_[static_cast<std::uint8_t>(text[pos])]) {
        const auto& p = tokens[index].pattern;
        if (text.substr(pos).starts_with(p))
          return match{pos, pos + p.size(), index};
      }
    }
    return std::nullopt;
  }

 private:
  std::array<std::vector<std::size_t>, 256> buckets_;
  bool empty_ = true;
};

struct normalizer_step {
  enum class kind { prepend, replace, strip } what;
  std::string a, b;                 // prepend: a; replace: a -> b
  bool left = false, right = false; // strip
};

enum class prepend_scheme { always, first, never };

struct pre_tokenizer_step {
  enum class kind { byte_level, metaspace, split_regex, split_literal };
  explicit pre_tokenizer_step(kind k) : what(k) {}
  kind what;
  bool add_prefix_space = false; // byte_level
  std::string replacement;       // metaspace
  prepend_scheme scheme = prepend_scheme::always;
  bool split = true;       // metaspace
  std::string literal;     // split_literal
  std::optional<regex> re; // split_regex, byte_level with use_regex
};

struct decoder_step {
  enum class kind { replace, byte_fallback, fuse, strip, metaspace, byte_level, join_with_space };
  explicit decoder_step(kind k) : what(k) {}
  kind what;
  bool joined_input = false;       // an earlier step already joined all tokens into one
  std::string a, b;                // replace: a -> b; strip / metaspace: a = the character
  std::size_t start = 0, stop = 0; // strip
  bool strip_first = false;        // metaspace: drop the replacement in the first token
};

// One piece of text on its way through the pre-tokenizers; at_origin marks the piece that
// starts at offset 0 of the original text (Metaspace's prepend_scheme "first").
struct piece {
  std::string text;
  bool at_origin = false;
};

constexpr std::uint8_t id_known = 1, id_special = 2;

} // namespace

struct tokenizer::impl {
  // model
  string_to_id vocab;
  std::unordered_map<std::uint64_t, merge_info> merges;
  std::optional<token_id> unk;
  bool fuse_unk = false;
  bool byte_fallback = false;
  bool ignore_merges = false;
  std::array<token_id, 256> byte_tokens{}; // <0xXX> ids, -1 when missing

  std::vector<added_token> added;
  string_to_id added_ids;
  added_token_matcher raw_matcher, normalized_matcher;

  std::vector<normalizer_step> normalizers;
  std::vector<pre_tokenizer_step> pre_tokenizers;
  bool byte_level_input = false; // pieces go through GPT-2's byte map before BPE
  std::vector<decoder_step> decoders;
  bool has_post_processor = false;
  std::vector<token_id> prefix, suffix; // added around the encoding

  std::vector<std::string> id_strings; // id -> token text (added tokens win)
  std::vector<std::uint8_t> id_flags;
  std::optional<token_id> bos, eos;
  std::string chat_template;

  void normalize(std::string& s) const;
  void pre_tokenize_segment(std::string text, bool at_origin, const std::function<void(std::string&&)>& on_piece) const;
  void split(std::string_view text, const std::function<void(std::string&&)>& on_piece,
             const std::function<void(std::size_t)>& on_token) const;
  void bpe(std::string_view word, std::vector<token_id>& out) const;
};

namespace {

// ---------------------------------------------------------------------------------------
// Encoding
// ---------------------------------------------------------------------------------------

// Splits `text` on the matcher's added tokens, honouring single_word / lstrip / rstrip as
// Hugging Face does; on_text gets the plain stretches (and whether they start at 0).
template <class OnText, class OnToken>
void split_on_added(std::string_view text, const added_token_matcher& matcher, const std::vector<added_token>& tokens,
                    OnText&& on_text, OnToken&& on_token) {
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

void apply_split(std::vector<piece>& pieces, const pre_tokenizer_step& step) {
  std::vector<piece> out;
  out.reserve(pieces.size());
  auto emit = [&](const piece& from, std::size_t start, std::size_t end) {
    if (end > start)
      out.push_back({from.text.substr(start, end - start), from.at_origin && start == 0});
  };
  for (const auto& p : pieces) {
    std::size_t prev = 0;
    auto isolate = [&](std::size_t start, std::size_t end) {
      emit(p, prev, start);
      emit(p, start, end);
      prev = end;
    };
    if (step.re) {
      step.re->for_each_match(p.text, isolate);
    } else {
      for (auto hit = p.text.find(step.literal); hit != std::string::npos; hit = p.text.find(step.literal, prev)) {
        isolate(hit, hit + step.literal.size());
      }
    }
    emit(p, prev, p.text.size());
  }
  pieces = std::move(out);
}

void apply_metaspace(std::vector<piece>& pieces, const pre_tokenizer_step& step) {
  std::vector<piece> out;
  out.reserve(pieces.size());
  for (auto& p : pieces) {
    std::string text = replace_all(p.text, " ", step.replacement);
    const bool prepend = step.scheme == prepend_scheme::always || (step.scheme == prepend_scheme::first && p.at_origin);
    if (prepend && !text.starts_with(step.replacement))
      text.insert(0, step.replacement);
    if (!step.split) {
      out.push_back({std::move(text), p.at_origin});
      continue;
    }
    // Each replacement character starts a new piece (it stays with the text after it).
    std::size_t start = 0;
    for (auto hit = text.find(step.replacement, 1); hit != std::string::npos;
         hit = text.find(step.replacement, hit + 1)) {
      out.push_back({text.substr(start, hit - start), p.at_origin && start == 0});
      start = hit;
    }
    if (start < text.size())
      out.push_back({text.substr(start), p.at_origin && start == 0});
  }
  pieces = std::move(out);
}

} // namespace

void tokenizer::impl::normalize(std::string& s) const {
  for (const auto& step : normalizers) {
    switch (step.what) {
      case normalizer_step::kind::prepend:
        if (!s.empty())
          s.insert(0, step.a);
        break;
      case normalizer_step::kind::replace:
        if (s.find(step.a) != std::string::npos)
          s = replace_all(s, step.a, step.b);
        break;
      case normalizer_step::kind::strip: {
        std::size_t end = step.right ? trailing_space_start(s) : s.size();
        std::size_t begin = step.left ? leading_space_len(std::string_view(s).substr(0, end)) : 0;
        s = s.substr(begin, end - begin);
        break;
      }
    }
  }
}

void tokenizer::impl::pre_tokenize_segment(std::string text, bool at_origin,
                                           const std::function<void(std::string&&)>& on_piece) const {
  std::vector<piece> pieces;
  pieces.push_back({std::move(text), at_origin});
  for (const auto& step : pre_tokenizers) {
    switch (step.what) {
      case pre_tokenizer_step::kind::byte_level:
        if (step.add_prefix_space) {
          for (auto& p : pieces) {
            if (!p.text.starts_with(' '))
              p.text.insert(0, " ");
          }
        }
        if (step.re)
          apply_split(pieces, step);
        break;
      case pre_tokenizer_step::kind::metaspace:
        apply_metaspace(pieces, step);
        break;
      case pre_tokenizer_step::kind::split_regex:
      case pre_tokenizer_step::kind::split_literal:
        apply_split(pieces, step);
        break;
    }
  }
  for (auto& p : pieces) {
    if (!p.text.empty())
      on_piece(std::move(p.text));
  }
}

void tokenizer::impl::split(std::string_view text, const std::function<void(std::string&&)>& on_piece,
                            const std::function<void(std::size_t)>& on_token) const {
  // Tokens with normalized=false match the raw text; the others match normalized text.
  split_on_added(
      text, raw_matcher, added,
      [&](std::string_view segment, bool at_origin) {
        std::string normalized(segment);
        normalize(normalized);
        split_on_added(
            normalized, normalized_matcher, added,
            [&](std::string_view part, bool part_at_origin) {
              pre_tokenize_segment(std::string(part), at_origin && part_at_origin, on_piece);
            },
            on_token);
      },
      on_token);
}

// BPE over one pre-tokenized word. Merges are applied lowest rank first (leftmost on ties)
// with a priority queue over a linked list of symbols: O(n log n) even when the word is a
// whole 16k-character prompt (the SentencePiece layout has no pre-tokenizer). Stale queue
// entries are skipped the way Hugging Face's Word::merge_all does, so results match it.
void tokenizer::impl::bpe(std::string_view word, std::vector<token_id>& out) const {
  if (word.empty())
    return;
  if (ignore_merges) {
    if (const auto it = vocab.find(word); it != vocab.end()) {
      out.push_back(it->second);
      return;
    }
  }
  struct symbol {
    token_id id;
    std::int32_t prev, next;
    bool alive;
  };
  std::vector<symbol> symbols;
  symbols.reserve(word.size());
  auto add = [&](token_id id) {
    const auto n = static_cast<std::int32_t>(symbols.size());
    symbols.push_back({id, n - 1, n + 1, true});
  };
  bool unk_open = false; // the last symbol is an unk that more unknown chars fuse into
  for (std::size_t i = 0; i < word.size();) {
    const auto len = char_len(word, i);
    const auto ch = word.substr(i, len);
    i += len;
    if (const auto it = vocab.find(ch); it != vocab.end()) {
      add(it->second);
      unk_open = false;
      continue;
    }
    if (byte_fallback &&
        std::all_of(ch.begin(), ch.end(), [&](char b) { return byte_tokens[static_cast<std::uint8_t>(b)] >= 0; })) {
      for (const char b : ch)
        add(byte_tokens[static_cast<std::uint8_t>(b)]);
      unk_open = false;
      continue;
    }
    if (unk) {
      if (!(fuse_unk && unk_open))
        add(*unk);
      unk_open = true;
    }
    // Without an unk token the character is dropped, as Hugging Face does.
  }
  if (symbols.empty())
    return;
  symbols.back().next = -1;

  struct candidate {
    std::int32_t rank, pos;
    token_id merged;
    bool operator>(const candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<candidate, std::vector<candidate>, std::greater<>> queue;
  auto consider = [&](std::int32_t pos) {
    const auto next = symbols[pos].next;
    if (next < 0)
      return;
    const auto it = merges.find(pair_key(symbols[pos].id, symbols[next].id));
    if (it != merges.end())
      queue.push({it->second.rank, pos, it->second.merged});
  };
  for (std::int32_t pos = 0; pos + 1 < static_cast<std::int32_t>(symbols.size()); ++pos) {
    consider(pos);
  }
  while (!queue.empty()) {
    const auto top = queue.top();
    queue.pop();
    auto& left = symbols[top.pos];
    if (!left.alive || left.next < 0)
      continue;
    auto& right = symbols[left.next];
    const auto it = merges.find(pair_key(left.id, right.id));
    if (it == merges.end() || it->second.merged != top.merged)
      continue; // stale
    left.id = top.merged;
    right.alive = false;
    left.next = right.next;
    if (left.next >= 0)
      symbols[left.next].prev = top.pos;
    if (left.prev >= 0)
      consider(left.prev);
    consider(top.pos);
  }
  for (const auto& s : symbols) {
    if (s.alive)
      out.push_back(s.id);
  }
}

// ---------------------------------------------------------------------------------------
// Loading
// ---------------------------------------------------------------------------------------

namespace {

// Reads one JSON file; every error names the file.
class json_file {
 public:
  explicit json_file(fs::path path) : path_(std::move(path)), name_(path_.string()) {}

  [[noreturn]] void fail(const std::string& problem) const { throw model_error(name_ + ": " + problem); }

  json::value parse() const {
    std::ifstream in(path_, std::ios::binary);
    if (!in)
      fail("cannot be opened");
    std::ostringstream buffer;
    buffer << in.rdbuf();
    if (in.bad())
      fail("cannot be read");
    boost::system::error_code ec;
    json::value v = json::parse(buffer.str(), ec);
    if (ec)
      fail("invalid JSON (" + ec.message() + ")");
    return v;
  }

  const json::object& object(const json::value& v, std::string_view what) const {
    if (!v.is_object())
      fail(std::string(what) + " must be a JSON object");
    return v.get_object();
  }
  const json::array& array(const json::value& v, std::string_view what) const {
    if (!v.is_array())
      fail(std::string(what) + " must be a JSON array");
    return v.get_array();
  }
  std::string string(const json::value& v, std::string_view what) const {
    if (!v.is_string())
      fail(std::string(what) + " must be a string");
    return std::string(v.get_string());
  }
  std::int64_t integer(const json::value& v, std::string_view what) const {
    if (v.is_int64())
      return v.get_int64();
    if (v.is_uint64() && v.get_uint64() <= INT64_MAX)
      return static_cast<std::int64_t>(v.get_uint64());
    fail(std::string(what) + " must be an integer");
  }
  token_id id(const json::value& v, std::string_view what) const {
    const auto n = integer(v, what);
    if (n < 0 || n > INT32_MAX)
      fail(std::string(what) + " is out of range (" + std::to_string(n) + ")");
    return static_cast<token_id>(n);
  }
  // Absent and null both count as "not given".
  const json::value* field(const json::object& o, std::string_view key) const {
    const auto* v = o.if_contains(key);
    return v == nullptr || v->is_null() ? nullptr : v;
  }
  const json::value& required(const json::object& o, std::string_view key, std::string_view where) const {
    const auto* v = field(o, key);
    if (v == nullptr)
      fail("missing '" + std::string(key) + "' in " + std::string(where));
    return *v;
  }
  bool flag(const json::object& o, std::string_view key, bool fallback) const {
    const auto* v = field(o, key);
    if (v == nullptr)
      return fallback;
    if (!v->is_bool())
      fail("'" + std::string(key) + "' must be true or false");
    return v->get_bool();
  }
  std::string type(const json::object& o, std::string_view where) const {
    return string(required(o, "type", where), std::string(where) + ".type");
  }

 private:
  fs::path path_;
  std::string name_;
};

// {"String": "..."} -> the string; {"Regex": "..."} -> model_error unless allowed.
struct pattern_spec {
  std::string text;
  bool is_regex = false;
};
pattern_spec read_pattern(const json_file& f, const json::object& o, std::string_view where) {
  const auto& p = f.object(f.required(o, "pattern", where), std::string(where) + ".pattern");
  if (const auto* s = f.field(p, "String"))
    return {f.string(*s, "pattern.String"), false};
  if (const auto* r = f.field(p, "Regex"))
    return {f.string(*r, "pattern.Regex"), true};
  f.fail(std::string(where) + ".pattern must hold \"String\" or \"Regex\"");
}

std::string single_char(const json_file& f, const json::value& v, std::string_view what) {
  auto s = f.string(v, what);
  if (s.empty() || !is_valid_utf8(s) || char_len(s, 0) != s.size()) {
    f.fail(std::string(what) + " must be a single character");
  }
  return s;
}

regex compile(const json_file& f, const std::string& pattern, std::string_view where) {
  try {
    return regex(pattern);
  } catch (const std::invalid_argument& e) {
    f.fail(std::string(where) + ": invalid regex '" + pattern + "': " + e.what());
  }
}

// The GPT-2 split pattern that ByteLevel(use_regex: true) applies.
constexpr std::string_view gpt2_pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

void load_normalizer(const json_file& f, const json::value& v, tokenizer::impl& t) {
  const auto& o = f.object(v, "normalizer");
  const auto type = f.type(o, "normalizer");
  if (type == "Sequence") {
    for (const auto& n : f.array(f.required(o, "normalizers", "normalizer Sequence"), "normalizers")) {
      load_normalizer(f, n, t);
    }
  } else if (type == "Prepend") {
    t.normalizers.push_back(
        {normalizer_step::kind::prepend, f.string(f.required(o, "prepend", "normalizer Prepend"), "prepend"), {}});
  } else if (type == "Replace") {
    const auto pattern = read_pattern(f, o, "normalizer Replace");
    if (pattern.is_regex)
      f.fail("normalizer Replace with a Regex pattern is not supported");
    if (pattern.text.empty())
      f.fail("normalizer Replace has an empty pattern");
    t.normalizers.push_back({normalizer_step::kind::replace, pattern.text,
                             f.string(f.required(o, "content", "normalizer Replace"), "content")});
  } else if (type == "NFC") {
    // No Unicode normalization library is available, so NFC is taken as the identity: exact
    // for text that is already NFC (nearly all real input), slightly off for decomposed
    // input (e.g. "e" + U+0301 stays two characters).
  } else if (type == "Strip") {
    t.normalizers.push_back(
        {normalizer_step::kind::strip, {}, {}, f.flag(o, "strip_left", true), f.flag(o, "strip_right", true)});
  } else {
    f.fail("normalizer type '" + type + "' is not supported");
  }
}

void load_pre_tokenizer(const json_file& f, const json::value& v, tokenizer::impl& t) {
  const auto& o = f.object(v, "pre_tokenizer");
  const auto type = f.type(o, "pre_tokenizer");
  if (t.byte_level_input) {
    // Our byte-level pieces keep raw text until BPE, so nothing may follow ByteLevel.
    f.fail("pre_tokenizer '" + type + "' after ByteLevel is not supported (ByteLevel must be last)");
  }
  if (type == "Sequence") {
    for (const auto& p : f.array(f.required(o, "pretokenizers", "pre_tokenizer Sequence"), "pretokenizers")) {
      load_pre_tokenizer(f, p, t);
    }
  } else if (type == "ByteLevel") {
    pre_tokenizer_step step(pre_tokenizer_step::kind::byte_level);
    step.add_prefix_space = f.flag(o, "add_prefix_space", true);
    if (f.flag(o, "use_regex", true))
      step.re = compile(f, std::string(gpt2_pattern), "pre_tokenizer ByteLevel");
    t.pre_tokenizers.push_back(std::move(step));
    t.byte_level_input = true;
  } else if (type == "Metaspace") {
    pre_tokenizer_step step(pre_tokenizer_step::kind::metaspace);
    step.replacement = single_char(f, f.required(o, "replacement", "pre_tokenizer Metaspace"), "Metaspace replacement");
    if (const auto* s = f.field(o, "prepend_scheme")) {
      const auto scheme = f.string(*s, "prepend_scheme");
      if (scheme == "always")
        step.scheme = prepend_scheme::always;
      else if (scheme == "first")
        step.scheme = prepend_scheme::first;
      else if (scheme == "never")
        step.scheme = prepend_scheme::never;
      else
        f.fail("Metaspace prepend_scheme '" + scheme + "' is unknown");
    } else {
      step.scheme = f.flag(o, "add_prefix_space", true) ? prepend_scheme::always : prepend_scheme::never;
    }
    step.split = f.flag(o, "split", true);
    t.pre_tokenizers.push_back(std::move(step));
  } else if (type == "Split") {
    const auto pattern = read_pattern(f, o, "pre_tokenizer Split");
    const auto behavior = f.string(f.required(o, "behavior", "pre_tokenizer Split"), "behavior");
    if (behavior != "Isolated")
      f.fail("pre_tokenizer Split behavior '" + behavior + "' is not supported (Isolated only)");
    if (f.flag(o, "invert", false))
      f.fail("pre_tokenizer Split with invert: true is not supported");
    if (pattern.text.empty())
      f.fail("pre_tokenizer Split has an empty pattern");
    pre_tokenizer_step step{pattern.is_regex ? pre_tokenizer_step::kind::split_regex
                                             : pre_tokenizer_step::kind::split_literal};
    if (pattern.is_regex)
      step.re = compile(f, pattern.text, "pre_tokenizer Split");
    else
      step.literal = pattern.text;
    t.pre_tokenizers.push_back(std::move(step));
  } else if (type == "Digits") {
    // Hugging Face splits on char::is_numeric, i.e. \p{N}.
    pre_tokenizer_step step(pre_tokenizer_step::kind::split_regex);
    step.re = compile(f, f.flag(o, "individual_digits", false) ? R"(\p{N})" : R"(\p{N}+)", "pre_tokenizer Digits");
    t.pre_tokenizers.push_back(std::move(step));
  } else {
    f.fail("pre_tokenizer type '" + type + "' is not supported");
  }
}

bool decoders_joined(const tokenizer::impl& t) {
  return std::any_of(t.decoders.begin(), t.decoders.end(), [](const decoder_step& d) {
    return d.what == decoder_step::kind::fuse || d.what == decoder_step::kind::byte_level ||
           d.what == decoder_step::kind::join_with_space;
  });
}

void load_decoder(const json_file& f, const json::value& v, tokenizer::impl& t) {
  const auto& o = f.object(v, "decoder");
  const auto type = f.type(o, "decoder");
  decoder_step step(decoder_step::kind::fuse);
  step.joined_input = decoders_joined(t);
  if (type == "Sequence") {
    for (const auto& d : f.array(f.required(o, "decoders", "decoder Sequence"), "decoders")) {
      load_decoder(f, d, t);
    }
    return;
  } else if (type == "Replace") {
    const auto pattern = read_pattern(f, o, "decoder Replace");
    if (pattern.is_regex)
      f.fail("decoder Replace with a Regex pattern is not supported");
    if (pattern.text.empty())
      f.fail("decoder Replace has an empty pattern");
    step.what = decoder_step::kind::replace;
    step.a = pattern.text;
    step.b = f.string(f.required(o, "content", "decoder Replace"), "content");
  } else if (type == "ByteFallback") {
    // Byte tokens only exist before a Fuse; after it this step could never fire.
    if (step.joined_input)
      f.fail("decoder ByteFallback after Fuse/ByteLevel is not supported");
    step.what = decoder_step::kind::byte_fallback;
  } else if (type == "Fuse") {
    step.what = decoder_step::kind::fuse;
  } else if (type == "Strip") {
    step.what = decoder_step::kind::strip;
    step.a = single_char(f, f.required(o, "content", "decoder Strip"), "Strip content");
    step.start = static_cast<std::size_t>(
        std::max<std::int64_t>(0, f.integer(f.required(o, "start", "decoder Strip"), "start")));
    step.stop =
        static_cast<std::size_t>(std::max<std::int64_t>(0, f.integer(f.required(o, "stop", "decoder Strip"), "stop")));
  } else if (type == "Metaspace") {
    step.what = decoder_step::kind::metaspace;
    step.a = single_char(f, f.required(o, "replacement", "decoder Metaspace"), "Metaspace replacement");
    if (const auto* s = f.field(o, "prepend_scheme")) {
      step.strip_first = f.string(*s, "prepend_scheme") != "never";
    } else {
      step.strip_first = f.flag(o, "add_prefix_space", true);
    }
  } else if (type == "ByteLevel") {
    // It needs whole tokens (a token is mapped back only if all its characters are
    // stand-ins), which no longer exist after a Fuse.
    if (step.joined_input)
      f.fail("decoder ByteLevel after Fuse is not supported");
    step.what = decoder_step::kind::byte_level;
  } else {
    f.fail("decoder type '" + type + "' is not supported");
  }
  t.decoders.push_back(std::move(step));
}

// Adds a post-processor's special tokens around what earlier processors added.
void load_post_processor(const json_file& f, const json::value& v, tokenizer::impl& t) {
  const auto& o = f.object(v, "post_processor");
  const auto type = f.type(o, "post_processor");
  std::vector<token_id> prefix, suffix;
  if (type == "Sequence") {
    for (const auto& p : f.array(f.required(o, "processors", "post_processor Sequence"), "processors")) {
      load_post_processor(f, p, t);
    }
    return;
  } else if (type == "ByteLevel") {
    // Only trims offsets; adds no tokens.
  } else if (type == "TemplateProcessing") {
    const auto& single = f.required(o, "single", "post_processor TemplateProcessing");
    if (!single.is_array())
      f.fail("TemplateProcessing 'single' must be a list of pieces");
    const auto* specials = f.field(o, "special_tokens");
    bool after_sequence = false;
    for (const auto& item_value : single.get_array()) {
      const auto& item = f.object(item_value, "TemplateProcessing piece");
      if (f.field(item, "Sequence") != nullptr) {
        after_sequence = true;
        continue;
      }
      const auto* special = f.field(item, "SpecialToken");
      if (special == nullptr)
        f.fail("TemplateProcessing piece must be a Sequence or a SpecialToken");
      const auto name =
          f.string(f.required(f.object(*special, "SpecialToken"), "id", "SpecialToken"), "SpecialToken.id");
      const json::value* entry =
          specials != nullptr ? f.object(*specials, "special_tokens").if_contains(name) : nullptr;
      if (entry == nullptr)
        f.fail("TemplateProcessing names special token '" + name + "' that special_tokens does not define");
      for (const auto& id :
           f.array(f.required(f.object(*entry, "special_tokens entry"), "ids", "special_tokens entry"), "ids")) {
        (after_sequence ? suffix : prefix).push_back(f.id(id, "special token id"));
      }
    }
  } else if (type == "RobertaProcessing" || type == "BertProcessing") {
    auto token_of = [&](std::string_view key) {
      const auto& pair = f.array(f.required(o, key, "post_processor " + type), key);
      if (pair.size() != 2)
        f.fail("post_processor " + type + " '" + std::string(key) + "' must be [token, id]");
      return f.id(pair[1], key);
    };
    prefix.push_back(token_of("cls"));
    suffix.push_back(token_of("sep"));
  } else {
    f.fail("post_processor type '" + type + "' is not supported");
  }
  t.prefix.insert(t.prefix.begin(), prefix.begin(), prefix.end());
  t.suffix.insert(t.suffix.end(), suffix.begin(), suffix.end());
}

void load_model(const json_file& f, const json::value& v, tokenizer::impl& t) {
  const auto& o = f.object(v, "model");
  if (const auto* type = f.field(o, "type")) {
    const auto name = f.string(*type, "model.type");
    if (name != "BPE")
      f.fail("model.type '" + name + "' is not supported (BPE only)");
  } else if (f.field(o, "merges") == nullptr) {
    f.fail("model has no 'type' and is not a BPE model (no 'merges')");
  }
  for (const auto& [key, value] : f.object(f.required(o, "vocab", "model"), "model.vocab")) {
    t.vocab.emplace(std::string(key), f.id(value, "model.vocab entry '" + std::string(key) + "'"));
  }
  for (const auto* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (const auto* s = f.field(o, key); s != nullptr && !f.string(*s, key).empty()) {
      f.fail("model." + std::string(key) + " is not supported");
    }
  }
  if (const auto* d = f.field(o, "dropout")) {
    if (!d->is_number() || d->to_number<double>() != 0.0)
      f.fail("model.dropout is not supported");
  }
  t.fuse_unk = f.flag(o, "fuse_unk", false);
  t.byte_fallback = f.flag(o, "byte_fallback", false);
  t.ignore_merges = f.flag(o, "ignore_merges", false);
  if (const auto* u = f.field(o, "unk_token")) {
    const auto name = f.string(*u, "model.unk_token");
    const auto it = t.vocab.find(name);
    if (it == t.vocab.end())
      f.fail("model.unk_token '" + name + "' is not in the vocab");
    t.unk = it->second;
  }
  for (int b = 0; b < 256; ++b) {
    const auto it = t.vocab.find(byte_token_name(b));
    t.byte_tokens[b] = it == t.vocab.end() ? -1 : it->second;
  }

  const auto* merges = f.field(o, "merges");
  if (merges == nullptr)
    return;
  const auto& list = f.array(*merges, "model.merges");
  t.merges.reserve(list.size());
  std::string a, b;
  for (std::size_t rank = 0; rank < list.size(); ++rank) {
    const auto& m = list[rank];
    const auto where = "model.merges[" + std::to_string(rank) + "]";
    if (m.is_string()) { // "a b"
      const std::string_view s = m.get_string();
      const auto space = s.find(' ');
      if (space == std::string_view::npos || s.find(' ', space + 1) != std::string_view::npos) {
        f.fail(where + " '" + std::string(s) + "' is not two tokens separated by one space");
      }
      a = s.substr(0, space);
      b = s.substr(space + 1);
    } else if (m.is_array() && m.get_array().size() == 2) { // ["a", "b"]
      a = f.string(m.get_array()[0], where);
      b = f.string(m.get_array()[1], where);
    } else {
      f.fail(where + " must be \"a b\" or [\"a\", \"b\"]");
    }
    const auto ia = t.vocab.find(a), ib = t.vocab.find(b), im = t.vocab.find(a + b);
    for (const auto& [it, name] : {std::pair{ia, &a}, std::pair{ib, &b}}) {
      if (it == t.vocab.end())
        f.fail(where + " names token '" + *name + "' that is not in the vocab");
    }
    if (im == t.vocab.end())
      f.fail(where + " makes '" + a + b + "' that is not in the vocab");
    t.merges.emplace(pair_key(ia->second, ib->second), merge_info{static_cast<std::int32_t>(rank), im->second});
  }
}

void load_added_tokens(const json_file& f, const json::value& v, tokenizer::impl& t) {
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
    t.added.push_back(std::move(a));
  }
}

// Reads "name" or {"content": "name"} (tokenizer_config.json / special_tokens_map.json).
std::optional<std::string> token_name(const json_file& f, const json::object& o, std::string_view key) {
  const auto* v = f.field(o, key);
  if (v == nullptr)
    return std::nullopt;
  if (v->is_string())
    return std::string(v->get_string());
  if (v->is_object())
    return f.string(f.required(v->get_object(), "content", key), key);
  f.fail("'" + std::string(key) + "' must be a string or {\"content\": ...}");
}

std::optional<token_id> resolve(const json_file& f, const tokenizer::impl& t, const std::optional<std::string>& name,
                                std::string_view key) {
  if (!name)
    return std::nullopt;
  if (const auto it = t.added_ids.find(*name); it != t.added_ids.end())
    return it->second;
  if (const auto it = t.vocab.find(*name); it != t.vocab.end())
    return it->second;
  f.fail(std::string(key) + " '" + *name + "' is not in the vocab");
}

std::string read_text_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw model_error(path.string() + ": cannot be opened");
  std::ostringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

void load_configs(const fs::path& dir, tokenizer::impl& t) {
  std::error_code ec;
  bool add_bos = false, add_eos = false;
  std::optional<std::string> bos_name, eos_name;
  if (const auto path = dir / "tokenizer_config.json"; fs::is_regular_file(path, ec)) {
    const json_file f(path);
    const auto v = f.parse();
    const auto& o = f.object(v, "tokenizer_config.json");
    add_bos = f.flag(o, "add_bos_token", false);
    add_eos = f.flag(o, "add_eos_token", false);
    bos_name = token_name(f, o, "bos_token");
    eos_name = token_name(f, o, "eos_token");
    t.bos = resolve(f, t, bos_name, "bos_token");
    t.eos = resolve(f, t, eos_name, "eos_token");
    if (const auto* c = f.field(o, "chat_template")) {
      if (c->is_string()) {
        t.chat_template = std::string(c->get_string());
      } else if (c->is_array()) { // [{"name": ..., "template": ...}]: take "default"
        for (const auto& entry : c->get_array()) {
          const auto& e = f.object(entry, "chat_template entry");
          const auto* name = f.field(e, "name");
          if (t.chat_template.empty() || (name != nullptr && name->is_string() && name->get_string() == "default")) {
            t.chat_template = f.string(f.required(e, "template", "chat_template entry"), "template");
          }
        }
      } else {
        f.fail("chat_template must be a string or a list");
      }
    }
    if (!t.has_post_processor) {
      if (add_bos && !t.bos)
        f.fail("add_bos_token is true but there is no bos_token");
      if (add_eos && !t.eos)
        f.fail("add_eos_token is true but there is no eos_token");
      if (add_bos)
        t.prefix.push_back(*t.bos);
      if (add_eos)
        t.suffix.push_back(*t.eos);
    }
  }
  if (const auto path = dir / "special_tokens_map.json"; (!bos_name || !eos_name) && fs::is_regular_file(path, ec)) {
    const json_file f(path);
    const auto v = f.parse();
    const auto& o = f.object(v, "special_tokens_map.json");
    if (!bos_name)
      t.bos = resolve(f, t, token_name(f, o, "bos_token"), "bos_token");
    if (!eos_name)
      t.eos = resolve(f, t, token_name(f, o, "eos_token"), "eos_token");
  }
  if (const auto path = dir / "chat_template.jinja"; t.chat_template.empty() && fs::is_regular_file(path, ec)) {
    t.chat_template = read_text_file(path);
  }
  // Last resort: a template that wraps the text in one special token on each side.
  if (!t.bos && t.prefix.size() == 1)
    t.bos = t.prefix.front();
  if (!t.eos && t.suffix.size() == 1)
    t.eos = t.suffix.front();
}

} // namespace

tokenizer tokenizer::load(const std::filesystem::path& path) {
  std::error_code ec;
  fs::path file = path, dir = path.parent_path();
  if (fs::is_directory(path, ec)) {
    file = path / "tokenizer.json";
    dir = path;
    if (!fs::is_regular_file(file, ec))
      throw model_error(path.string() + ": no tokenizer.json in this folder");
  } else if (!fs::is_regular_file(path, ec)) {
    throw model_error(path.string() + ": no such file or folder");
  }
  if (dir.empty())
    dir = ".";

  auto t = std::make_shared<impl>();
  const json_file f(file);
  const auto root_value = f.parse();
  const auto& root = f.object(root_value, "the top level");
  load_model(f, f.required(root, "model", "the top level"), *t);
  if (const auto* v = f.field(root, "added_tokens"))
    load_added_tokens(f, *v, *t);
  if (const auto* v = f.field(root, "normalizer"))
    load_normalizer(f, *v, *t);
  if (const auto* v = f.field(root, "pre_tokenizer"))
    load_pre_tokenizer(f, *v, *t);
  if (const auto* v = f.field(root, "decoder")) {
    load_decoder(f, *v, *t);
  } else {
    t->decoders.emplace_back(decoder_step::kind::join_with_space); // Hugging Face's default
  }
  if (const auto* v = f.field(root, "post_processor")) {
    t->has_post_processor = true;
    load_post_processor(f, *v, *t);
  }

  // Id tables: added tokens take precedence over the model's strings, as in Hugging Face.
  token_id max_id = -1;
  for (const auto& [s, id] : t->vocab)
    max_id = std::max(max_id, id);
  for (const auto& a : t->added)
    max_id = std::max(max_id, a.id);
  t->id_strings.resize(static_cast<std::size_t>(max_id + 1));
  t->id_flags.assign(t->id_strings.size(), 0);
  for (const auto& [s, id] : t->vocab) {
    t->id_strings[id] = s;
    t->id_flags[id] = id_known;
  }
  for (std::size_t i = 0; i < t->added.size(); ++i) {
    auto& a = t->added[i];
    t->id_strings[a.id] = a.content;
    t->id_flags[a.id] = id_known | (a.special ? id_special : 0);
    t->added_ids[a.content] = a.id;
    a.pattern = a.content;
    if (a.normalized)
      t->normalize(a.pattern);
    (a.normalized ? t->normalized_matcher : t->raw_matcher).add(t->added, i);
  }
  for (const auto id : t->prefix) {
    if (id > max_id)
      f.fail("post_processor adds id " + std::to_string(id) + " that is not in the vocab");
  }
  for (const auto id : t->suffix) {
    if (id > max_id)
      f.fail("post_processor adds id " + std::to_string(id) + " that is not in the vocab");
  }
  load_configs(dir, *t);
  return tokenizer(std::move(t));
}

// ---------------------------------------------------------------------------------------
// Public queries
// ---------------------------------------------------------------------------------------

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
          t.bpe(to_byte_level(p), ids);
        } else {
          t.bpe(p, ids);
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
  if (const auto it = impl_->vocab.find(token); it != impl_->vocab.end())
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

// ---------------------------------------------------------------------------------------
// Streaming decode
//
// Hugging Face decoders map a list of token strings to a list of strings. Here each step
// passes items on as soon as they are final: before a Fuse/ByteLevel the items are whole
// tokens; after it ("joined") they are consecutive chunks of one string. A step holds
// back only what a later token could still change: a run of byte tokens (ByteFallback
// turns the whole run into U+FFFDs if it is not valid UTF-8), an incomplete UTF-8
// sequence (ByteLevel), a partial Replace match, or trailing characters Strip may cut.
// ---------------------------------------------------------------------------------------

decode_stream::decode_stream(const tokenizer& tok, bool skip_special_tokens)
    : impl_(tok.impl_), skip_special_(skip_special_tokens), states_(impl_->decoders.size()) {}

void decode_stream::push(token_id id, std::string& out) {
  if (finished_)
    throw std::logic_error("decode_stream: push() after finish()");
  const auto& t = *impl_;
  if (id < 0 || static_cast<std::size_t>(id) >= t.id_strings.size())
    return;
  const auto flags = t.id_flags[id];
  if (flags == 0 || (skip_special_ && (flags & id_special) != 0))
    return;
  feed(0, t.id_strings[id], out);
}

void decode_stream::finish(std::string& out) {
  if (finished_)
    return;
  finished_ = true;
  drain(0, out);
}

void decode_stream::flush_byte_run(std::size_t step, std::string& out) {
  auto& held = states_[step].held;
  if (held.empty())
    return;
  std::string run;
  run.swap(held);
  if (is_valid_utf8(run)) {
    feed(step + 1, run, out);
  } else {
    for (std::size_t i = 0; i < run.size(); ++i)
      feed(step + 1, replacement_char, out);
  }
}

void decode_stream::feed(std::size_t step, std::string_view item, std::string& out) {
  const auto& steps = impl_->decoders;
  if (step == steps.size()) {
    out.append(item);
    return;
  }
  const auto& s = steps[step];
  auto& st = states_[step];
  switch (s.what) {
    case decoder_step::kind::replace: {
      if (!s.joined_input) {
        feed(step + 1, replace_all(item, s.a, s.b), out);
        return;
      }
      st.held.append(item);
      std::string ready;
      std::size_t pos = 0;
      for (auto hit = st.held.find(s.a); hit != std::string::npos; hit = st.held.find(s.a, pos)) {
        ready.append(st.held, pos, hit - pos);
        ready.append(s.b);
        pos = hit + s.a.size();
      }
      // Keep the longest tail that could still grow into a match.
      std::size_t keep = std::min(s.a.size() - 1, st.held.size() - pos);
      while (keep > 0 && st.held.compare(st.held.size() - keep, keep, s.a, 0, keep) != 0)
        --keep;
      ready.append(st.held, pos, st.held.size() - pos - keep);
      st.held.erase(0, st.held.size() - keep);
      if (!ready.empty())
        feed(step + 1, ready, out);
      return;
    }
    case decoder_step::kind::byte_fallback:
      if (const auto b = parse_byte_token(item)) {
        st.held.push_back(static_cast<char>(*b));
        return;
      }
      flush_byte_run(step, out);
      feed(step + 1, item, out);
      return;
    case decoder_step::kind::fuse:
      feed(step + 1, item, out);
      return;
    case decoder_step::kind::strip: {
      const std::string_view c = s.a;
      if (!s.joined_input) { // per token, exactly as Hugging Face's Strip
        std::size_t begin = 0, end = item.size();
        for (std::size_t k = 0; k < s.start && item.substr(begin).starts_with(c); ++k)
          begin += c.size();
        for (std::size_t k = 0; k < s.stop && end - begin >= c.size() && item.substr(0, end).ends_with(c); ++k) {
          end -= c.size();
        }
        feed(step + 1, item.substr(begin, end - begin), out);
        return;
      }
      // Joined: cut up to `start` leading characters of the whole stream ...
      while (st.count < s.start && !item.empty()) {
        if (item.starts_with(c)) {
          item.remove_prefix(c.size());
          ++st.count;
        } else {
          st.count = s.start;
        }
      }
      if (s.stop == 0) {
        if (!item.empty())
          feed(step + 1, item, out);
        return;
      }
      // ... and hold back the trailing run of `c`, of which the last `stop` may be cut.
      std::size_t body = item.size();
      while (body >= c.size() && item.substr(0, body).ends_with(c))
        body -= c.size();
      std::string ready;
      if (body > 0) {
        ready = std::move(st.held);
        ready.append(item.substr(0, body));
        st.held = std::string(item.substr(body));
      } else {
        st.held.append(item);
      }
      const auto held_chars = st.held.size() / c.size();
      if (held_chars > s.stop) {
        const auto release = (held_chars - s.stop) * c.size();
        ready.append(st.held, 0, release);
        st.held.erase(0, release);
      }
      if (!ready.empty())
        feed(step + 1, ready, out);
      return;
    }
    case decoder_step::kind::metaspace: {
      const std::size_t index = s.joined_input ? 0 : st.count++;
      const bool drop = index == 0 && s.strip_first;
      feed(step + 1, replace_all(item, s.a, drop ? "" : " "), out);
      return;
    }
    case decoder_step::kind::byte_level: {
      append_byte_level_token(st.held, item);
      std::string ready;
      std::size_t i = 0;
      while (i < st.held.size()) {
        std::size_t len = 0;
        const auto status = check_utf8_char(st.held, i, len);
        if (status == utf8_status::incomplete)
          break; // may be completed by the next token
        if (status == utf8_status::valid) {
          ready.append(st.held, i, len);
        } else {
          ready.append(replacement_char);
        }
        i += len;
      }
      st.held.erase(0, i);
      if (!ready.empty())
        feed(step + 1, ready, out);
      return;
    }
    case decoder_step::kind::join_with_space:
      if (st.count++ > 0) {
        std::string joined(" ");
        joined.append(item);
        feed(step + 1, joined, out);
      } else {
        feed(step + 1, item, out);
      }
      return;
  }
}

void decode_stream::drain(std::size_t step, std::string& out) {
  const auto& steps = impl_->decoders;
  if (step == steps.size())
    return;
  auto& st = states_[step];
  switch (steps[step].what) {
    case decoder_step::kind::byte_fallback:
      flush_byte_run(step, out);
      break;
    case decoder_step::kind::byte_level:
      if (!st.held.empty()) { // the text ends inside a character
        st.held.clear();
        feed(step + 1, replacement_char, out);
      }
      break;
    case decoder_step::kind::replace:
      if (!st.held.empty()) {
        std::string rest;
        rest.swap(st.held);
        feed(step + 1, rest, out);
      }
      break;
    case decoder_step::kind::strip:
      st.held.clear(); // at most `stop` trailing characters: the ones Strip cuts
      break;
    default:
      break;
  }
  drain(step + 1, out);
}

} // namespace troupe::runtime
