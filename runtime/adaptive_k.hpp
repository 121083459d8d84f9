// How many tokens to speculate for one sequence, from how many of its recent
// drafts the target accepted. Speculating costs draft work and wider target
// steps; it pays only while the draft keeps agreeing with the target.
#pragma once

namespace troupe::runtime {

struct adaptive_k_config {
  bool enabled = true;           // off: always k_max (fixed-length speculation)
  int k_max = 4;                 // >= 0
  double draft_cost = 0.1;       // c: one drafted token's cost relative to one target step, >= 0
  double decay = 0.9;            // weight kept by old observations per verified step, in [0, 1)
  double prior_acceptance = 0.6; // alpha assumed before anything is seen, in [0, 1]
  double prior_weight = 2.0;     // ...worth this many acceptance tests, > 0
  int probe_interval = 16;       // at k = 0, speculate once every this many steps so alpha can recover, >= 1
  int probe_k = 1;               // length of that probe (the cheapest one that can raise alpha), >= 1
};

// alpha is the chance that the target accepts one draft token. A step that
// verifies a tokens of k ran a + 1 acceptance tests (a if a = k) and passed a
// of them, so alpha is estimated as passed / tests with both sums decayed
// geometrically per step. With alpha, k draft tokens yield in expectation
// (1 - alpha^(k+1)) / (1 - alpha) tokens (Leviathan et al. 2023) at a cost of
// 1 + c * k target steps; next_k() picks the k in [0, k_max] with the most
// tokens per unit cost, the smallest on ties.
class adaptive_k {
 public:
  // Throws std::invalid_argument naming the field when a value is out of range.
  explicit adaptive_k(const adaptive_k_config& config);

  // The speculation length for this step; 0 means a plain decode step.
  int next_k();
  // After verification: `proposed` tokens were drafted (may be fewer than
  // next_k() asked for), `accepted` of them kept.
  void observe(int proposed, int accepted);

  double acceptance() const { return passed_ / tests_; }
  // The draft's measured cost per token relative to a target step (the engine
  // learns it as it goes; the config's value is only the starting guess).
  void set_draft_cost(double c);
  // The best k for the current estimate, before probing.
  int best_k() const;

  // Expected tokens per step from k draft tokens at acceptance alpha.
  static double expected_tokens(double alpha, int k);

 private:
  adaptive_k_config config_;
  double passed_;
  double tests_;
  int idle_steps_ = 0; // plain steps since the last speculation
  int probe_interval_ = 16;  // grows while probes fail
  bool probing_ = false;     // the last next_k() was a probe
};

} // namespace troupe::runtime
