// A tensor-parallel group's all-reduce and all-gather by direct loads of the other ranks'
// memory: ranks on one device, or on devices with peer access. Each call stages this rank's
// part, meets the other ranks at a flag barrier and reads every rank's stage, all as kernels
// on the caller's stream with the barrier's count on the device, so that a CUDA graph can
// hold the calls and replay them. The small-message path of issue 38 (vLLM and SGLang call
// theirs "custom all-reduce"), and the only one for ranks that share a device (NCCL refuses
// two ranks on one GPU).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace troupe::kernels::cuda {

inline constexpr int max_peer_ranks = 8;

// The element type of a sum (fp32 accumulation whatever it is).
enum class reduce_type { f32, bf16, f16 };

// How a [rows, columns] fp32 matrix is split by columns among the ranks (the vocab-parallel
// LM head's logits): rank s holds columns [begin[s], begin[s] + width[s]).
struct column_split {
  int ranks = 1;
  int begin[max_peer_ranks] = {};
  int width[max_peer_ranks] = {};
};

// What one rank's kernels see of its group: device pointers valid on this rank's device.
struct peer_group_view {
  int rank = 0, ranks = 1;
  // Every rank's two staging buffers: call k stages into buffer k % 2, so that a rank may stage
  // its next call while a slower rank still reads this one.
  std::byte* stage[max_peer_ranks][2] = {};
  std::size_t stage_bytes = 0;
  // arrivals[s][r]: the last barrier rank r reached, written by r into rank s's memory.
  std::uint64_t* arrivals[max_peer_ranks] = {};
  std::uint64_t* barriers = nullptr; // the barriers this rank has entered (device)
  const volatile int* abort = nullptr; // mapped host memory: non-zero makes every wait give up
  int* gave_up = nullptr;              // mapped host memory: set when one of this rank's waits gave up
  std::uint64_t timeout_ns = 0;        // ...or when it waited this long
};

// data[i] = the sum over the ranks, in rank order, of their data[i], in fp32 rounded once to
// `type`: every rank ends with the same bits. count elements of `type`, at most the stage.
// cudaErrorInvalidValue when they do not fit; a wait that gives up sets *gave_up and leaves
// data unspecified (the caller checks after its sync).
cudaError_t peer_all_reduce_sum(const peer_group_view& group, void* data, std::size_t count, reduce_type type,
                                cudaStream_t stream);

// whole[row, split.begin[s] + c] = rank s's local[row, c] for every rank s: local is this
// rank's [rows, split.width[rank]], whole is [rows, columns].
cudaError_t peer_all_gather_columns(const peer_group_view& group, const float* local, int rows,
                                    const column_split& split, float* whole, int columns, cudaStream_t stream);

// The same layout from segments that sit one after another in one buffer, rank by rank, each
// [rows, split.width[s]] (what NCCL's broadcasts gather).
cudaError_t scatter_column_segments(const float* segments, int rows, const column_split& split, float* whole,
                                    int columns, cudaStream_t stream);

} // namespace troupe::kernels::cuda
