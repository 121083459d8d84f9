// The BPE model: its merge loop (a priority queue over a linked list of symbols, matching
// Hugging Face's results) and how the model is read from tokenizer.json.
#include "runtime/tokenizer/bpe_model.hpp"

#include "runtime/tokenizer/utf8.hpp"

#include <algorithm>
#include <queue>
#include <utility>

namespace troupe::runtime::tokenizer_detail {
namespace {

// The merges map's key for the pair (a, b).
std::uint64_t pair_key(token_id a, token_id b) {
  return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(a)) << 32) | static_cast<std::uint32_t>(b);
}

// Byte b's token in a byte-fallback vocab: "<0xAB>".
std::string byte_token_name(int b) {
  static constexpr char hex[] = "0123456789ABCDEF";
  return std::string{'<', '0', 'x', hex[b >> 4], hex[b & 15], '>'};
}

} // namespace

// BPE over one pre-tokenized word. Merges are applied lowest rank first (leftmost on ties)
// with a priority queue over a linked list of symbols: O(n log n) even when the word is a
// whole 16k-character prompt (the SentencePiece layout has no pre-tokenizer). Stale queue
// entries are skipped the way Hugging Face's Word::merge_all does, so results match it.
void bpe_model::encode_word(std::string_view word, std::vector<token_id>& out) const {
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

void load_model(const json_file& f, const boost::json::value& v, bpe_model& model) {
  const auto& o = f.object(v, "model");
  if (const auto* type = f.field(o, "type")) {
    const auto name = f.string(*type, "model.type");
    if (name != "BPE")
      f.fail("model.type '" + name + "' is not supported (BPE only)");
  } else if (f.field(o, "merges") == nullptr) {
    f.fail("model has no 'type' and is not a BPE model (no 'merges')");
  }
  for (const auto& [key, value] : f.object(f.required(o, "vocab", "model"), "model.vocab")) {
    model.vocab.emplace(std::string(key), f.id(value, "model.vocab entry '" + std::string(key) + "'"));
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
  model.fuse_unk = f.flag(o, "fuse_unk", false);
  model.byte_fallback = f.flag(o, "byte_fallback", false);
  model.ignore_merges = f.flag(o, "ignore_merges", false);
  if (const auto* u = f.field(o, "unk_token")) {
    const auto name = f.string(*u, "model.unk_token");
    const auto it = model.vocab.find(name);
    if (it == model.vocab.end())
      f.fail("model.unk_token '" + name + "' is not in the vocab");
    model.unk = it->second;
  }
  for (int b = 0; b < 256; ++b) {
    const auto it = model.vocab.find(byte_token_name(b));
    model.byte_tokens[b] = it == model.vocab.end() ? -1 : it->second;
  }

  const auto* merges = f.field(o, "merges");
  if (merges == nullptr)
    return;
  const auto& list = f.array(*merges, "model.merges");
  model.merges.reserve(list.size());
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
    const auto ia = model.vocab.find(a), ib = model.vocab.find(b), im = model.vocab.find(a + b);
    for (const auto& [it, name] : {std::pair{ia, &a}, std::pair{ib, &b}}) {
      if (it == model.vocab.end())
        f.fail(where + " names token '" + *name + "' that is not in the vocab");
    }
    if (im == model.vocab.end())
      f.fail(where + " makes '" + a + b + "' that is not in the vocab");
    model.merges.emplace(pair_key(ia->second, ib->second), merge_info{static_cast<std::int32_t>(rank), im->second});
  }
}

} // namespace troupe::runtime::tokenizer_detail
