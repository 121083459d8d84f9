// The model's tokens as byte strings, in a trie: a token mask walks the grammar along the
// trie, so tokens that share a prefix share the matcher's work, and a prefix the grammar
// refuses cuts off every token below it.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "runtime/tokenizer.hpp"

namespace troupe::runtime::structured {

class token_vocabulary {
 public:
  // bytes[id]: what token id adds to the output text; nullopt for the tokens no constraint
  // produces (special tokens, ids the tokenizer does not know, empty strings).
  explicit token_vocabulary(std::vector<std::optional<std::string>> bytes);
  // The first vocab_size ids of the model (the LM head's rows; ids past the tokenizer's
  // vocabulary have no bytes).
  static token_vocabulary from_tokenizer(const tokenizer& tok, int vocab_size);

  int size() const { return static_cast<int>(bytes_.size()); }
  const std::optional<std::string>& bytes(token_id id) const { return bytes_.at(static_cast<std::size_t>(id)); }

  // The trie: node 0 is the root (the empty string).
  struct edge {
    std::uint8_t byte;
    std::uint32_t child;
  };
  std::span<const edge> children(std::uint32_t node) const {
    return std::span<const edge>(edges_).subspan(nodes_[node].edge_begin, nodes_[node].edge_count);
  }
  // The tokens whose bytes end at this node.
  std::span<const token_id> tokens_at(std::uint32_t node) const {
    return std::span<const token_id>(ends_).subspan(nodes_[node].end_begin, nodes_[node].end_count);
  }
  std::size_t node_count() const { return nodes_.size(); }

 private:
  struct node {
    std::uint32_t edge_begin = 0, edge_count = 0, end_begin = 0, end_count = 0;
  };
  std::vector<std::optional<std::string>> bytes_;
  std::vector<node> nodes_;
  std::vector<edge> edges_;
  std::vector<token_id> ends_;
};

} // namespace troupe::runtime::structured
