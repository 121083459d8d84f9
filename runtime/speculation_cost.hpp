// What speculation costs on this engine, measured rather than assumed: the wall
// time of decode steps that speculate against that of decode steps that do
// not. Everything a speculating step adds counts — the draft's work, the
// scheduler's extra round trip to the draft, the wider target step and the
// verifier — so adaptive k stops speculating where none of it pays.
#pragma once

namespace troupe::runtime {

class speculation_cost {
 public:
  // A decode-only step in which nothing speculated.
  void observe_plain(double wall_us);
  // A decode-only step that verified drafts; mean_drafted = draft tokens per speculating sequence.
  void observe_speculative(double wall_us, double mean_drafted);
  // One draft token's cost in target steps (adaptive_k's draft_cost): (speculating step / plain
  // step - 1) / mean draft length. `fallback` until both kinds of step have been seen.
  double per_draft_token(double fallback) const;

 private:
  static constexpr double weight = 0.1;  // of each new observation (exponential moving averages)
  double plain_us_ = 0, speculative_us_ = 0, drafted_ = 0;
  bool seen_plain_ = false, seen_speculative_ = false;
};

} // namespace troupe::runtime
