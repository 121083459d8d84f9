// Built instead of the CUDA runner when troupe is built without CUDA.
#include <stdexcept>

#include "runtime/cuda/cuda_runner_factory.hpp"

namespace troupe::runtime {

std::unique_ptr<model_runner> make_cuda_model_runner(const model_config&, const model_weights&,
                                                     const cuda_runner_options&, cuda_memory_plan*) {
  throw std::runtime_error(
      "the CUDA backend is not available: troupe was built without CUDA "
      "(configure with -DTROUPE_CUDA=ON on a machine with nvcc)");
}

std::vector<std::unique_ptr<model_runner>> make_cuda_rank_runners(const model_config&, const shard_weight_source&,
                                                                  const cuda_runner_options&, const std::vector<int>&,
                                                                  std::vector<cuda_memory_plan>*) {
  throw std::runtime_error(
      "the CUDA backend is not available: troupe was built without CUDA "
      "(configure with -DTROUPE_CUDA=ON on a machine with nvcc)");
}

} // namespace troupe::runtime
