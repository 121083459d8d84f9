// Embedding gather (reference).
#include <algorithm>

#include "kernels/cpu/cpu_kernels.hpp"

namespace troupe::kernels::cpu {

void embedding(std::span<const std::int32_t> ids, std::span<const float> table, int dim, std::span<float> out) {
  for (std::size_t t = 0; t < ids.size(); ++t) {
    auto row = table.subspan(static_cast<std::size_t>(ids[t]) * dim, dim);
    std::copy(row.begin(), row.end(), out.begin() + t * dim);
  }
}

} // namespace troupe::kernels::cpu
