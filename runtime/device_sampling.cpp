// A device sampling row from a request's settings, and the host computation it must equal.
#include "runtime/device_sampling.hpp"

#include <vector>

#include "runtime/sampler.hpp"

namespace troupe::runtime {

device_sample make_device_sample(const sampler_settings& p, std::uint64_t seed, std::uint64_t step,
                                 std::span<const token_id> history, int prompt_len, const logit_edits& edits) {
  device_sample s;
  s.temperature = p.temperature;
  s.top_k = p.top_k;
  s.top_p = p.top_p;
  s.min_p = p.min_p;
  s.u = p.greedy() ? 0.0 : counter_uniform(seed, step);
  s.repetition_penalty = p.repetition_penalty;
  s.frequency_penalty = p.frequency_penalty;
  s.presence_penalty = p.presence_penalty;
  if (s.penalised()) {
    s.history = history;
    s.prompt_len = prompt_len;
  }
  s.edits = edits;
  s.logprobs = p.logprobs;
  return s;
}

device_sample make_device_score(token_id target, int top_n) {
  device_sample s;
  s.score_target = target;
  s.logprobs = top_n;
  return s;
}

void sample_on_host(std::span<float> logits, int vocab, std::span<const device_sample> rows, std::span<token_id> tokens,
                    std::span<token_logprobs> logprobs) {
  const auto v = static_cast<std::size_t>(vocab);
  sampler s;
  std::vector<float> raw;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const auto& r = rows[i];
    auto row = logits.subspan(i * v, v);
    if (r.score_target >= 0) {
      tokens[i] = r.score_target;
      if (r.logprobs >= 0)
        logprobs[i] = compute_logprobs(row, r.score_target, r.logprobs);
      continue;
    }
    if (r.logprobs >= 0)
      raw.assign(row.begin(), row.end());
    sampler_settings p;
    p.temperature = r.temperature;
    p.top_k = r.top_k;
    p.top_p = r.top_p;
    p.min_p = r.min_p;
    p.repetition_penalty = r.repetition_penalty;
    p.frequency_penalty = r.frequency_penalty;
    p.presence_penalty = r.presence_penalty;
    const auto output = r.history.subspan(std::min(r.history.size(), static_cast<std::size_t>(r.prompt_len)));
    const auto c = s.candidates(row, p, r.history, output, r.edits);
    tokens[i] = c.ids.size() == 1 ? c.ids[0] : sampler::draw(c, r.u);
    if (r.logprobs >= 0)
      logprobs[i] = compute_logprobs(raw, tokens[i], r.logprobs);
  }
}

} // namespace troupe::runtime
