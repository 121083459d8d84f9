// The tokenizer: reads a Hugging Face tokenizer.json (BPE: SentencePiece-style with byte
// fallback, or GPT-2 style byte-level) and turns text into token ids and ids back into text.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace troupe::runtime {

using token_id = std::int32_t;

// Immutable once loaded, so one instance can be shared by any number of threads; copies
// are cheap (they share the loaded tables).
class tokenizer {
 public:
  // path = a tokenizer.json file or a model folder. Also reads, when present next to it,
  // tokenizer_config.json (add_bos_token / add_eos_token, bos_token / eos_token,
  // chat_template), special_tokens_map.json (bos/eos fallback) and chat_template.jinja.
  // Throws model_error naming the file and the problem.
  static tokenizer load(const std::filesystem::path& path);

  // Added tokens are split out first, the rest goes normalizer -> pre-tokenizer -> BPE.
  // add_special_tokens applies the post-processor (or add_bos_token / add_eos_token when
  // tokenizer.json has none). Invalid UTF-8 in `text` is read as U+FFFD.
  std::vector<token_id> encode(std::string_view text, bool add_special_tokens = true) const;

  // Ids the tokenizer does not know are dropped, as Hugging Face does.
  std::string decode(std::span<const token_id> ids, bool skip_special_tokens = true) const;

  std::size_t vocab_size() const; // max id + 1 over model vocab and added tokens
  std::optional<token_id> bos_id() const;
  std::optional<token_id> eos_id() const;
  std::optional<token_id> token_to_id(std::string_view token) const;
  std::string id_to_token(token_id id) const; // raw vocab string; std::out_of_range if unknown
  bool is_special(token_id id) const;
  // The bytes token `id` adds to the text when it follows other output tokens (no
  // start-of-text stripping; a byte token is its byte, so a multi-byte character split over
  // tokens is its raw UTF-8 pieces). nullopt for special and unknown ids. What a
  // structured-output constraint checks a token against.
  std::optional<std::string> token_bytes(token_id id) const;
  const std::string& chat_template() const; // "" when none

  // For tests and debugging: the pieces the BPE model is given for `text` (after the
  // added-token split, normalizer and pre-tokenizer; byte-level pieces are shown before the
  // bytes-to-unicode mapping). Added tokens appear as their content.
  std::vector<std::string> pre_tokenize(std::string_view text) const;

  struct impl; // defined in runtime/tokenizer/tokenizer_impl.hpp

 private:
  explicit tokenizer(std::shared_ptr<const impl> p) : impl_(std::move(p)) {}
  std::shared_ptr<const impl> impl_;
  friend class decode_stream;
};

// decode() one id at a time: push() appends only text that no later id can change, and
// finish() appends the rest. Feeding ids through push() and then finish() gives exactly
// decode(ids). Copyable, so a caller can look at "what if the stream ended here".
class decode_stream {
 public:
  decode_stream(const tokenizer& tok, bool skip_special_tokens);
  void push(token_id id, std::string& out);
  void finish(std::string& out); // ends the stream; push() after it throws std::logic_error

 private:
  // Per decoder step: text held back (pending bytes, a partial match, ...) and a counter.
  struct step_state {
    std::string held;
    std::size_t count = 0;
  };
  void feed(std::size_t step, std::string_view item, std::string& out);
  void drain(std::size_t step, std::string& out);
  void flush_byte_run(std::size_t step, std::string& out);

  std::shared_ptr<const tokenizer::impl> impl_;
  bool skip_special_ = true;
  bool finished_ = false;
  std::vector<step_state> states_;
};

} // namespace troupe::runtime
