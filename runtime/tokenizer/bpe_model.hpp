// The BPE model: the vocab, the ranked merges, unk / byte-fallback handling, and the merge
// loop that turns one pre-tokenized piece into ids.
#pragma once

#include "runtime/tokenizer.hpp"
#include "runtime/tokenizer/json_file.hpp"

#include <boost/json.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace troupe::runtime::tokenizer_detail {

// Heterogeneous lookup, so a std::string_view finds a std::string key without a copy.
struct string_hash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};
using string_to_id = std::unordered_map<std::string, token_id, string_hash, std::equal_to<>>;

struct merge_info {
  std::int32_t rank;
  token_id merged;
};

struct bpe_model {
  string_to_id vocab;
  std::unordered_map<std::uint64_t, merge_info> merges; // pair_key(left, right) -> merge
  std::optional<token_id> unk;
  bool fuse_unk = false;
  bool byte_fallback = false;
  bool ignore_merges = false;
  std::array<token_id, 256> byte_tokens{}; // <0xXX> ids, -1 when missing

  // Appends the ids of one pre-tokenized word.
  void encode_word(std::string_view word, std::vector<token_id>& out) const;
};

// tokenizer.json's "model" (BPE only).
void load_model(const json_file& f, const boost::json::value& v, bpe_model& model);

} // namespace troupe::runtime::tokenizer_detail
