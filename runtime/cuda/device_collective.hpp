// How the CUDA ranks of a tensor-parallel group combine their partial results inside a step:
// the device-side counterpart of runtime/collective.hpp. The runner queues each call on its
// compute stream (inside CUDA graphs too) and checks failed() after the step's sync.
// Two carriers: direct loads of the other ranks' memory (kernels/cuda/peer_collective.hpp;
// ranks on one device, or small messages between peers) and NCCL (ranks on distinct devices).
#pragma once

#include <cuda_runtime.h>

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cuda/peer_collective.hpp"
#include "runtime/collective.hpp"
#include "runtime/shard_shape.hpp"

namespace troupe::runtime {

// A collective of the group gave up: a rank aborted the group, or a wait timed out.
// An executor treats it as any rank's collective_aborted: the rank did not fail of itself.
class device_collective_failed : public collective_aborted {
 public:
  explicit device_collective_failed(const std::string& what) : collective_aborted(in_own_words{}, what) {}
};

class device_collective {
 public:
  virtual ~device_collective() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual int device() const = 0;

  // Collective, on `stream` (this rank's device): every rank makes the same calls in the same
  // order. data[i] becomes the sum over the ranks of their data[i], the same bits on every rank.
  virtual cudaError_t all_reduce_sum(void* data, std::size_t count, kernels::cuda::reduce_type type,
                                     cudaStream_t stream) = 0;
  // The vocab-parallel logits: local is this rank's [rows, its vocab slice], whole receives
  // [rows, vocab] on every rank (the slices as shard_shapes cut them).
  virtual cudaError_t all_gather_vocab(const float* local, int rows, float* whole, cudaStream_t stream) = 0;

  // Host-side, collective: every rank passes a value and gets the smallest (the KV pool's
  // blocks, which must be the same on every rank). Blocks until every rank has called; throws
  // device_collective_failed if the group is aborted meanwhile.
  virtual int agree_min(int value) = 0;
  // Any rank, any thread: every collective of the group that waits, or will, gives up (and
  // failed() says so on each rank) until reset(). For a rank that failed inside a step, so
  // that the others do not wait for it forever.
  virtual void abort() = 0;
  // abort() as a callable that outlives this endpoint (for whoever builds the ranks: a rank
  // whose set-up fails destroys its endpoint while the others wait for it).
  virtual std::function<void()> abort_handle() const = 0;
  // Re-arms the group; call on one rank while no rank is inside a step.
  virtual void reset() = 0;
  // After the step's sync: whether one of this rank's collectives gave up since the last reset.
  virtual bool failed() const = 0;
};

struct device_group_options {
  // Bytes the peer path stages per call: the largest all-reduce (rows * hidden) or logits
  // slice (rows * vocab slice * 4) a step may need.
  std::size_t stage_bytes = 0;
  // Between ranks on distinct devices, calls of at most this many bytes go through peer loads
  // (when the devices reach each other), larger ones through NCCL. Ranks that share a device
  // use peer loads for every size.
  std::size_t peer_max_bytes = std::size_t{512} << 10;
  // A wait for another rank gives up after this long (the group is then failed()).
  std::chrono::milliseconds timeout{30000};
};

// One endpoint per rank, rank r on devices[r] (1..8 ranks; a device may repeat: those ranks
// share it). shards: shard_shapes(model, devices.size()). Throws std::invalid_argument naming
// the devices when one does not exist or two distinct ones cannot reach each other and NCCL
// cannot connect them, and kernels::cuda::cuda_error for CUDA failures.
std::vector<std::unique_ptr<device_collective>> make_device_group(const std::vector<int>& devices,
                                                                  const std::vector<shard_shape>& shards,
                                                                  const device_group_options& options);

// Ranks that share a GPU spin in a barrier kernel until the others arrive, so every kernel they
// wait for must reach the GPU meanwhile: each module loaded up front (CUDA_MODULE_LOADING=EAGER)
// and a hardware queue for each stream (CUDA_DEVICE_MAX_CONNECTIONS=32). Sets both for this
// process, as make_device_group requires them; call before CUDA starts (a static initializer).
bool set_shared_device_environment();

} // namespace troupe::runtime
