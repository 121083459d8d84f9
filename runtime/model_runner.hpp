// The backend interface: a model runner owns weights and the paged KV cache of
// one device and runs forward steps over a step_batch. The CPU runner is the
// fp32 reference; the CUDA runner implements the same interface.
#pragma once

#include <functional>
#include <memory>
#include <span>

#include "runtime/block_manager.hpp"
#include "runtime/device_sampling.hpp"
#include "runtime/kv_cache_config.hpp"
#include "runtime/model_config.hpp"
#include "runtime/step_batch.hpp"

namespace troupe::runtime {

// Which pools a block copy reads and writes.
enum class kv_copy { device_to_host, host_to_device, device_to_device };

class model_runner {
 public:
  virtual ~model_runner() = default;
  virtual const model_config& config() const = 0;
  virtual const kv_cache_config& cache_config() const = 0;
  // Runs the model over batch, writes its K/V into the cache at slot_mapping, and
  // writes the logits of batch.logits_rows into logits [rows, vocab_size] (fp32).
  virtual void execute(const step_batch& batch, std::span<float> logits) = 0;
  // Sampling where the logits are: a runner that samples_on_device(rows) runs the step and
  // draws one token per logits row on its device (penalties, cuts, draw, log-probabilities:
  // runtime::sample_on_host is the reference), so that the logits never leave it. rows[i]
  // holds logits row i's parameters; tokens receives one id per row; logprobs is empty, or
  // has one entry per row and receives those of the rows that ask. Runners that cannot
  // throw std::logic_error.
  virtual bool samples_on_device(std::span<const device_sample> rows) const {
    (void)rows;
    return false;
  }
  // before_draw, when set, runs once on the caller's thread after the forward pass is queued
  // and before the rows are read: the caller finishes its rows there (a constrained row's
  // banned ids, device_sample::constrained) while the device computes. rows must alias memory
  // the caller may write.
  virtual void execute_sampled(const step_batch& batch, std::span<const device_sample> rows,
                               std::span<token_id> tokens, std::span<token_logprobs> logprobs,
                               const std::function<void()>& before_draw = {});
  // A tensor-parallel rank that does not lead: runs the step's forward pass (its K/V into its
  // heads of the cache), meeting the other ranks in its collectives; its logits go nowhere.
  // Runners that are no such rank throw std::logic_error.
  virtual void follow_step(const step_batch& batch);
  // A tensor-parallel rank's group, whatever carries its collectives (no-ops for a runner that
  // is no rank). abort_group(): every rank's pending and later collectives give up (their
  // steps throw collective_aborted) until reset_group(); any thread, any number of times, for
  // a rank that failed or died inside a step. reset_group() re-arms the whole group: call it
  // on one rank while no rank is inside a step.
  virtual void abort_group() {}
  virtual void reset_group() {}
  // Copies whole blocks (every layer, K and V) between or within the tiers.
  virtual void copy_blocks(kv_copy kind, std::span<const block_copy> pairs) = 0;
  // Bytes one block holds over all layers, K and V (swap traffic accounting).
  virtual std::size_t block_bytes() const = 0;
};

// Validates a step_batch against the cache geometry before a runner touches
// memory with it: a bad block id or slot is a logic error upstream, and must
// not become an out-of-bounds write. Throws std::logic_error naming the field.
void check_step_batch(const step_batch& batch, const kv_cache_config& cache, int vocab_size);

} // namespace troupe::runtime
