// decode_stream: runs the decoder chain one token at a time, holding back only what a
// later token could still change.
#include "runtime/tokenizer.hpp"

#include "runtime/tokenizer/byte_level.hpp"
#include "runtime/tokenizer/tokenizer_impl.hpp"
#include "runtime/tokenizer/utf8.hpp"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <utility>

namespace troupe::runtime {

using namespace tokenizer_detail;

namespace {

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

} // namespace

// Hugging Face decoders map a list of token strings to a list of strings. Here each step
// passes items on as soon as they are final: before a Fuse/ByteLevel the items are whole
// tokens; after it ("joined") they are consecutive chunks of one string. A step holds
// back only what a later token could still change: a run of byte tokens (ByteFallback
// turns the whole run into U+FFFDs if it is not valid UTF-8), an incomplete UTF-8
// sequence (ByteLevel), a partial Replace match, or trailing characters Strip may cut.

std::optional<std::string> tokenizer::token_bytes(token_id id) const {
  const auto& t = *impl_;
  if (id < 0 || static_cast<std::size_t>(id) >= t.id_strings.size())
    return std::nullopt;
  const auto flags = t.id_flags[static_cast<std::size_t>(id)];
  if ((flags & id_known) == 0 || (flags & id_special) != 0)
    return std::nullopt;
  // The decoder chain on one token in the middle of a text: every step but those that only
  // act at the text's start (Strip of the joined text, Metaspace's first-token drop).
  std::string item = t.id_strings[static_cast<std::size_t>(id)];
  for (const auto& s : t.decoders) {
    switch (s.what) {
      case decoder_step::kind::replace:
        item = replace_all(item, s.a, s.b);
        break;
      case decoder_step::kind::byte_fallback:
        if (const auto b = parse_byte_token(item))
          item.assign(1, static_cast<char>(*b));
        break;
      case decoder_step::kind::fuse:
        break;
      case decoder_step::kind::strip:
        if (!s.joined_input) {
          std::string_view v = item;
          for (std::size_t k = 0; k < s.start && v.starts_with(s.a); ++k)
            v.remove_prefix(s.a.size());
          for (std::size_t k = 0; k < s.stop && v.ends_with(s.a); ++k)
            v.remove_suffix(s.a.size());
          item = std::string(v);
        }
        break;
      case decoder_step::kind::metaspace:
        item = replace_all(item, s.a, " ");
        break;
      case decoder_step::kind::byte_level: {
        std::string raw;
        append_byte_level_token(raw, item);
        item = std::move(raw);
        break;
      }
      case decoder_step::kind::join_with_space:
        item.insert(0, " ");
        break;
    }
  }
  return item;
}

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
