// The verifier keeps the target's distribution on the real model: the first
// token emitted after "Once upon a time" by sampled speculation (q from the
// model's first 3 of 5 layers, a layer-skip draft that partly agrees with it)
// follows the model's own distribution, checked by chi-square over 60k seeded trials.
#include <doctest/doctest.h>

#include <cmath>

#include "runtime/model_draft.hpp"
#include "runtime/sampler.hpp"
#include "runtime/spec_verifier.hpp"
#include "runtime/step_batch_builder.hpp"
#include "tests/support/chi_square.hpp"
#include "tests/support/stories_model.hpp"

using namespace troupe;
using namespace troupe::testing;
using runtime::token_id;

namespace {

// The logits of the last position of `tokens` under `runner`.
std::vector<float> last_logits(runtime::model_runner& runner, const std::vector<token_id>& tokens) {
  const int vocab = runner.config().vocab_size;
  std::vector<std::int32_t> table{0, 1, 2, 3};
  runtime::step_batch_builder b(16, 4);
  b.add(tokens, 0, table, 1);
  auto batch = b.take(0);
  std::vector<float> logits(static_cast<std::size_t>(vocab));
  runner.execute(batch, logits);
  return logits;
}

} // namespace

TEST_CASE("sampled speculation on the real model emits the model's own first-token distribution") {
  const std::vector<token_id> prompt{1, 403, 407, 261, 378}; // <s> Once upon a time
  auto target = make_runner(16, 8);
  const auto p_logits = last_logits(*target, prompt);
  const auto& m = stories_model();
  runtime::cpu_model_runner draft(runtime::first_layers_config(m.config, 3), runtime::first_layers_weights(m.weights, 3),
                                  runtime::kv_cache_config{8, 16}, 1);
  auto q_logits = last_logits(draft, prompt);
  const int vocab = m.config.vocab_size;

  runtime::sampling_params params;
  params.temperature = 1.0f;
  runtime::sampler s;
  std::vector<float> p(static_cast<std::size_t>(vocab)), q(static_cast<std::size_t>(vocab));
  auto scratch = p_logits;
  s.probabilities(scratch, params, prompt, {}, p);
  scratch = q_logits;
  s.probabilities(scratch, params, prompt, {}, q);
  double overlap = 0;
  for (int t = 0; t < vocab; ++t)
    overlap += std::min(p[t], q[t]);
  INFO("sum of min(p, q) = " << overlap);
  CHECK(overlap < 0.9); // the draft disagrees enough: rejections and residual draws are exercised

  runtime::spec_verifier verifier;
  std::vector<long> counts(static_cast<std::size_t>(vocab), 0);
  std::vector<float> target_rows(2 * static_cast<std::size_t>(vocab));
  std::vector<token_id> out(2);
  long accepted = 0;
  const int trials = 60000;
  for (int trial = 0; trial < trials; ++trial) {
    const auto seed = static_cast<std::uint64_t>(trial) * 7919u + 17u;
    // The draft samples x_1 from q with its own counter.
    double u = runtime::counter_uniform(seed, 0), acc = 0;
    token_id x = vocab - 1;
    for (int t = 0; t < vocab; ++t)
      if (u < (acc += q[t])) {
        x = t;
        break;
      }
    // Rows for x_1 and the bonus; only the first emitted token is checked, so the bonus row's content is irrelevant.
    std::copy(p_logits.begin(), p_logits.end(), target_rows.begin());
    std::copy(p_logits.begin(), p_logits.end(), target_rows.begin() + vocab);
    const runtime::sampler_settings settings = params;
    runtime::spec_input in;
    in.params = &settings;
    in.seed = seed;
    in.step = 0;
    in.history = prompt;
    in.prompt_len = prompt.size();
    const token_id draft_tokens[] = {x};
    in.draft = draft_tokens;
    in.draft_probs = q;
    in.target_logits = target_rows;
    in.vocab = vocab;
    auto r = verifier.verify(in, out);
    accepted += r.accepted;
    ++counts[static_cast<std::size_t>(out[0])];
  }
  CHECK(accepted > trials / 20);  // some drafts are kept ...
  CHECK(accepted < trials * 0.9); // ... and many are not
  std::vector<double> probs(p.begin(), p.end());
  CHECK_FITS(counts, probs);
}
