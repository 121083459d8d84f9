// The offline generation loop: plan a step (prefill chunks and decodes), run
// it, sample, detokenize, check stops; repeat until every sequence is done.
#include "runtime/local_generator.hpp"

#include <algorithm>
#include <memory>
#include <optional>

#include "runtime/errors.hpp"
#include "runtime/incremental_detokenizer.hpp"
#include "runtime/kv_geometry.hpp"
#include "runtime/sampler.hpp"
#include "runtime/step_batch_builder.hpp"
#include "runtime/stop_matcher.hpp"
#include "runtime/structured/constrained_edits.hpp"

namespace troupe::runtime {

namespace {
struct sequence {
  const generation_request* request = nullptr;
  std::vector<token_id> tokens; // prompt + output
  std::size_t prompt_len = 0;
  int computed = 0; // tokens whose K/V is in the cache
  std::vector<std::int32_t> blocks;
  std::uint64_t seed = 0;
  std::vector<token_id> stop_ids;
  logit_rules rules;                                           // logit_bias, and the stop ids masked until min_tokens
  std::unique_ptr<structured::sequence_constraint> constraint; // structured output, or null
  std::unique_ptr<incremental_detokenizer> detok;
  std::unique_ptr<stop_matcher> stops;
  generation_result result;
  bool done = false;

  std::span<const token_id> output() const { return std::span(tokens).subspan(prompt_len); }
};
} // namespace

local_generator::local_generator(model_runner& runner, const tokenizer& tok, std::vector<token_id> default_stop_ids,
                                 options opts)
    : runner_(runner), tok_(tok), default_stop_ids_(std::move(default_stop_ids)), opts_(opts) {}

std::vector<generation_result> local_generator::run(const std::vector<generation_request>& requests,
                                                    const text_callback& on_text) {
  const auto& cfg = runner_.config();
  const auto& cache = runner_.cache_config();
  const int bs = cache.block_size;

  // Fixed layout: each sequence owns enough consecutive blocks for prompt + max_tokens.
  std::vector<sequence> seqs(requests.size());
  int next_block = 0, max_blocks = 1;
  for (std::size_t i = 0; i < requests.size(); ++i) {
    const auto& req = requests[i];
    req.params.validate();
    if (req.prompt_ids.empty())
      throw invalid_argument_error("the prompt must contain at least one token");
    if (req.prompt_ids.size() >= static_cast<std::size_t>(cfg.max_position_embeddings))
      throw invalid_argument_error("the prompt has " + std::to_string(req.prompt_ids.size()) +
                                   " tokens; the model's context is " + std::to_string(cfg.max_position_embeddings));
    for (auto id : req.prompt_ids)
      if (id < 0 || id >= cfg.vocab_size)
        throw invalid_argument_error("prompt token id " + std::to_string(id) + " is outside the vocabulary");
    auto& s = seqs[i];
    s.request = &req;
    s.tokens = req.prompt_ids;
    s.prompt_len = req.prompt_ids.size();
    s.seed = req.params.seed.value_or(req.seed);
    s.stop_ids = stop_ids_for(req.params, default_stop_ids_);
    for (const auto& b : req.params.logit_bias)
      if (b.id >= cfg.vocab_size)
        throw invalid_argument_error("logit_bias token id " + std::to_string(b.id) + " is outside the vocabulary");
    s.rules = logit_rules_for(req.params, s.stop_ids);
    if (!req.params.constraint.empty()) {
      if (!constraints_)
        constraints_ =
            std::make_shared<structured::constraint_cache>(std::make_shared<const structured::token_vocabulary>(
                structured::token_vocabulary::from_tokenizer(tok_, cfg.vocab_size)));
      s.constraint = std::make_unique<structured::sequence_constraint>(constraints_->get(req.params.constraint));
    }
    s.detok = std::make_unique<incremental_detokenizer>(tok_, req.prompt_ids);
    s.stops = std::make_unique<stop_matcher>(req.params.stop);
    int capacity = std::min<int>(static_cast<int>(s.prompt_len) + req.params.max_tokens, cfg.max_position_embeddings);
    int n_blocks = blocks_for_tokens(capacity, bs);
    if (next_block + n_blocks > cache.num_blocks)
      throw invalid_argument_error("the KV cache has " + std::to_string(cache.num_blocks) + " blocks of " +
                                   std::to_string(bs) + " tokens: too few for these requests");
    for (int b = 0; b < n_blocks; ++b)
      s.blocks.push_back(next_block++);
    max_blocks = std::max(max_blocks, n_blocks);
  }

  sampler smp;
  std::vector<float> logits;
  std::vector<token_id> banned;         // a constrained row's bans, rewritten per row
  std::vector<std::size_t> logit_owner; // batch logits row -> sequence
  auto emit = [&](std::size_t i, std::string_view text) {
    if (text.empty())
      return;
    seqs[i].result.text.append(text);
    if (on_text)
      on_text(i, text);
  };
  // by_stop_string: the matcher already ended the text; otherwise release what
  // the detokenizer and the matcher still hold back.
  auto finish = [&](std::size_t i, finish_reason reason, bool by_stop_string) {
    auto& s = seqs[i];
    s.done = true;
    s.result.reason = reason;
    s.result.output_ids.assign(s.output().begin(), s.output().end());
    if (by_stop_string)
      return;
    auto tail = s.stops->push(s.detok->flush());
    emit(i, tail.text);
    if (!tail.stopped)
      emit(i, s.stops->flush());
  };

  for (;;) {
    step_batch_builder builder(bs, max_blocks);
    logit_owner.clear();
    for (std::size_t i = 0; i < seqs.size(); ++i) {
      auto& s = seqs[i];
      if (s.done)
        continue;
      int remaining = static_cast<int>(s.tokens.size()) - s.computed;
      int chunk = opts_.prefill_chunk > 0 ? std::min(remaining, opts_.prefill_chunk) : remaining;
      bool completes = s.computed + chunk == static_cast<int>(s.tokens.size());
      builder.add(std::span(s.tokens).subspan(s.computed, chunk), s.computed, s.blocks, completes);
      if (completes)
        logit_owner.push_back(i);
    }
    if (logit_owner.empty() && std::all_of(seqs.begin(), seqs.end(), [](const sequence& s) { return s.done; }))
      break;
    step_batch batch = builder.take(steps_++);
    logits.resize(batch.logits_rows.size() * static_cast<std::size_t>(cfg.vocab_size));
    runner_.execute(batch, logits);
    // Sequences were added in index order, skipping finished ones.
    for (std::size_t i = 0, b = 0; i < seqs.size(); ++i)
      if (!seqs[i].done)
        seqs[i].computed = batch.seq_lens[b++];
    for (std::size_t r = 0; r < logit_owner.size(); ++r) {
      std::size_t i = logit_owner[r];
      auto& s = seqs[i];
      const auto& p = s.request->params;
      std::span<float> row(logits.data() + r * cfg.vocab_size, cfg.vocab_size);
      auto output_len = s.tokens.size() - s.prompt_len;
      const auto edits = s.constraint
                             ? structured::constrained_edits(*s.constraint, s.rules, output_len, s.output(), banned)
                             : s.rules.at(output_len);
      token_id next = smp.sample(row, p, s.tokens, s.output(), s.seed, output_len, edits);
      s.tokens.push_back(next);
      const auto reason =
          finish_after(next, s.stop_ids, static_cast<int>(s.output().size()), static_cast<int>(s.tokens.size()),
                       {p.max_tokens, cfg.max_position_embeddings, p.min_tokens});
      if (reason == finish_reason::stop) {
        finish(i, finish_reason::stop, false);
        continue;
      }
      // A stop string in this token's text ends it before the length limit does.
      auto piece = s.stops->push(s.detok->push(next), static_cast<int>(s.output().size()) >= p.min_tokens);
      emit(i, piece.text);
      if (piece.stopped) {
        finish(i, finish_reason::stop, true);
        continue;
      }
      if (reason == finish_reason::length)
        finish(i, finish_reason::length, false);
    }
  }

  std::vector<generation_result> results;
  results.reserve(seqs.size());
  for (auto& s : seqs)
    results.push_back(std::move(s.result));
  return results;
}

} // namespace troupe::runtime
