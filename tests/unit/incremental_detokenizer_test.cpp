// Tests for runtime/incremental_detokenizer: streamed text must equal the full decode
// (vLLM semantics) on many random id sequences, with only whole UTF-8 characters per push.
#include "runtime/incremental_detokenizer.hpp"
#include "tests/support/data_root.hpp"
#include "tests/support/utf8.hpp"

#include <doctest/doctest.h>

#include <boost/json.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

namespace {

namespace fs = std::filesystem;
using troupe::runtime::decode_stream;
using troupe::runtime::incremental_detokenizer;
using troupe::runtime::token_id;
using troupe::runtime::tokenizer;

using troupe::testing::data_root;

const tokenizer& stories() {
  static const tokenizer t = tokenizer::load(data_root() / "models/stories260k");
  return t;
}
const tokenizer& gpt2() {
  static const tokenizer t = tokenizer::load(data_root() / "tests/data/gpt2");
  return t;
}

using troupe::testing::valid_utf8;

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

struct stream_result {
  std::string text;
  bool all_valid = true;
};

stream_result run(const tokenizer& tok, const std::vector<token_id>& prompt, const std::vector<token_id>& output,
                  bool skip_special) {
  incremental_detokenizer detok(tok, prompt, skip_special);
  stream_result r;
  for (const auto id : output) {
    const auto piece = detok.push(id);
    r.all_valid = r.all_valid && valid_utf8(piece);
    r.text += piece;
  }
  const auto rest = detok.flush();
  r.all_valid = r.all_valid && valid_utf8(rest);
  r.text += rest;
  return r;
}

// Ids that exercise the hard cases: bytes of multi-byte characters (whole and cut), the
// tokenizer's own encodings of multilingual text, special tokens and random ids.
std::vector<token_id> interesting_ids(const tokenizer& tok) {
  std::vector<token_id> ids;
  for (const char* text : {"日本語のテキスト", "emoji 😀🎉👍 and 🦙", "naïve résumé €100", "Привет мир",
                           "Once upon a time, there was a little girl.", "  two  spaces\n\nnew line", "👨\u200d👩\u200d👧",
                           "\u2581literal"}) {
    for (const auto id : tok.encode(text, false))
      ids.push_back(id);
  }
  for (const char* t : {"<0xE2>", "<0x82>", "<0xAC>", "<0xF0>", "<0x9F>", "<0x98>", "<0x80>", "<0xC3>", "<0xA9>",
                        "<0xFF>", "<0xE4>", "<0xB8>", "<0xAD>", "<0x0A>", "<0x20>"}) {
    if (const auto id = tok.token_to_id(t))
      ids.push_back(*id);
  }
  for (token_id id = 0; id < 3; ++id)
    ids.push_back(id);
  if (const auto id = tok.token_to_id("<|endoftext|>"))
    ids.push_back(*id);
  return ids;
}

// A straight list-to-list implementation of the Hugging Face decoders, written independently
// of the streaming one, to check decode() against.
using token_list = std::vector<std::string>;

std::string replace_all(const std::string& s, const std::string& from, const std::string& to) {
  std::string out;
  std::size_t pos = 0;
  for (auto hit = s.find(from); hit != std::string::npos; hit = s.find(from, pos)) {
    out += s.substr(pos, hit - pos) + to;
    pos = hit + from.size();
  }
  return out + s.substr(pos);
}

token_list ref_replace(const token_list& in, const std::string& from, const std::string& to) {
  token_list out;
  for (const auto& t : in)
    out.push_back(replace_all(t, from, to));
  return out;
}

token_list ref_byte_fallback(const token_list& in) {
  token_list out;
  std::string run;
  auto flush = [&] {
    if (run.empty())
      return;
    if (valid_utf8(run)) {
      out.push_back(run);
    } else {
      for (std::size_t i = 0; i < run.size(); ++i)
        out.push_back("\uFFFD");
    }
    run.clear();
  };
  for (const auto& t : in) {
    if (t.size() == 6 && t.starts_with("<0x") && t.back() == '>') {
      run.push_back(static_cast<char>(std::stoi(t.substr(3, 2), nullptr, 16)));
      continue;
    }
    flush();
    out.push_back(t);
  }
  flush();
  return out;
}

token_list ref_fuse(const token_list& in) {
  std::string all;
  for (const auto& t : in)
    all += t;
  return {all};
}

std::vector<std::string> chars_of(const std::string& s) {
  std::vector<std::string> chars;
  for (std::size_t i = 0; i < s.size(); i += char_len(s, i))
    chars.push_back(s.substr(i, char_len(s, i)));
  return chars;
}

token_list ref_strip(const token_list& in, const std::string& c, std::size_t start, std::size_t stop) {
  token_list out;
  for (const auto& t : in) {
    const auto chars = chars_of(t);
    std::size_t begin = 0, end = chars.size();
    while (begin < start && begin < chars.size() && chars[begin] == c)
      ++begin;
    for (std::size_t k = 0; k < stop && end > begin && chars[end - 1] == c; ++k)
      --end;
    std::string kept;
    for (std::size_t i = begin; i < end; ++i)
      kept += chars[i];
    out.push_back(kept);
  }
  return out;
}

token_list ref_metaspace(const token_list& in, const std::string& rep, bool strip_first) {
  token_list out;
  for (std::size_t i = 0; i < in.size(); ++i)
    out.push_back(replace_all(in[i], rep, i == 0 && strip_first ? "" : " "));
  return out;
}

std::string ref_join(const token_list& in, const std::string& sep) {
  std::string all;
  for (std::size_t i = 0; i < in.size(); ++i)
    all += (i > 0 ? sep : "") + in[i];
  return all;
}

struct decoder_variant {
  const char* name;
  const char* decoder_json; // "null" for none
  std::string (*reference)(const token_list&);
};

const decoder_variant decoder_variants[] = {
    {"fuse, then a joined multi-character Replace, Strip with stop, Metaspace",
     R"({"type": "Sequence", "decoders": [{"type": "ByteFallback"}, {"type": "Fuse"},
         {"type": "Replace", "pattern": {"String": "▁▁"}, "content": " _ "},
         {"type": "Strip", "content": " ", "start": 2, "stop": 2},
         {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": true}]})",
     [](const token_list& t) {
       return ref_join(
           ref_metaspace(ref_strip(ref_replace(ref_fuse(ref_byte_fallback(t)), "▁▁", " _ "), " ", 2, 2), "▁", true),
           "");
     }},
    {"per-token Metaspace, Strip and Replace",
     R"({"type": "Sequence", "decoders": [{"type": "ByteFallback"},
         {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "first", "split": true},
         {"type": "Strip", "content": " ", "start": 1, "stop": 1},
         {"type": "Replace", "pattern": {"String": "e"}, "content": "EE"}]})",
     [](const token_list& t) {
       return ref_join(ref_replace(ref_strip(ref_metaspace(ref_byte_fallback(t), "▁", true), " ", 1, 1), "e", "EE"),
                       "");
     }},
    {"Metaspace that never strips, then Fuse and a trailing Strip",
     R"({"type": "Sequence", "decoders": [
         {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "never", "split": true},
         {"type": "ByteFallback"}, {"type": "Fuse"}, {"type": "Strip", "content": "▁", "start": 0, "stop": 3}]})",
     [](const token_list& t) {
       return ref_join(ref_strip(ref_fuse(ref_byte_fallback(ref_metaspace(t, "▁", false))), "▁", 0, 3), "");
     }},
    {"no decoder", "null", [](const token_list& t) { return ref_join(t, " "); }},
};

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// stories260k's tokenizer.json with another decoder, loaded from a temp folder.
tokenizer stories_with_decoder(const char* decoder_json) {
  static std::atomic<int> counter{0};
  const auto dir =
      fs::temp_directory_path() / ("troupe_detok_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
  fs::create_directories(dir);
  auto root = boost::json::parse(read_file(data_root() / "models/stories260k/tokenizer.json")).as_object();
  root["decoder"] = boost::json::parse(decoder_json);
  std::ofstream(dir / "tokenizer.json") << boost::json::serialize(root);
  auto tok = tokenizer::load(dir / "tokenizer.json");
  fs::remove_all(dir);
  return tok;
}

void check_contract_on_random_sequences(const tokenizer& tok, unsigned seed, int rounds,
                                        std::string (*reference)(const token_list&) = nullptr) {
  std::mt19937 rng(seed);
  const auto special_ids = interesting_ids(tok);
  const auto vocab = static_cast<token_id>(tok.vocab_size());
  auto random_ids = [&](std::size_t n) {
    std::vector<token_id> ids;
    for (std::size_t i = 0; i < n; ++i) {
      const auto kind = rng() % 4;
      if (kind == 0) {
        ids.push_back(static_cast<token_id>(rng() % static_cast<unsigned>(vocab)));
      } else {
        ids.push_back(special_ids[rng() % special_ids.size()]);
      }
    }
    return ids;
  };
  int prefix_cases = 0, tail_cases = 0;
  for (int round = 0; round < rounds; ++round) {
    const auto prompt = random_ids(rng() % 8);
    const auto output = random_ids(rng() % 24);
    const bool skip = rng() % 3 != 0;
    std::vector<token_id> all = prompt;
    all.insert(all.end(), output.begin(), output.end());
    const auto full = tok.decode(all, skip);
    const auto prompt_text = tok.decode(prompt, skip);
    const auto streamed = run(tok, prompt, output, skip);
    INFO("round ", round, " skip ", skip);
    CHECK(streamed.all_valid);
    if (reference != nullptr) {
      token_list tokens;
      for (const auto id : all) {
        if (id >= 0 && static_cast<std::size_t>(id) < tok.vocab_size() && !(skip && tok.is_special(id)))
          tokens.push_back(tok.id_to_token(id));
      }
      CHECK(full == reference(tokens));
    }
    if (full.starts_with(prompt_text)) {
      // The contract as stated: decode(prompt ++ output) minus decode(prompt).
      ++prefix_cases;
      CHECK(streamed.text == full.substr(prompt_text.size()));
    } else {
      // The prompt ended inside something the output completed (e.g. a cut character):
      // the output starts where the two texts first differ.
      ++tail_cases;
      CHECK(streamed.text == full.substr(common_prefix(prompt_text, full)));
    }
  }
  MESSAGE(prefix_cases, " sequences with decode(prompt) a prefix, ", tail_cases, " without");
  CHECK(prefix_cases > rounds / 2);
}

} // namespace

TEST_CASE("incremental detokenizer: stories260k examples") {
  const auto& tok = stories();
  const std::vector<token_id> bos{1};
  incremental_detokenizer d(tok, bos);
  CHECK(d.push(403) == "Once"); // the leading space of the first word is stripped
  CHECK(d.push(407) == " upon");
  CHECK(d.push(*tok.token_to_id("<0xE4>")).empty()); // a run of byte tokens is held ...
  CHECK(d.push(*tok.token_to_id("<0xB8>")).empty());
  CHECK(d.push(*tok.token_to_id("<0xAD>")).empty()); // ... until it ends (it could still turn invalid)
  CHECK(d.push(261) == "中 a");
  CHECK(d.push(2).empty()); // special, skipped
  CHECK(d.flush().empty());

  // The prompt's text is not repeated, and the leading-space strip only applies at the start.
  const std::vector<token_id> prompt{1, 403, 407};
  incremental_detokenizer mid(tok, prompt);
  CHECK(mid.push(261) == " a");
  CHECK(mid.push(378) == " time");
  CHECK(mid.flush().empty());

  // A prompt that ends inside a byte-fallback character.
  const std::vector<token_id> cut{1, 403, *tok.token_to_id("<0xE4>")};
  incremental_detokenizer cut_detok(tok, cut);
  std::string text = cut_detok.push(*tok.token_to_id("<0xB8>"));
  text += cut_detok.push(*tok.token_to_id("<0xAD>"));
  text += cut_detok.flush();
  CHECK(text == "中");
}

TEST_CASE("incremental detokenizer: gpt2 examples") {
  const auto& tok = gpt2();
  const auto ids = tok.encode("Hi 😀 there", false);
  incremental_detokenizer d(tok, std::vector<token_id>{});
  std::vector<std::string> pieces;
  for (const auto id : ids)
    pieces.push_back(d.push(id));
  pieces.push_back(d.flush());
  std::string joined;
  for (const auto& p : pieces) {
    CHECK(valid_utf8(p));
    joined += p;
  }
  CHECK(joined == "Hi 😀 there");
  // 😀 is split over two tokens: the first gives nothing, the second the whole character.
  incremental_detokenizer e(tok, std::vector<token_id>{});
  CHECK(e.push(47249).empty());
  CHECK(e.push(222) == "😀");
  CHECK(e.push(47249).empty());
  CHECK(e.flush() == "\uFFFD"); // the stream ended inside a character
}

TEST_CASE("incremental detokenizer: contract on random sequences, stories260k") {
  check_contract_on_random_sequences(stories(), 1234, 3000);
}

TEST_CASE("incremental detokenizer: contract on random sequences, gpt2") {
  check_contract_on_random_sequences(gpt2(), 5678, 3000);
}

TEST_CASE("incremental detokenizer: other decoder chains, against a direct implementation") {
  unsigned seed = 100;
  for (const auto& variant : decoder_variants) {
    INFO(std::string(variant.name));
    const auto tok = stories_with_decoder(variant.decoder_json);
    check_contract_on_random_sequences(tok, seed++, 1500, variant.reference);
  }
}

TEST_CASE("decode_stream: push + finish equals decode, also when copied midway") {
  const auto& tok = stories();
  std::mt19937 rng(42);
  for (int round = 0; round < 500; ++round) {
    std::vector<token_id> ids;
    const auto n = rng() % 30;
    for (unsigned i = 0; i < n; ++i)
      ids.push_back(static_cast<token_id>(rng() % 512));
    decode_stream s(tok, true);
    std::string out;
    for (std::size_t i = 0; i < ids.size(); ++i) {
      s.push(ids[i], out);
      auto copy = s; // "what if the stream ended here"
      std::string partial = out;
      copy.finish(partial);
      CHECK(partial == tok.decode(std::span(ids).first(i + 1)));
    }
    s.finish(out);
    CHECK(out == tok.decode(ids));
    CHECK_THROWS_AS(s.push(3, out), std::logic_error);
  }
}

TEST_CASE("incremental detokenizer: a long generation streams in linear time") {
  for (const auto* tok : {&stories(), &gpt2()}) {
    std::string text;
    while (text.size() < 60000)
      text += "Once upon a time, there was a little girl named Lily 😀. 日本語! ";
    const auto ids = tok->encode(text, false);
    const auto start = std::chrono::steady_clock::now();
    incremental_detokenizer d(*tok, std::vector<token_id>{});
    std::string streamed;
    for (const auto id : ids)
      streamed += d.push(id);
    streamed += d.flush();
    const auto seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    MESSAGE("streamed ", ids.size(), " ids in ", seconds, " s");
    CHECK(streamed == tok->decode(ids));
  }
}
