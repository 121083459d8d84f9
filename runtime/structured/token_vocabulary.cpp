// Builds the vocabulary's trie (see token_vocabulary.hpp).
#include "runtime/structured/token_vocabulary.hpp"

#include <algorithm>
#include <numeric>

namespace troupe::runtime::structured {

token_vocabulary::token_vocabulary(std::vector<std::optional<std::string>> bytes) : bytes_(std::move(bytes)) {
  // Sorting the tokens by their bytes makes every node's subtree a contiguous run, so the
  // trie is built in one pass, children in byte order.
  std::vector<token_id> order;
  for (std::size_t id = 0; id < bytes_.size(); ++id)
    if (bytes_[id] && !bytes_[id]->empty())
      order.push_back(static_cast<token_id>(id));
  std::stable_sort(order.begin(), order.end(), [&](token_id a, token_id b) {
    return *bytes_[static_cast<std::size_t>(a)] < *bytes_[static_cast<std::size_t>(b)];
  });
  // First as a pointer-linked trie, then flattened breadth-first.
  struct build_node {
    std::vector<std::pair<std::uint8_t, std::uint32_t>> children;
    std::vector<token_id> tokens;
  };
  std::vector<build_node> build(1);
  for (const auto id : order) {
    std::uint32_t at = 0;
    for (const char c : *bytes_[static_cast<std::size_t>(id)]) {
      const auto b = static_cast<std::uint8_t>(c);
      auto& kids = build[at].children;
      // Sorted input: a child for this byte, if any, is the last one added.
      if (kids.empty() || kids.back().first != b) {
        build.push_back({});
        build[at].children.emplace_back(b, static_cast<std::uint32_t>(build.size() - 1));
      }
      at = build[at].children.back().second;
    }
    build[at].tokens.push_back(id);
  }
  nodes_.resize(build.size());
  for (std::size_t i = 0; i < build.size(); ++i) {
    nodes_[i].edge_begin = static_cast<std::uint32_t>(edges_.size());
    nodes_[i].edge_count = static_cast<std::uint32_t>(build[i].children.size());
    for (const auto& [b, child] : build[i].children)
      edges_.push_back({b, child});
    nodes_[i].end_begin = static_cast<std::uint32_t>(ends_.size());
    nodes_[i].end_count = static_cast<std::uint32_t>(build[i].tokens.size());
    ends_.insert(ends_.end(), build[i].tokens.begin(), build[i].tokens.end());
  }
}

token_vocabulary token_vocabulary::from_tokenizer(const tokenizer& tok, int vocab_size) {
  std::vector<std::optional<std::string>> bytes(static_cast<std::size_t>(std::max(vocab_size, 0)));
  for (int id = 0; id < vocab_size; ++id)
    bytes[static_cast<std::size_t>(id)] = tok.token_bytes(id);
  return token_vocabulary(std::move(bytes));
}

} // namespace troupe::runtime::structured
