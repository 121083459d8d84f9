// How the rest of troupe asks for the CUDA backend without seeing CUDA: the runner's
// options (cuda_runner_options.hpp), the memory plan it settles on (runtime/cuda_memory_plan.hpp),
// and the factory. Builds everywhere; in a build without CUDA the factory throws "built
// without CUDA" (cuda_runner_factory_stub.cpp).
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "runtime/cuda/cuda_runner_options.hpp"
#include "runtime/cuda_memory_plan.hpp"
#include "runtime/model_config.hpp"
#include "runtime/model_runner.hpp"
#include "runtime/model_weights.hpp"
#include "runtime/shard_shape.hpp"

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

// One rank's weights: the slices of its shard (shard_weights of a loaded model, or a loader
// that reads only the slices). Called on the rank's own thread.
using shard_weight_source = std::function<model_weights(const shard_shape&)>;

// The tensor-parallel ranks of one model, rank r on devices[r] (devices.size() ranks, 1..8);
// a device may repeat, and the ranks that share it meet through peer loads (a test of the
// sharded step on one GPU; their KV pools cannot be sized from memory one after another, so
// options.num_blocks must be set). Each rank is built on a thread of its own (a rank's set-up
// runs its collectives) with options.device = devices[r]; weights(shard) is not called with
// options.dummy_weights. Every rank's pool gets the same blocks (the fewest any device fits).
// Throws as make_cuda_model_runner, and std::invalid_argument naming the numbers for a width
// the model or the devices cannot serve. `plans`, when given, receives each rank's plan.
std::vector<std::unique_ptr<model_runner>> make_cuda_rank_runners(const model_config& config,
                                                                  const shard_weight_source& weights,
                                                                  const cuda_runner_options& options,
                                                                  const std::vector<int>& devices,
                                                                  std::vector<cuda_memory_plan>* plans = nullptr);

} // namespace troupe::runtime
