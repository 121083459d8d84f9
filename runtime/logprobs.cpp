// log_softmax of one row, read twice: once for the maximum, once for the sum.
#include "runtime/logprobs.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>
#include <string>

namespace troupe::runtime {

token_logprobs compute_logprobs(std::span<const float> logits, token_id chosen, int top_n) {
  const int vocab = static_cast<int>(logits.size());
  if (chosen < 0 || chosen >= vocab)
    throw std::logic_error("compute_logprobs: token " + std::to_string(chosen) + " outside the vocabulary");
  top_n = std::clamp(top_n, 0, std::min(vocab, max_logprobs));
  const float max = *std::max_element(logits.begin(), logits.end());
  double sum = 0.0;
  for (float x : logits)
    sum += std::exp(static_cast<double>(x - max));
  const float log_z = max + static_cast<float>(std::log(sum));

  token_logprobs out;
  out.token = chosen;
  out.logprob = logits[static_cast<std::size_t>(chosen)] - log_z;
  if (top_n > 0) {
    std::vector<token_id> order(static_cast<std::size_t>(vocab));
    std::iota(order.begin(), order.end(), 0);
    auto more_likely = [&](token_id a, token_id b) {
      float la = logits[static_cast<std::size_t>(a)], lb = logits[static_cast<std::size_t>(b)];
      return la > lb || (la == lb && a < b);
    };
    std::partial_sort(order.begin(), order.begin() + top_n, order.end(), more_likely);
    for (int i = 0; i < top_n; ++i) {
      out.top_ids.push_back(order[static_cast<std::size_t>(i)]);
      out.top_logprobs.push_back(logits[static_cast<std::size_t>(order[static_cast<std::size_t>(i)])] - log_z);
    }
  }
  return out;
}

} // namespace troupe::runtime
