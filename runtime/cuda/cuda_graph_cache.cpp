// CUDA graphs of the runner's decode steps: the padded sizes, their inputs, capture and replay.
#include "runtime/cuda/cuda_graph_cache.hpp"

#include <algorithm>
#include <cstring>
#include <string>

#include "kernels/cuda/cuda_check.hpp"
#include "runtime/cuda_memory_plan.hpp" // round_up

namespace troupe::runtime {

namespace kc = kernels::cuda;

// A graph fixes every pointer and size its kernels were launched with. The pointers are
// the runner's own buffers (weights, activations, KV pools, GEMM workspace, and the graph
// inputs below), allocated once; the sizes are the padded batch size and the table width
// (max_blocks_per_seq: the attention kernels plan their split-K partitions for that context).
// Padding sequences have one token at position 0 with slot -1 (nothing is written to the
// cache) reading block 0: their rows are computed and ignored.

void cuda_graph_cache::plan(int max_seqs, int table_width) {
  for (int size : {1, 2, 4, 8, 12, 16, 24, 32})
    if (size < max_seqs)
      sizes_.push_back(size);
  for (int size = 48; size < max_seqs; size += 16)
    sizes_.push_back(size);
  sizes_.push_back(max_seqs);
  graphs_.resize(sizes_.size());
  table_width_ = table_width;
  const std::size_t g = max_seqs;
  const std::size_t slots = 0, tokens = slots + round_up(g * 8, 16), positions = tokens + round_up(g * 4, 16),
                    logits_rows = positions + round_up(g * 4, 16), query_start = logits_rows + round_up(g * 4, 16);
  tables_offset_ = query_start + round_up((g + 1) * 4, 16);
  const std::size_t total = tables_offset_ + g * table_width * 4;
  inputs_host_ = kc::pinned_buffer<std::byte>(total);
  inputs_device_ = kc::device_buffer<std::byte>(total);
  std::memset(inputs_host_.data(), 0, total);
  // Block 0 wherever a table entry is never written: a valid block, should anything read it.
  kc::check(cudaMemset(inputs_device_.data(), 0, total), "cudaMemset (graph inputs)");
  // One token per sequence: sequence i is row i, and every row gets logits.
  auto* host_rows = reinterpret_cast<std::int32_t*>(inputs_host_.data() + logits_rows);
  auto* host_starts = reinterpret_cast<std::int32_t*>(inputs_host_.data() + query_start);
  for (std::size_t i = 0; i <= g; ++i) {
    if (i < g)
      host_rows[i] = static_cast<std::int32_t>(i);
    host_starts[i] = static_cast<std::int32_t>(i);
  }
  const std::byte* d = inputs_device_.data();
  auto i32 = [&](std::size_t offset) { return reinterpret_cast<const std::int32_t*>(d + offset); };
  in_ = {reinterpret_cast<const std::int64_t*>(d + slots),
         i32(tokens),
         i32(positions),
         i32(query_start),
         i32(tables_offset_),
         i32(logits_rows)};
}

int cuda_graph_cache::slot(const step_batch& b) const {
  const std::size_t n = b.num_seqs();
  if (sizes_.empty() || paused_ || !error_.empty() || n == 0 || b.num_tokens() != n ||
      n > static_cast<std::size_t>(sizes_.back()) || b.max_blocks_per_seq > table_width_ || b.logits_rows.size() != n)
    return -1;
  for (std::size_t i = 0; i < n; ++i)
    if (b.logits_rows[i] != static_cast<std::int32_t>(i) || b.query_start[i + 1] != static_cast<std::int32_t>(i + 1))
      return -1;
  const auto it = std::lower_bound(sizes_.begin(), sizes_.end(), static_cast<int>(n));
  return static_cast<int>(it - sizes_.begin());
}

void cuda_graph_cache::replay(const step_batch& b, int slot, cudaStream_t stream, cuda_step_status& status) {
  const int n = static_cast<int>(b.num_seqs()), padded = sizes_[slot], width = table_width_;
  std::byte* host = inputs_host_.data();
  auto* slots = reinterpret_cast<std::int64_t*>(
      host + (reinterpret_cast<const std::byte*>(in_.slot_mapping) - inputs_device_.data()));
  auto at = [&](const std::int32_t* device) {
    return reinterpret_cast<std::int32_t*>(host + (reinterpret_cast<const std::byte*>(device) - inputs_device_.data()));
  };
  std::int32_t *tokens = at(in_.token_ids), *positions = at(in_.positions), *tables = at(in_.block_tables);
  for (int i = 0; i < padded; ++i) {
    const bool real = i < n;
    slots[i] = real ? b.slot_mapping[i] : -1;
    tokens[i] = real ? b.token_ids[i] : 0;
    positions[i] = real ? b.positions[i] : 0;
    std::int32_t* row = tables + static_cast<std::size_t>(i) * width;
    if (real)
      std::copy_n(b.block_tables.begin() + static_cast<std::size_t>(i) * b.max_blocks_per_seq, b.max_blocks_per_seq,
                  row);
    else
      row[0] = 0;
  }
  // The arrays before the tables, then only the table columns this step uses: the kernels read
  // a sequence's table only up to its position's block, never the stale entries past it.
  const std::size_t columns = std::max(b.max_blocks_per_seq, 1) * sizeof(std::int32_t),
                    pitch = static_cast<std::size_t>(width) * sizeof(std::int32_t);
  if (cudaError_t e = cudaMemcpyAsync(inputs_device_.data(), host, tables_offset_, cudaMemcpyHostToDevice, stream);
      e != cudaSuccess) {
    status = {static_cast<int>(e), "cudaMemcpyAsync (graph step inputs)", false};
    return;
  }
  if (cudaError_t e = cudaMemcpy2DAsync(inputs_device_.data() + tables_offset_, pitch, host + tables_offset_, pitch,
                                        columns, padded, cudaMemcpyHostToDevice, stream);
      e != cudaSuccess) {
    status = {static_cast<int>(e), "cudaMemcpy2DAsync (graph step block tables)", false};
    return;
  }
  if (cudaError_t e = graphs_[slot].launch(stream); e != cudaSuccess) {
    status = {static_cast<int>(e), "cudaGraphLaunch", false};
    return;
  }
  ++replays_;
}

// Every size is captured when the runner is built, as vLLM does, so that no request's step
// pays for a capture. The inputs are padding rows only: slot -1 writes no KV, and each row
// attends to position 0 of block 0 (memory that exists; the logits are never read).
void cuda_graph_cache::capture_all(cudaStream_t stream, const forward_pass& forward) {
  std::byte* host = inputs_host_.data();
  auto* slots = reinterpret_cast<std::int64_t*>(
      host + (reinterpret_cast<const std::byte*>(in_.slot_mapping) - inputs_device_.data()));
  std::fill_n(slots, sizes_.back(), std::int64_t{-1});
  // Token ids, positions and block tables stay 0 from plan(); logits rows and query
  // starts hold their fixed values there too.
  // On the capturing stream: a copy on the legacy stream would not be ordered before the warm-ups
  // (the runner's streams are non-blocking).
  kc::check(cudaMemcpyAsync(inputs_device_.data(), host, inputs_host_.bytes(), cudaMemcpyHostToDevice, stream),
            "cudaMemcpyAsync (graph capture inputs)");
  // Every size once kernel by kernel first: it loads every kernel and plans every GEMM of these
  // shapes, which capture must not do. All of them before any capture: a tensor-parallel rank's
  // warm-ups meet the other ranks, and a capture's instantiation may wait for the whole device,
  // which on a GPU the ranks share would wait for ranks that wait for this one.
  auto shape_of = [&](std::size_t slot) {
    const int n = sizes_[slot];
    return cuda_step_shape{n, n, table_width_, n, 1, 1};
  };
  std::size_t warmed = 0;
  std::string warm_up_error; // the sizes warmed before it are still captured
  for (; warmed < sizes_.size(); ++warmed) {
    cuda_step_status status;
    forward(shape_of(warmed), in_, status);
    if (cudaError_t e = cudaStreamSynchronize(stream); status.ok() && e != cudaSuccess)
      status = {static_cast<int>(e), "cudaStreamSynchronize (before capture)", false};
    if (!status.ok()) {
      warm_up_error =
          "decode step of batch " + std::to_string(sizes_[warmed]) + " before capture: " + status.what + " failed";
      break;
    }
  }
  for (std::size_t slot = 0; slot < warmed && error_.empty(); ++slot)
    capture(static_cast<int>(slot), shape_of(slot), stream, forward);
  if (error_.empty())
    error_ = warm_up_error;
  // This stream only: another rank on this GPU may be capturing, and a device-wide sync would break it.
  kc::check(cudaStreamSynchronize(stream), "cudaStreamSynchronize (graph capture)");
}

void cuda_graph_cache::capture(int slot, const cuda_step_shape& shape, cudaStream_t stream,
                               const forward_pass& forward) {
  // Thread-local mode: only this thread's unsafe calls would break the capture.
  cuda_step_status status;
  cudaGraph_t graph = nullptr;
  cudaError_t e = cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal);
  if (e == cudaSuccess) {
    forward(shape, in_, status);
    e = cudaStreamEndCapture(stream, &graph); // always: it ends capture mode on the stream
  }
  const std::string where = "CUDA graph capture of a decode step of batch " + std::to_string(shape.seqs) + ": ";
  if (!status.ok() || e != cudaSuccess) {
    if (graph != nullptr)
      cudaGraphDestroy(graph);
    cudaGetLastError(); // capture errors are not sticky; clear the last-error slot for later checks
    error_ = where + (!status.ok() ? std::string(status.what) + " failed"
                                   : std::string(cudaGetErrorName(e)) + " (" + cudaGetErrorString(e) + ")");
    return;
  }
  try {
    graphs_[slot] = kc::cuda_graph(graph);
  } catch (const kc::cuda_error& error) {
    error_ = where + error.what();
  }
}

} // namespace troupe::runtime
