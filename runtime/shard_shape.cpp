// Tensor-parallel shard shapes and the widths a model refuses.
#include "runtime/shard_shape.hpp"

#include <algorithm>
#include <string>

#include "runtime/errors.hpp"

namespace troupe::runtime {

std::vector<shard_shape> shard_shapes(const model_config& model, int ranks) {
  const int heads = model.num_attention_heads, kv_heads = model.num_key_value_heads;
  const int inter = model.intermediate_size, vocab = model.vocab_size;
  const std::string width = "engine.tensor-parallel-size " + std::to_string(ranks);
  const std::string head_numbers =
      std::to_string(heads) + " attention heads and " + std::to_string(kv_heads) + " key/value heads";
  if (ranks < 1)
    throw config_error(width + " is not a width: a model needs at least one rank");
  if (heads < 1 || kv_heads < 1)
    throw config_error("the model's " + head_numbers + " cannot be shared out: it needs at least one of each");
  if (heads % ranks != 0)
    throw config_error(width + " does not divide the model's " + head_numbers);
  if (kv_heads >= ranks ? kv_heads % ranks != 0 : ranks % kv_heads != 0)
    throw config_error(width + " cannot share out the model's " + head_numbers +
                       " (the kv heads must divide among the ranks, or the ranks among the kv heads)");
  if (inter % ranks != 0)
    throw config_error(width + " does not divide the model's " +
                       (model.moe ? "shared_expert_intermediate_size " : "intermediate size ") + std::to_string(inter) +
                       " (gate_proj and up_proj are split by rows among the ranks)");
  const int expert_inter = model.moe ? model.moe->expert_intermediate_size : 0;
  if (expert_inter % ranks != 0)
    throw config_error(width + " does not divide the model's " +
                       (model.model_type == "mixtral" ? "intermediate_size " : "moe_intermediate_size ") +
                       std::to_string(expert_inter) +
                       " (every expert's gate and up are split by rows among the ranks)");
  if (vocab < ranks)
    throw config_error(width + " is more ranks than the model's vocabulary of " + std::to_string(vocab) +
                       " tokens (each rank computes a slice of the logits)");

  const int group = heads / kv_heads; // query heads per kv head
  std::vector<shard_shape> shapes(static_cast<std::size_t>(ranks));
  for (int r = 0; r < ranks; ++r) {
    auto& s = shapes[static_cast<std::size_t>(r)];
    s.rank = r;
    s.ranks = ranks;
    s.q_heads = heads / ranks;
    s.q_head_begin = r * s.q_heads;
    // With fewer kv heads than ranks, ranks % kv_heads == 0 makes each rank's query heads fall
    // in one group, so one kv head serves them all.
    s.kv_heads = std::max(1, kv_heads / ranks);
    s.kv_head_begin = kv_heads >= ranks ? r * s.kv_heads : s.q_head_begin / group;
    s.intermediate = inter / ranks;
    s.intermediate_begin = r * s.intermediate;
    s.expert_intermediate = expert_inter / ranks;
    s.expert_intermediate_begin = r * s.expert_intermediate;
    const auto vocab_edge = [&](int rank) { return static_cast<int>(static_cast<long long>(rank) * vocab / ranks); };
    s.vocab_begin = vocab_edge(r);
    s.vocab = vocab_edge(r + 1) - s.vocab_begin;
  }
  return shapes;
}

shard_shape whole_model_shard(const model_config& model) {
  shard_shape s;
  s.q_heads = model.num_attention_heads;
  s.kv_heads = model.num_key_value_heads;
  s.intermediate = model.intermediate_size;
  s.expert_intermediate = model.moe ? model.moe->expert_intermediate_size : 0;
  s.vocab = model.vocab_size;
  return s;
}

} // namespace troupe::runtime
