// How the rest of troupe asks for the CUDA backend without seeing CUDA: the runner's
// options (cuda_runner_options.hpp), the memory plan it settles on (runtime/cuda_memory_plan.hpp),
// and the factory. Builds everywhere; in a build without CUDA the factory throws "built
// without CUDA" (cuda_runner_factory_stub.cpp).
#pragma once

#include <memory>

#include "runtime/cuda/cuda_runner_options.hpp"
#include "runtime/cuda_memory_plan.hpp"
#include "runtime/model_config.hpp"
#include "runtime/model_runner.hpp"
#include "runtime/model_weights.hpp"

namespace troupe::runtime {

// Uploads `weights` converted to options.dtype (or makes dummy ones, see
// cuda_runner_options::dummy_weights), sizes and allocates the activations and
// the KV pools, and returns the runner. Throws std::invalid_argument for options it
// cannot serve, kernels::cuda::cuda_error / cublas_error for CUDA failures, and
// std::runtime_error("... built without CUDA ...") in a build without CUDA.
// `plan`, when given, receives what was allocated.
std::unique_ptr<model_runner> make_cuda_model_runner(const model_config& config, const model_weights& weights,
                                                     const cuda_runner_options& options,
                                                     cuda_memory_plan* plan = nullptr);

} // namespace troupe::runtime
