// The peer collectives as three kernels each: stage (copy this rank's part into its staging
// buffer of this call), barrier (one block: count the call, tell every rank this one arrived,
// wait until every rank has), then read every rank's stage. The stage and the read pick the
// buffer from the device's barrier count, not from the host, so a graph replays them right.
//
// Memory order: the barrier's signal is a release store at system scope after a system fence,
// its wait an acquire load at system scope; the stage before it and the read after it are
// separate kernels on the same stream, and the read loads with .cg (through L2, past L1) so that
// it never sees a line cached before another rank wrote it.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kernels/cuda/numeric.cuh"
#include "kernels/cuda/peer_collective.hpp"

namespace troupe::kernels::cuda {

namespace {

constexpr int threads = 256;

__device__ __forceinline__ void store_release(std::uint64_t* p, std::uint64_t v) {
  asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
__device__ __forceinline__ std::uint64_t load_acquire(const std::uint64_t* p) {
  std::uint64_t v;
  asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ std::uint64_t global_ns() {
  std::uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// The buffer of the call about to meet (before its barrier) or that met (after it).
__device__ __forceinline__ int staging_before(const peer_group_view& g) {
  return static_cast<int>((*g.barriers + 1) & 1);
}
__device__ __forceinline__ int staging_after(const peer_group_view& g) {
  return static_cast<int>(*g.barriers & 1);
}

__global__ void stage_kernel(peer_group_view g, const std::byte* __restrict__ src, std::size_t bytes) {
  std::byte* dst = g.stage[g.rank][staging_before(g)];
  const std::size_t packs = bytes / 16, stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  const std::size_t first = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (std::size_t i = first; i < packs; i += stride)
    reinterpret_cast<uint4*>(dst)[i] = reinterpret_cast<const uint4*>(src)[i];
  for (std::size_t i = packs * 16 + first; i < bytes; i += stride)
    dst[i] = src[i];
}

// One block of max_peer_ranks threads; thread s signals rank s and waits for it.
__global__ void barrier_kernel(peer_group_view g) {
  __shared__ std::uint64_t entered;
  if (threadIdx.x == 0) {
    entered = *g.barriers + 1;
    *g.barriers = entered;
    __threadfence_system(); // the stage kernel's writes before anyone hears of them
  }
  __syncthreads();
  const int s = threadIdx.x;
  if (s >= g.ranks)
    return;
  store_release(g.arrivals[s] + g.rank, entered);
  const std::uint64_t start = global_ns();
  while (load_acquire(g.arrivals[g.rank] + s) < entered) {
    if (*g.abort != 0 || global_ns() - start > g.timeout_ns) {
      *g.gave_up = 1;
      return;
    }
  }
}

__device__ __forceinline__ float load_cg(const float* p) {
  return __ldcg(p);
}
__device__ __forceinline__ float load_cg(const __nv_bfloat16* p) {
  return __bfloat162float(__ushort_as_bfloat16(__ldcg(reinterpret_cast<const unsigned short*>(p))));
}
__device__ __forceinline__ float load_cg(const __half* p) {
  return __half2float(__ushort_as_half(__ldcg(reinterpret_cast<const unsigned short*>(p))));
}

template <class T>
__global__ void reduce_kernel(peer_group_view g, T* __restrict__ data, std::size_t count) {
  const int b = staging_after(g);
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += stride) {
    float sum = 0.0f;
    for (int s = 0; s < g.ranks; ++s)
      sum += load_cg(reinterpret_cast<const T*>(g.stage[s][b]) + i);
    data[i] = detail::from_float<T>(sum);
  }
}

// blockIdx.y is the rank whose columns the block places; `segments` (null: the ranks' stages)
// holds them one after another.
__global__ void place_columns_kernel(peer_group_view g, const float* __restrict__ segments, int rows,
                                     column_split split, float* __restrict__ whole, int columns) {
  const int s = blockIdx.y;
  const int width = split.width[s];
  const std::size_t n = static_cast<std::size_t>(rows) * width;
  const float* src;
  if (segments != nullptr) {
    std::size_t offset = 0;
    for (int r = 0; r < s; ++r)
      offset += static_cast<std::size_t>(rows) * split.width[r];
    src = segments + offset;
  } else {
    src = reinterpret_cast<const float*>(g.stage[s][staging_after(g)]);
  }
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const std::size_t row = i / width, c = i % width;
    whole[row * columns + split.begin[s] + c] = load_cg(src + i);
  }
}

unsigned blocks_for(std::size_t n) {
  const std::size_t b = (n + threads - 1) / threads;
  return static_cast<unsigned>(b < 1 ? 1 : b > 1024 ? 1024 : b);
}

// Stage `bytes` of src and meet the other ranks.
cudaError_t stage_and_meet(const peer_group_view& g, const void* src, std::size_t bytes, cudaStream_t stream) {
  if (bytes > g.stage_bytes || g.ranks < 1 || g.ranks > max_peer_ranks)
    return cudaErrorInvalidValue;
  if (bytes > 0) {
    stage_kernel<<<blocks_for(bytes / 16 + 1), threads, 0, stream>>>(g, static_cast<const std::byte*>(src), bytes);
    if (auto e = cudaGetLastError(); e != cudaSuccess)
      return e;
  }
  barrier_kernel<<<1, max_peer_ranks, 0, stream>>>(g);
  return cudaGetLastError();
}

std::size_t element_bytes(reduce_type t) {
  return t == reduce_type::f32 ? 4 : 2;
}

} // namespace

cudaError_t peer_all_reduce_sum(const peer_group_view& g, void* data, std::size_t count, reduce_type type,
                                cudaStream_t stream) {
  if (auto e = stage_and_meet(g, data, count * element_bytes(type), stream); e != cudaSuccess || count == 0)
    return e;
  switch (type) {
    case reduce_type::f32:
      reduce_kernel<<<blocks_for(count), threads, 0, stream>>>(g, static_cast<float*>(data), count);
      break;
    case reduce_type::bf16:
      reduce_kernel<<<blocks_for(count), threads, 0, stream>>>(g, static_cast<__nv_bfloat16*>(data), count);
      break;
    case reduce_type::f16:
      reduce_kernel<<<blocks_for(count), threads, 0, stream>>>(g, static_cast<__half*>(data), count);
      break;
  }
  return cudaGetLastError();
}

cudaError_t peer_all_gather_columns(const peer_group_view& g, const float* local, int rows, const column_split& split,
                                    float* whole, int columns, cudaStream_t stream) {
  if (split.ranks != g.ranks)
    return cudaErrorInvalidValue;
  const std::size_t mine = static_cast<std::size_t>(rows) * split.width[g.rank];
  if (auto e = stage_and_meet(g, local, mine * sizeof(float), stream); e != cudaSuccess || rows == 0)
    return e;
  int widest = 0;
  for (int s = 0; s < split.ranks; ++s)
    widest = split.width[s] > widest ? split.width[s] : widest;
  const dim3 grid(blocks_for(static_cast<std::size_t>(rows) * widest), static_cast<unsigned>(split.ranks));
  place_columns_kernel<<<grid, threads, 0, stream>>>(g, nullptr, rows, split, whole, columns);
  return cudaGetLastError();
}

cudaError_t scatter_column_segments(const float* segments, int rows, const column_split& split, float* whole,
                                    int columns, cudaStream_t stream) {
  if (rows == 0)
    return cudaSuccess;
  if (split.ranks < 1 || split.ranks > max_peer_ranks)
    return cudaErrorInvalidValue;
  int widest = 0;
  for (int s = 0; s < split.ranks; ++s)
    widest = split.width[s] > widest ? split.width[s] : widest;
  const dim3 grid(blocks_for(static_cast<std::size_t>(rows) * widest), static_cast<unsigned>(split.ranks));
  place_columns_kernel<<<grid, threads, 0, stream>>>(peer_group_view{}, segments, rows, split, whole, columns);
  return cudaGetLastError();
}

} // namespace troupe::kernels::cuda
