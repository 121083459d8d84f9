// Draws ids, decodes them, tokenizes the text back and repairs the ids until the round trip
// holds: the asked length, every id inside the model's vocabulary, the prefix untouched.
#include "apps/troupe-bench/load/prompt_generator.hpp"

#include <algorithm>

namespace troupe::bench {

prompt_generator::prompt_generator(token_codec& codec, token_id id_limit, int max_attempts)
    : codec_(codec), id_limit_(id_limit), max_attempts_(max_attempts) {
  if (id_limit < 1)
    throw std::invalid_argument("the token id limit must be at least 1");
  if (max_attempts < 1)
    throw std::invalid_argument("the prompt generator needs at least one attempt");
}

token_prompt prompt_generator::make(int len, std::mt19937_64& rng, const token_prompt& prefix) {
  std::uniform_int_distribution<token_id> draw(0, id_limit_ - 1);
  const std::size_t want = static_cast<std::size_t>(std::max(len, 0));
  const std::size_t prefix_len = prefix.ids.size();
  std::vector<token_id> tail(want);
  for (auto& id : tail)
    id = draw(rng);

  std::string why;
  std::size_t kept = want; // ids the last repair kept before filling: what follows was filled
  for (int attempt = 0; attempt < max_attempts_; ++attempt) {
    std::vector<token_id> ids = prefix.ids;
    ids.insert(ids.end(), tail.begin(), tail.end());
    token_prompt out{codec_.decode(ids), {}};
    // No NUL characters (a byte id decodes to one): many a server or client treats one as the end
    // of the text.
    std::erase(out.text, '\0');
    out.ids = codec_.encode(out.text);
    const bool prefix_kept = out.text.starts_with(prefix.text) && out.ids.size() >= prefix_len &&
                             std::equal(prefix.ids.begin(), prefix.ids.end(), out.ids.begin());
    const auto outside =
        std::count_if(out.ids.begin(), out.ids.end(), [this](token_id id) { return id < 0 || id >= id_limit_; });
    if (prefix_kept && outside == 0 && out.ids.size() == prefix_len + want)
      return out;
    why = "the last try tokenized to " + std::to_string(out.ids.size()) + " ids for " +
          std::to_string(prefix_len + want) + ", " + std::to_string(outside) + " of them outside the vocabulary" +
          (prefix_kept ? "" : ", and its first ids merged into the shared prefix");

    // Repair in token space: keep what the tokenizer made of the text and fix only what is
    // wrong, so each round changes a few ids and the next round trip agrees with the rest.
    if (prefix_kept) {
      tail.assign(out.ids.begin() + static_cast<std::ptrdiff_t>(prefix_len), out.ids.end());
    } else if (!tail.empty()) {
      tail.front() = draw(rng); // it merged with the prefix's last token: another first id
    }
    // New ids come from the fillers, which neither grow nor merge much, so the tail settles.
    const auto& pool = fillers();
    std::uniform_int_distribution<std::size_t> pick(0, pool.empty() ? 0 : pool.size() - 1);
    auto refill = [&] { return pool.empty() ? draw(rng) : pool[pick(rng)]; };
    for (auto& id : tail)
      if (id < 0 || id >= id_limit_)
        id = refill();
    if (tail.size() > want) {
      // The text grew: a lone byte id decodes to U+FFFD (three bytes), or the last cut split a
      // character. Cutting at the same place every time could split the same character again
      // and again; cutting a random 1-4 ids before the last cut (a UTF-8 character is at most
      // 4 bytes) and filling from there cannot loop.
      std::uniform_int_distribution<std::size_t> back(1, 4);
      const std::size_t cut = std::min(want, kept);
      tail.resize(cut - std::min(cut, back(rng)));
    }
    kept = tail.size();
    while (tail.size() < want)
      tail.push_back(refill()); // it shrank (merges, ids that decode to nothing)
  }
  throw prompt_error("could not make a prompt of " + std::to_string(prefix_len + want) +
                     " tokens with every id below " + std::to_string(id_limit_) + " in " +
                     std::to_string(max_attempts_) + " tries: " + why);
}

const std::vector<token_id>& prompt_generator::fillers() {
  if (fillers_searched_)
    return fillers_;
  fillers_searched_ = true;
  // A fixed draw of its own: the fillers are the same whatever the workload's seed, and
  // whichever prompt first needs them.
  std::mt19937_64 rng(0x9e3779b97f4a7c15);
  std::uniform_int_distribution<token_id> draw(0, id_limit_ - 1);
  constexpr int candidates = 64, enough = 16;
  for (int i = 0; i < candidates && fillers_.size() < enough; ++i) {
    const std::vector<token_id> thrice(3, draw(rng));
    const auto text = codec_.decode(thrice);
    if (!text.empty() && codec_.encode(text) == thrice)
      fillers_.push_back(thrice.front());
  }
  return fillers_;
}

} // namespace troupe::bench
