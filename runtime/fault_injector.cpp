#include "runtime/fault_injector.hpp"

namespace troupe::runtime {

std::string_view to_string(fault_point p) {
  switch (p) {
    case fault_point::executor_step: return "executor step";
    case fault_point::executor_crash: return "executor crash";
    case fault_point::swap_copy: return "swap copy";
    case fault_point::draft: return "draft proposal";
    case fault_point::draft_crash: return "draft crash";
    case fault_point::tokenizer: return "tokenizer";
  }
  return "unknown";
}

bool fault_plan::any() const {
  for (int n : every)
    if (n > 0)
      return true;
  return false;
}

injected_fault::injected_fault(fault_point p) : std::runtime_error("injected fault: " + std::string(to_string(p))) {}

std::uint64_t fault_injector::count_use(fault_point p) {
  const auto i = static_cast<std::size_t>(p);
  const int n = plan_.every[i];
  if (n <= 0)
    return 0;
  const auto use = uses_[i].fetch_add(1, std::memory_order_relaxed) + 1;
  if (use % static_cast<std::uint64_t>(n) != 0)
    return 0;
  return injected_[i].fetch_add(1, std::memory_order_relaxed) + 1;
}

bool fault_injector::should_fail(fault_point p) {
  return count_use(p) != 0;
}

int fault_injector::fault_rank(fault_point p, int ranks) {
  const auto k = count_use(p);
  return k == 0 ? -1 : static_cast<int>(k % static_cast<std::uint64_t>(ranks));
}

void fault_injector::maybe_throw(fault_point p) {
  if (should_fail(p))
    throw injected_fault(p);
}

std::uint64_t fault_injector::injected(fault_point p) const {
  return injected_[static_cast<std::size_t>(p)].load(std::memory_order_relaxed);
}

} // namespace troupe::runtime
