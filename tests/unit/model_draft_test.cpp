// The draft model's own KV blocks: proposing takes them, forget gives one
// sequence's back, reset (after a crashed draft actor) gives every one back,
// and a reset draft proposes as a fresh one does.
#include <doctest/doctest.h>

#include <memory>
#include <vector>

#include "runtime/cpu/cpu_model_runner.hpp"
#include "runtime/model_draft.hpp"
#include "tests/support/stories_model.hpp"

using namespace troupe;
using namespace troupe::testing;
using runtime::token_id;

namespace {

constexpr int total_blocks = 12;

std::unique_ptr<runtime::model_draft> small_draft() {
  const auto& m = stories_model();
  auto runner = std::make_unique<runtime::cpu_model_runner>(
      runtime::first_layers_config(m.config, 2), runtime::first_layers_weights(m.weights, 2),
      runtime::kv_cache_config{total_blocks, 16}, 1);
  return std::make_unique<runtime::model_draft>(std::move(runner));
}

std::vector<std::vector<token_id>> propose(runtime::model_draft& d, const std::vector<std::vector<token_id>>& histories,
                                           const runtime::sampling_params& params) {
  std::vector<runtime::draft_input> in;
  for (std::size_t i = 0; i < histories.size(); ++i)
    in.push_back({static_cast<runtime::seq_id>(i + 1), histories[i], 3, &params, 7, 0, 2});
  std::vector<std::vector<token_id>> out;
  for (auto& o : d.propose(in))
    out.push_back(o.tokens);
  return out;
}

} // namespace

TEST_CASE("model_draft: forget returns one sequence's blocks, reset returns all, and a reset draft proposes afresh") {
  runtime::sampling_params greedy;
  greedy.temperature = 0;
  // Token ids of the 512-token vocabulary; 9 and 20 tokens (one block of 16, and two).
  const std::vector<std::vector<token_id>> histories{
      {1, 403, 407, 261, 378, 302, 263, 205, 338},
      {1, 450, 366, 263, 302, 338, 263, 433, 289, 13, 1, 403, 407, 261, 378, 302, 263, 338, 263, 289}};
  auto draft = small_draft();
  REQUIRE(draft->free_blocks() == total_blocks);
  const auto first = propose(*draft, histories, greedy);
  REQUIRE(first.size() == 2);
  CHECK(first[0].size() == 3);
  CHECK(first[1].size() == 3);
  const int after_propose = draft->free_blocks();
  CHECK(after_propose <= total_blocks - 3); // the 9-token sequence holds one block, the 20-token one two
  draft->forget(2);
  const int after_forget = draft->free_blocks();
  CHECK(after_forget > after_propose);
  CHECK(after_forget < total_blocks); // sequence 1 still holds its block
  draft->reset();
  CHECK(draft->free_blocks() == total_blocks);
  // Nothing of the old state is used: the same histories give the same proposals as before.
  CHECK(propose(*draft, histories, greedy) == first);
  draft->reset();
  CHECK(draft->free_blocks() == total_blocks);
}
