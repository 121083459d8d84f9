// The draft model's own KV blocks: proposing takes them, forget gives one
// sequence's back, reset (after a crashed draft actor) gives every one back,
// and a reset draft proposes as a fresh one does. A draft whose steps are bounded
// (max_step_tokens) catches up over several steps and proposes what an unbounded one does.
#include <doctest/doctest.h>

#include <algorithm>
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

// The CPU runner, noting the largest step it was given.
class step_size_recorder final : public runtime::model_runner {
 public:
  explicit step_size_recorder(std::unique_ptr<runtime::cpu_model_runner> inner, std::size_t* largest)
      : inner_(std::move(inner)), largest_(largest) {}
  const runtime::model_config& config() const override { return inner_->config(); }
  const runtime::kv_cache_config& cache_config() const override { return inner_->cache_config(); }
  void execute(const runtime::step_batch& batch, std::span<float> logits) override {
    *largest_ = std::max(*largest_, batch.num_tokens());
    inner_->execute(batch, logits);
  }
  void copy_blocks(runtime::kv_copy kind, std::span<const runtime::block_copy> pairs) override {
    inner_->copy_blocks(kind, pairs);
  }
  std::size_t block_bytes() const override { return inner_->block_bytes(); }

 private:
  std::unique_ptr<runtime::cpu_model_runner> inner_;
  std::size_t* largest_;
};

std::unique_ptr<runtime::model_draft> small_draft(int max_step_tokens = 0, std::size_t* largest_step = nullptr) {
  const auto& m = stories_model();
  auto runner = std::make_unique<runtime::cpu_model_runner>(
      runtime::first_layers_config(m.config, 2), runtime::first_layers_weights(m.weights, 2),
      runtime::kv_cache_config{total_blocks, 16}, 1);
  if (largest_step == nullptr)
    return std::make_unique<runtime::model_draft>(std::move(runner), max_step_tokens);
  return std::make_unique<runtime::model_draft>(std::make_unique<step_size_recorder>(std::move(runner), largest_step),
                                                max_step_tokens);
}

std::vector<std::vector<token_id>> propose(runtime::model_draft& d, const std::vector<std::vector<token_id>>& histories,
                                           const runtime::sampler_settings& params) {
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

TEST_CASE("model_draft: steps of at most max_step_tokens catch up over several steps and propose the same tokens") {
  runtime::sampling_params greedy, seeded;
  greedy.temperature = 0;
  seeded.temperature = 0.9f;
  // 60 tokens of real text: the golden continuations, one after another.
  std::vector<token_id> story{1};
  const auto golden = read_json(stories_dir() / "golden_greedy.json");
  for (const auto& c : golden.at("cases").as_array())
    for (auto t : json_array<token_id>(c.at("generated_ids")))
      story.push_back(t);
  REQUIRE(story.size() >= 60);
  const std::vector<std::vector<token_id>> histories{std::vector<token_id>(story.begin(), story.begin() + 45),
                                                     std::vector<token_id>(story.begin() + 3, story.begin() + 33)};
  for (const auto* params : {&greedy, &seeded}) {
    std::size_t largest = 0;
    auto unbounded = small_draft();
    auto bounded = small_draft(7, &largest);
    CHECK(propose(*bounded, histories, *params) == propose(*unbounded, histories, *params));
    CHECK(largest == 7);
    // A rejection: the histories part from what the drafts cached at position 20, and grow.
    auto changed = histories;
    changed[0][20] = changed[0][21];
    changed[0].push_back(changed[0][5]);
    changed[1].insert(changed[1].end(), {changed[1][2], changed[1][3]});
    largest = 0;
    CHECK(propose(*bounded, changed, *params) == propose(*unbounded, changed, *params));
    CHECK(largest == 7);
  }
}
