// Tests for runtime/tokenizer: golden encodings of the bundled stories260k and GPT-2
// tokenizers, the other supported tokenizer.json layouts, and load errors.
#include "runtime/tokenizer.hpp"

#include "runtime/errors.hpp"

#include <doctest/doctest.h>

#include "tests/support/data_root.hpp"
#include "tests/support/temp_dir.hpp"

#include <boost/json.hpp>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

namespace {

using troupe::testing::temp_dir;

namespace fs = std::filesystem;
namespace json = boost::json;
using troupe::runtime::model_error;
using troupe::runtime::token_id;
using troupe::runtime::tokenizer;

using troupe::testing::stories_dir;
fs::path gpt2_dir() {
  return troupe::testing::data_root() / "tests/data/gpt2";
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  REQUIRE(in);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

json::value read_json(const fs::path& p) {
  return json::parse(read_file(p));
}

std::vector<token_id> ids_of(const json::value& v) {
  std::vector<token_id> ids;
  for (const auto& x : v.as_array())
    ids.push_back(static_cast<token_id>(x.to_number<std::int64_t>()));
  return ids;
}

const tokenizer& stories() {
  static const tokenizer t = tokenizer::load(stories_dir());
  return t;
}
const tokenizer& gpt2() {
  static const tokenizer t = tokenizer::load(gpt2_dir());
  return t;
}

// Loads a tokenizer.json that is the stories260k one with some top-level fields replaced.
tokenizer stories_variant(const temp_dir& dir, const json::object& changes) {
  auto root = read_json(stories_dir() / "tokenizer.json").as_object();
  for (const auto& [k, v] : changes)
    root[k] = v;
  return tokenizer::load(dir.write("tokenizer.json", json::serialize(root)));
}

tokenizer gpt2_variant(const temp_dir& dir, const json::object& changes) {
  auto root = read_json(gpt2_dir() / "tokenizer.json").as_object();
  for (const auto& [k, v] : changes)
    root[k] = v;
  return tokenizer::load(dir.write("tokenizer.json", json::serialize(root)));
}

std::string load_error(const std::string& tokenizer_json) {
  temp_dir dir{"troupe_tok"};
  dir.write("tokenizer.json", tokenizer_json);
  try {
    (void)tokenizer::load(dir.path);
  } catch (const model_error& e) {
    return e.what();
  }
  return "(no error)";
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

} // namespace

TEST_CASE("stories260k: golden encodings from llama2.c run.c") {
  const auto golden = read_json(stories_dir() / "golden_tokenizer.json");
  const auto& tok = stories();
  // meta says "59/60": all cases agree except one, which the README identifies as the
  // string holding a literal U+2581 (run.c byte-falls it back; tokenizer.json reads it as
  // a space).
  const std::string agreement(golden.at("meta").at("agreement_with_tokenizer_json").as_string());
  const auto slash = agreement.find('/');
  const auto expected_agree = std::stoul(agreement.substr(0, slash));
  const auto expected_total = std::stoul(agreement.substr(slash + 1));

  std::size_t total = 0, agree = 0, exceptions = 0;
  for (const auto& c : golden.at("cases").as_array()) {
    const std::string text(c.at("text").as_string());
    const auto ids = ids_of(c.at("ids"));
    const auto got = tok.encode(text, false);
    const bool ok = got == ids && tok.decode(got) == text;
    ++total;
    if (ok)
      ++agree;
    if (text.find("\u2581") != std::string::npos) {
      ++exceptions;
      CHECK_FALSE(ok);
      // What tokenizer.json does with it: the literal ▁ is read as a space.
      CHECK(tok.decode(got) == " already has metaspace");
      CHECK(tok.decode(ids) == text); // run.c's byte-fallback ids still decode exactly
    } else {
      INFO("text: ", text);
      CHECK(got == ids);
      CHECK(tok.decode(ids) == text);
    }
  }
  CHECK(total == expected_total);
  CHECK(agree == expected_agree);
  CHECK(exceptions == expected_total - expected_agree);
}

TEST_CASE("stories260k: golden greedy prompts and texts") {
  const auto golden = read_json(stories_dir() / "golden_greedy.json");
  const auto& tok = stories();
  std::size_t n = 0;
  for (const auto& c : golden.at("cases").as_array()) {
    const std::string prompt(c.at("prompt").as_string());
    auto ids = ids_of(c.at("prompt_ids"));
    CHECK(tok.encode(prompt) == ids);
    CHECK(ids.front() == 1);
    const auto generated = ids_of(c.at("generated_ids"));
    ids.insert(ids.end(), generated.begin(), generated.end());
    CHECK(tok.decode(ids) == std::string(c.at("full_text").as_string()));
    ++n;
  }
  CHECK(n == 5);
}

TEST_CASE("stories260k: queries") {
  const auto& tok = stories();
  CHECK(tok.vocab_size() == 512);
  CHECK(tok.bos_id() == 1);
  CHECK(tok.eos_id() == 2);
  CHECK(tok.token_to_id("<s>") == 1);
  CHECK(tok.token_to_id("▁") == 410);
  CHECK_FALSE(tok.token_to_id("no such token").has_value());
  CHECK(tok.id_to_token(403) == "▁Once");
  CHECK(tok.id_to_token(0) == "<unk>");
  CHECK_THROWS_AS((void)tok.id_to_token(512), std::out_of_range);
  CHECK_THROWS_AS((void)tok.id_to_token(-1), std::out_of_range);
  CHECK(tok.is_special(1));
  CHECK(tok.is_special(2));
  CHECK_FALSE(tok.is_special(403));
  CHECK_FALSE(tok.is_special(100000));
  CHECK(tok.chat_template().empty());

  // The file path works as well as the folder, and still finds tokenizer_config.json.
  const auto by_file = tokenizer::load(stories_dir() / "tokenizer.json");
  CHECK(by_file.encode("Once upon a time") == std::vector<token_id>{1, 403, 407, 261, 378});
  CHECK(by_file.bos_id() == 1);
}

TEST_CASE("stories260k: special tokens in text, decode options") {
  const auto& tok = stories();
  // Added tokens are split out of the text (HF behaviour); each side is normalized alone.
  CHECK(tok.encode("<s>Once</s>", false) == std::vector<token_id>{1, 403, 2});
  CHECK(tok.encode("", true) == std::vector<token_id>{1});
  CHECK(tok.encode("", false).empty());
  const std::vector<token_id> ids{1, 403, 407, 2};
  CHECK(tok.decode(ids) == "Once upon");
  CHECK(tok.decode(ids, false) == "<s> Once upon</s>");
  // Unknown ids are dropped, as Hugging Face does.
  CHECK(tok.decode(std::vector<token_id>{403, 99999, -5, 407}) == "Once upon");
  // Byte fallback: a run of byte tokens that is not valid UTF-8 gives one U+FFFD per byte.
  const auto e2 = *tok.token_to_id("<0xE2>");
  const auto x82 = *tok.token_to_id("<0x82>");
  const auto xac = *tok.token_to_id("<0xAC>");
  CHECK(tok.decode(std::vector<token_id>{e2, x82, xac}) == "€");
  CHECK(tok.decode(std::vector<token_id>{e2, x82, 403}) == "\uFFFD\uFFFD Once");
  CHECK(tok.encode("中", false) ==
        std::vector<token_id>{410, *tok.token_to_id("<0xE4>"), *tok.token_to_id("<0xB8>"), *tok.token_to_id("<0xAD>")});
  // Invalid UTF-8 input is read as U+FFFD.
  CHECK(tok.encode("a\xFFz", false) == tok.encode("a\uFFFDz", false));
}

TEST_CASE("stories260k: a 20k-character prompt") {
  const auto& tok = stories();
  const auto golden = read_json(stories_dir() / "golden_greedy.json");
  std::string text;
  while (text.size() < 20000) {
    for (const auto& c : golden.at("cases").as_array()) {
      text += std::string(c.at("full_text").as_string());
      text += ' ';
    }
  }
  text.resize(20000);
  const auto start = std::chrono::steady_clock::now();
  const auto ids = tok.encode(text);
  const auto seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  MESSAGE("encoded 20000 characters into ", ids.size(), " ids in ", seconds, " s");
  CHECK(ids.size() > 3000);
  CHECK(tok.decode(ids) == text);
}

TEST_CASE("gpt2: golden encodings and pre-tokens") {
  const auto golden = read_json(gpt2_dir() / "golden_encodings.json");
  const auto& tok = gpt2();
  std::size_t n = 0;
  for (const auto& c : golden.at("cases").as_array()) {
    const std::string text(c.at("text").as_string());
    INFO("case ", n, ": ", text);
    const auto ids = ids_of(c.at("ids"));
    CHECK(tok.encode(text, false) == ids);
    CHECK(tok.encode(text, true) == ids); // the ByteLevel post-processor adds nothing
    CHECK(tok.decode(ids) == text);
    std::vector<std::string> pretokens;
    for (const auto& p : c.at("pretokens").as_array())
      pretokens.emplace_back(p.as_string());
    CHECK(tok.pre_tokenize(text) == pretokens);
    ++n;
  }
  CHECK(n == 230);
}

TEST_CASE("gpt2: queries and added tokens") {
  const auto& tok = gpt2();
  CHECK(tok.vocab_size() == 50257);
  CHECK(tok.token_to_id("<|endoftext|>") == 50256);
  CHECK(tok.is_special(50256));
  CHECK_FALSE(tok.bos_id().has_value()); // no tokenizer_config.json, no template
  CHECK(tok.id_to_token(220) == "Ġ");
  CHECK(tok.encode("Hello<|endoftext|> world", false) == std::vector<token_id>{15496, 50256, 995});
  CHECK(tok.decode(std::vector<token_id>{15496, 50256, 995}) == "Hello world");
  CHECK(tok.decode(std::vector<token_id>{15496, 50256, 995}, false) == "Hello<|endoftext|> world");
  // A character split across tokens: an incomplete sequence decodes to one U+FFFD.
  CHECK(tok.decode(std::vector<token_id>{47249}) == "\uFFFD"); // first bytes of 😀
  CHECK(tok.decode(std::vector<token_id>{47249, 222}) == "😀");
}

TEST_CASE("byte-level: Sequence[Split(regex), ByteLevel(use_regex false)] as Llama-3/Qwen2 lay it out") {
  temp_dir dir{"troupe_tok"};
  // The GPT-2 pattern given explicitly must reproduce the ByteLevel(use_regex) golden.
  const json::object changes{
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         json::array{
             {{"type", "Split"},
              {"pattern", {{"Regex", R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)"}}},
              {"behavior", "Isolated"},
              {"invert", false}},
             {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}}}}}}};
  const auto tok = gpt2_variant(dir, changes);
  const auto golden = read_json(gpt2_dir() / "golden_encodings.json");
  for (const auto& c : golden.at("cases").as_array()) {
    const std::string text(c.at("text").as_string());
    INFO(text);
    CHECK(tok.encode(text, false) == ids_of(c.at("ids")));
  }

  // Llama-3's pattern: case-insensitive contractions and digits in groups of three.
  temp_dir dir3{"troupe_tok"};
  const json::object llama3{
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         json::array{
             {{"type", "Split"},
              {"pattern",
               {{"Regex",
                 R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"}}},
              {"behavior", "Isolated"},
              {"invert", false}},
             {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}}}}}}};
  const auto l3 = gpt2_variant(dir3, llama3);
  CHECK(l3.pre_tokenize("I'M 1234567 ok\n\n") ==
        std::vector<std::string>{"I", "'M", " ", "123", "456", "7", " ok", "\n\n"});
  const std::string text = "Numbers 1234567 and DON'T\n\n  end";
  CHECK(l3.decode(l3.encode(text)) == text);
}

TEST_CASE("byte-level: Digits pre-tokenizer") {
  temp_dir dir{"troupe_tok"};
  const json::object changes{
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers", json::array{{{"type", "Digits"}, {"individual_digits", true}},
                                      {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}}}}}};
  const auto tok = gpt2_variant(dir, changes);
  CHECK(tok.pre_tokenize("ab 123") == std::vector<std::string>{"ab", " ", "1", "2", "3"});
  temp_dir dir2{"troupe_tok"};
  const json::object grouped{{"pre_tokenizer", {{"type", "Digits"}, {"individual_digits", false}}}};
  const auto tok2 = gpt2_variant(dir2, grouped);
  CHECK(tok2.pre_tokenize("ab 123x4") == std::vector<std::string>{"ab ", "123", "x", "4"});
}

TEST_CASE("SentencePiece: the newer Metaspace pre-tokenizer layout") {
  const auto golden = read_json(stories_dir() / "golden_tokenizer.json");
  for (const std::string scheme : {"first", "always"}) {
    for (const bool split : {true, false}) {
      CAPTURE(scheme);
      CAPTURE(split);
      temp_dir dir{"troupe_tok"};
      const json::object changes{
          {"normalizer", nullptr},
          {"pre_tokenizer",
           {{"type", "Metaspace"}, {"replacement", "▁"}, {"prepend_scheme", scheme.c_str()}, {"split", split}}}};
      const auto tok = stories_variant(dir, changes);
      for (const auto& c : golden.at("cases").as_array()) {
        const std::string text(c.at("text").as_string());
        // Known layout differences: a literal ▁, and leading spaces (Prepend adds a ▁ in
        // front of them, Metaspace does not when the text already starts with one).
        if (text.find("\u2581") != std::string::npos || text.starts_with(' '))
          continue;
        INFO(text);
        CHECK(tok.encode(text, false) == ids_of(c.at("ids")));
      }
      // "first" prepends only to text at the start of the input; "always" after added tokens too.
      const auto once = *tok.token_to_id("▁Once");
      const auto with_bos = tok.encode("<s>Once", false);
      REQUIRE(with_bos.size() >= 2);
      CHECK(with_bos[0] == 1);
      CHECK((with_bos[1] == once) == (scheme == "always"));
    }
  }
  temp_dir dir{"troupe_tok"};
  const json::object never{
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "Metaspace"}, {"replacement", "▁"}, {"prepend_scheme", "never"}}},
      {"decoder", {{"type", "Metaspace"}, {"replacement", "▁"}, {"prepend_scheme", "always"}}}};
  const auto tok = stories_variant(dir, never);
  CHECK(tok.pre_tokenize("Once upon") == std::vector<std::string>{"Once", "▁upon"});
  // The Metaspace decoder drops the replacement in the first token only.
  CHECK(tok.decode(stories().encode("Once upon a time", false)) == "Once upon a time");
  CHECK(tok.decode(std::vector<token_id>{403, 410, 407}) == "Once  upon");
}

TEST_CASE("merges as [a, b] pairs, TemplateProcessing with a suffix, added-token options") {
  temp_dir dir{"troupe_tok"};
  const std::string tokenizer_json = R"({
    "version": "1.0",
    "added_tokens": [
      {"id": 0, "content": "<unk>", "special": true, "normalized": false},
      {"id": 1, "content": "<s>", "special": true, "normalized": false},
      {"id": 2, "content": "</s>", "special": true, "normalized": false},
      {"id": 9, "content": "<L>", "special": true, "normalized": false, "lstrip": true, "rstrip": true},
      {"id": 10, "content": "wor", "special": false, "normalized": true, "single_word": true}
    ],
    "normalizer": null,
    "pre_tokenizer": {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": true},
    "post_processor": {"type": "TemplateProcessing",
      "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                 {"SpecialToken": {"id": "</s>", "type_id": 0}}],
      "pair": [],
      "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]},
                         "</s>": {"id": "</s>", "ids": [2], "tokens": ["</s>"]}}},
    "decoder": {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": true},
    "model": {"type": "BPE", "unk_token": "<unk>", "fuse_unk": true, "byte_fallback": false,
      "vocab": {"<unk>": 0, "<s>": 1, "</s>": 2, "▁": 3, "a": 4, "b": 5, "▁a": 6, "▁ab": 7, "ab": 8},
      "merges": [["▁", "a"], ["▁a", "b"], ["a", "b"]]}
  })";
  const auto tok = tokenizer::load(dir.write("tokenizer.json", tokenizer_json));
  CHECK(tok.vocab_size() == 11);
  CHECK(tok.encode("ab ab") == std::vector<token_id>{1, 7, 7, 2});
  CHECK(tok.encode("ab ab", false) == std::vector<token_id>{7, 7});
  CHECK(tok.bos_id() == 1); // from the template, there is no tokenizer_config.json
  CHECK(tok.eos_id() == 2);
  // Unknown characters fuse into one <unk>.
  CHECK(tok.encode("axyb", false) == std::vector<token_id>{6, 0, 5});
  // lstrip / rstrip swallow the spaces around <L>.
  CHECK(tok.encode("ab  <L>  ab", false) == std::vector<token_id>{7, 9, 7});
  // single_word: "wor" only matches as a whole word.
  CHECK(tok.pre_tokenize("a wor b") == std::vector<std::string>{"▁a", "▁", "wor", "▁b"});
  CHECK(tok.pre_tokenize("a worb") == std::vector<std::string>{"▁a", "▁worb"});
  CHECK(tok.decode(std::vector<token_id>{7, 7}) == "ab ab");
}

TEST_CASE("tokenizer_config.json: add_bos_token without a post-processor, chat_template") {
  temp_dir dir{"troupe_tok"};
  auto root = read_json(stories_dir() / "tokenizer.json").as_object();
  root["post_processor"] = nullptr;
  dir.write("tokenizer.json", json::serialize(root));
  dir.write("tokenizer_config.json",
            R"({"add_bos_token": true, "add_eos_token": true, "bos_token": {"content": "<s>"},
                "eos_token": "</s>", "chat_template": "{{ messages }}"})");
  const auto tok = tokenizer::load(dir.path);
  CHECK(tok.encode("Once") == std::vector<token_id>{1, 403, 2});
  CHECK(tok.chat_template() == "{{ messages }}");
  dir.write("tokenizer_config.json", R"({"add_bos_token": false, "eos_token": "</s>"})");
  const auto plain = tokenizer::load(dir.path);
  CHECK(plain.encode("Once") == std::vector<token_id>{403});
  CHECK_FALSE(plain.bos_id().has_value()); // no bos_token, no special_tokens_map.json, no template
  CHECK(plain.eos_id() == 2);
}

TEST_CASE("a decoder-less tokenizer joins tokens with spaces") {
  temp_dir dir{"troupe_tok"};
  const json::object changes{{"decoder", nullptr}};
  const auto tok = stories_variant(dir, changes);
  CHECK(tok.decode(std::vector<token_id>{403, 407}) == "▁Once ▁upon");
}

TEST_CASE("bad tokenizer.json files give model_error naming the problem") {
  CHECK(contains(load_error("{ not json"), "invalid JSON"));
  CHECK(contains(load_error("{ not json"), "tokenizer.json"));
  CHECK(contains(load_error(R"({"version": "1.0"})"), "missing 'model'"));
  CHECK(contains(load_error(R"({"model": {"type": "Unigram", "vocab": []}})"),
                 "model.type 'Unigram' is not supported (BPE only)"));
  CHECK(contains(load_error(R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a c"]}})"),
                 "model.merges[0] names token 'c' that is not in the vocab"));
  CHECK(contains(load_error(R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": ["a b"]}})"),
                 "makes 'ab' that is not in the vocab"));
  CHECK(contains(load_error(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []},
                               "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "(unclosed"},
                                                 "behavior": "Isolated", "invert": false}})"),
                 "invalid regex '(unclosed'"));
  CHECK(contains(load_error(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []},
                               "pre_tokenizer": {"type": "Split", "pattern": {"String": " "},
                                                 "behavior": "Removed", "invert": false}})"),
                 "behavior 'Removed' is not supported"));
  CHECK(contains(load_error(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []},
                               "normalizer": {"type": "NFKC"}})"),
                 "normalizer type 'NFKC' is not supported"));
  CHECK(contains(load_error(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []},
                               "decoder": {"type": "WordPiece", "prefix": "##"}})"),
                 "decoder type 'WordPiece' is not supported"));
  CHECK(contains(load_error(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [], "unk_token": "<unk>"}})"),
                 "unk_token '<unk>' is not in the vocab"));

  temp_dir empty{"troupe_tok"};
  try {
    (void)tokenizer::load(empty.path);
    FAIL("expected model_error");
  } catch (const model_error& e) {
    CHECK(contains(e.what(), "no tokenizer.json"));
  }
  CHECK_THROWS_AS((void)tokenizer::load(empty.path / "missing.json"), model_error);

  // A broken tokenizer_config.json is named as such.
  temp_dir dir{"troupe_tok"};
  dir.write("tokenizer.json", read_file(stories_dir() / "tokenizer.json"));
  dir.write("tokenizer_config.json", R"({"bos_token": "<nope>"})");
  try {
    (void)tokenizer::load(dir.path);
    FAIL("expected model_error");
  } catch (const model_error& e) {
    CHECK(contains(e.what(), "tokenizer_config.json"));
    CHECK(contains(e.what(), "bos_token '<nope>' is not in the vocab"));
  }
}
