// The CPU backend's collective: the ranks of a tensor-parallel group are threads of one
// process and meet at a barrier (one that abort() opens), reading each other's buffers directly.
#pragma once

#include <memory>
#include <vector>

#include "runtime/collective.hpp"

namespace troupe::runtime {

// One collective per rank, rank 0 first, for `ranks` threads of this process; each thread
// uses only its own. The sum is taken in rank order (rank 0 + rank 1 + ...) for every
// element, so every rank gets the same bits and the result does not depend on which thread
// arrives first. abort() and reset() on any member act on the whole group. Throws
// std::invalid_argument when ranks < 1.
std::vector<std::unique_ptr<collective>> make_shared_memory_group(int ranks);

} // namespace troupe::runtime
