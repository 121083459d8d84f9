// How the ranks of a tensor-parallel group combine their partial results inside a step:
// the one interface the runners call, whatever carries the data (shared memory between the
// CPU backend's threads, NCCL or peer-to-peer loads between GPUs).
#pragma once

#include <span>
#include <stdexcept>
#include <string>

#include "runtime/shard_shape.hpp"

namespace troupe::runtime {

// What every call pending on an aborted group throws, and every later one until reset():
// another rank failed or stopped inside the step, and this one must not wait for it.
class collective_aborted : public std::runtime_error {
 public:
  explicit collective_aborted(const std::string& group)
      : std::runtime_error(group + " was aborted: another rank failed or stopped in this step") {}

 protected:
  // For a carrier's own kind of giving up (a device collective's timeout), said in its words.
  struct in_own_words {};
  collective_aborted(in_own_words, const std::string& what) : std::runtime_error(what) {}
};

// Each call is collective: every rank of the group makes the same calls in the same order
// with buffers of matching sizes (as with NCCL), and a rank that skips one stalls the others.
// The CPU implementation works on host memory and returns when the result is there; a device
// implementation reads and writes device memory and queues its work on the stream it was made
// with, so the same runner code reads the same on either backend.
class collective {
 public:
  virtual ~collective() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;

  // Every rank passes a buffer of the same length; on return each holds the elementwise sum of
  // all the ranks' buffers, with the same bits on every rank.
  virtual void all_reduce_sum(std::span<float> data) = 0;

  // A [rows, columns] matrix split by columns among the ranks (the vocab-parallel LM head's
  // logits): this rank holds its columns [column_begin, column_begin + local.size() / rows) as
  // local [rows, local columns]; on return whole [rows, columns] holds every rank's columns.
  // The ranks' widths may differ (a vocabulary that does not divide).
  virtual void all_gather_columns(std::span<const float> local, int rows, int column_begin, std::span<float> whole) = 0;

  // Ends the group's step on every rank: each call pending on any rank, and each later one,
  // throws collective_aborted until reset() (a call that every rank has entered completes). Any thread may call it, any
  // number of times; a rank that fails inside a step calls it so that the others do not wait for it forever.
  virtual void abort() = 0;
  // Re-arms the whole group after an abort. Only while no rank is inside a call: the step's
  // ranks have all returned, or the actors that ran them are gone.
  virtual void reset() = 0;
};

// A runner's place in a tensor-parallel group: the share of the model it holds and the group
// it meets the other ranks through (not owned; it outlives the runner).
struct tensor_parallel_rank {
  shard_shape shard;
  collective* group = nullptr;
};

} // namespace troupe::runtime
