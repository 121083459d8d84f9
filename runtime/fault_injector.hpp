// Faults made on purpose, to test how the engine recovers (the [debug] keys;
// never set in production). Each fault point fails one use in N: the Nth,
// 2Nth, ... step, block copy, proposal or tokenization. Counting instead of
// drawing keeps a run's faults predictable enough for a test to reason about,
// and an unarmed point costs one branch.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

namespace troupe::runtime {

enum class fault_point : std::uint8_t {
  executor_step,  // the model step throws: the step's requests fail, the executor lives
  executor_crash, // the executor actor dies in a step: it is restarted
  swap_copy,      // a swap copy (device->host or host->device) fails: the sequences recompute
  draft,          // the draft's proposal throws: the step runs without speculation
  draft_crash,    // the draft actor dies in a proposal: it is restarted
  tokenizer,      // a prompt's encode or an output token's decode throws: that request fails
};
inline constexpr std::size_t num_fault_points = 6;

std::string_view to_string(fault_point p);

struct fault_plan {
  std::array<int, num_fault_points> every{}; // 0: never; N > 0: one use in N fails
  int& operator[](fault_point p) { return every[static_cast<std::size_t>(p)]; }
  int operator[](fault_point p) const { return every[static_cast<std::size_t>(p)]; }
  bool any() const;
};

// Thrown at an armed fault point.
struct injected_fault : std::runtime_error {
  explicit injected_fault(fault_point p);
};

// Shared by the actors that hold a fault point (they run on different threads).
class fault_injector {
public:
  explicit fault_injector(fault_plan plan) : plan_(plan) {}

  // Counts one use of `p`; true when this use must fail.
  bool should_fail(fault_point p);
  // Throws injected_fault when this use of `p` must fail.
  void maybe_throw(fault_point p);
  // A tensor-parallel group's step or copy is one use, as one executor's is (its leader asks);
  // the k-th fault lands on rank k % ranks (the first on rank 1, one that follows), so that
  // each rank meets the point in turn. The rank that must fail this use, or -1.
  int fault_rank(fault_point p, int ranks);
  // Faults injected so far at `p`.
  std::uint64_t injected(fault_point p) const;

private:
  // Counts one use of `p`; the ordinal of the fault it makes (1, 2, ...), or 0.
  std::uint64_t count_use(fault_point p);

  fault_plan plan_;
  std::array<std::atomic<std::uint64_t>, num_fault_points> uses_{};
  std::array<std::atomic<std::uint64_t>, num_fault_points> injected_{};
};

// The same for an optional injector (null: the engine runs without faults).
inline void maybe_throw(fault_injector* faults, fault_point p) {
  if (faults != nullptr)
    faults->maybe_throw(p);
}
inline bool should_fail(fault_injector* faults, fault_point p) { return faults != nullptr && faults->should_fail(p); }
inline int fault_rank(fault_injector* faults, fault_point p, int ranks) {
  return faults != nullptr ? faults->fault_rank(p, ranks) : -1;
}

} // namespace troupe::runtime
