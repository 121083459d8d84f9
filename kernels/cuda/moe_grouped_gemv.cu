// The experts' GEMV: gemv.cu's weight stream with a second grid dimension of chunk slots. Block
// (x, s) computes output rows of block x for the s-th chunk of the batch, a chunk being up to
// moe_chunk_rows consecutive entries of one expert; each warp finds its chunk from expert_offsets
// (a lane per up to 16 experts, a warp scan of their chunk counts), so no table is written between
// moe_align and here. `split` warps share an output row (gemv_split of k, never of the batch);
// each lane walks its 16-byte weight vectors in rounds of `unroll` loads, with the chunk's rows
// of xs read at the same offsets through L1. Where k or the pointers do not allow 16-byte vectors,
// the same kernel runs on single elements.
// The expert's weights are only known once expert_offsets is, which a kernel ahead may still be
// writing: the kernel waits for it before its first weight load (unlike gemv.cu).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "kernels/cuda/dependent_launch.cuh"
#include "kernels/cuda/element_pack.cuh"
#include "kernels/cuda/gemv.hpp"
#include "kernels/cuda/moe.hpp"
#include "kernels/cuda/numeric.cuh"
#include "kernels/cuda/weight_stream.cuh"

namespace troupe::kernels::cuda {

namespace {
constexpr int min_block_warps = 2;
constexpr int max_block_warps = gemv_max_split;
constexpr int max_grid_slots = 65535;
constexpr int experts_per_lane = (moe_max_experts + 31) / 32;

// V elements of T as one load: 16 bytes of weights kept out of L1, or one element.
template <class T, int V>
__device__ __forceinline__ detail::element_pack<T, V> load_weights(const detail::element_pack<T, V>* p) {
  if constexpr (sizeof(T) * V == 16) {
    const uint4 v = detail::load_streaming(reinterpret_cast<const uint4*>(p));
    return *reinterpret_cast<const detail::element_pack<T, V>*>(&v);
  } else {
    static_assert(V == 1, "a narrower load is one element");
    detail::element_pack<T, V> one;
    one.e[0] = __ldg(p->e);
    return one;
  }
}

// The dot product of two pairs of bf16 or fp16 packed in 32-bit words, added to acc in fp32, the
// lower element first (as gemv.cu: a bf16 widens by a shift or a mask). Kept on the words rather
// than element by element: the element-wise form took ~100 registers at one or two rows (ptxas).
template <class T>
__device__ __forceinline__ float dot2(std::uint32_t a, std::uint32_t b, float acc) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    acc = fmaf(__uint_as_float(a << 16), __uint_as_float(b << 16), acc);
    return fmaf(__uint_as_float(a & 0xffff0000u), __uint_as_float(b & 0xffff0000u), acc);
  } else {
    const float2 fa = __half22float2(*reinterpret_cast<const __half2*>(&a));
    const float2 fb = __half22float2(*reinterpret_cast<const __half2*>(&b));
    return fmaf(fa.y, fb.y, fmaf(fa.x, fb.x, acc));
  }
}

// acc + w · x over a pack, in element order.
template <class T, int V>
__device__ __forceinline__ float dot(const detail::element_pack<T, V>& w, const detail::element_pack<T, V>& x,
                                     float acc) {
  if constexpr (sizeof(T) == 2 && V == 8) {
    const uint4 a = *reinterpret_cast<const uint4*>(&w), b = *reinterpret_cast<const uint4*>(&x);
    acc = dot2<T>(a.x, b.x, acc);
    acc = dot2<T>(a.y, b.y, acc);
    acc = dot2<T>(a.z, b.z, acc);
    return dot2<T>(a.w, b.w, acc);
  } else {
#pragma unroll
    for (int i = 0; i < V; ++i)
      acc = fmaf(detail::to_float(w.e[i]), detail::to_float(x.e[i]), acc);
    return acc;
  }
}

struct chunk {
  int expert, first_row, rows; // rows == 0: no chunk for this slot
};

// The slot-th chunk of the batch, chunks ordered by expert and, within one, by row. Every lane gets it.
__device__ __forceinline__ chunk find_chunk(const int* __restrict__ offsets, int experts, int slot) {
  const int lane = threadIdx.x & 31;
  const int per_lane = (experts + 31) / 32;
  const int e0 = lane * per_lane;
  int o[experts_per_lane + 1];
#pragma unroll
  for (int j = 0; j <= experts_per_lane; ++j)
    o[j] = j <= per_lane && e0 + j <= experts ? offsets[e0 + j] : 0;
  int local = 0;
#pragma unroll
  for (int j = 0; j < experts_per_lane; ++j)
    if (j < per_lane && e0 + j < experts)
      local += (o[j + 1] - o[j] + moe_chunk_rows - 1) / moe_chunk_rows;
  int inclusive = local;
#pragma unroll
  for (int offset = 1; offset < 32; offset *= 2) {
    const int up = __shfl_up_sync(0xffffffffu, inclusive, offset);
    if (lane >= offset)
      inclusive += up;
  }
  const int exclusive = inclusive - local;
  const unsigned owners = __ballot_sync(0xffffffffu, exclusive <= slot && slot < inclusive);
  if (owners == 0)
    return {0, 0, 0};
  const int owner = __ffs(owners) - 1;
  chunk c{0, 0, 0};
  if (lane == owner) {
    int before = exclusive;
#pragma unroll
    for (int j = 0; j < experts_per_lane; ++j) {
      if (j < per_lane && e0 + j < experts && c.rows == 0) {
        const int count = o[j + 1] - o[j];
        const int chunks = (count + moe_chunk_rows - 1) / moe_chunk_rows;
        if (slot < before + chunks) {
          c.expert = e0 + j;
          c.first_row = o[j] + (slot - before) * moe_chunk_rows;
          c.rows = min(moe_chunk_rows, o[j + 1] - c.first_row);
        }
        before += chunks;
      }
    }
  }
  return {__shfl_sync(0xffffffffu, c.expert, owner), __shfl_sync(0xffffffffu, c.first_row, owner),
          __shfl_sync(0xffffffffu, c.rows, owner)};
}

// Up to M rows a chunk (the chunk's actual count masks the rest: a row's sum is the same at any M),
// `unroll` loads of V elements in flight per lane. Warp part p of an output row takes the row's
// vectors p * 32 + lane + i * 32 * split, in order of i.
template <class T, int V, int M, int unroll>
__global__ void __launch_bounds__(max_block_warps * 32)
    grouped_gemv_kernel(const T* __restrict__ xs, const T* __restrict__ w, const int* __restrict__ offsets, int experts,
                        int first_slot, int n, int k, int split, T* __restrict__ ys) {
  using pack = detail::element_pack<T, V>;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int rows_per_block = (blockDim.x >> 5) / split;
  const int row = blockIdx.x * rows_per_block + warp / split, part = warp % split;
  const int vectors = k / V;
  const int first = 32 * part + lane, stride = 32 * split;

  detail::wait_for_previous_kernels(); // expert_offsets and xs
  const chunk c = find_chunk(offsets, experts, first_slot + static_cast<int>(blockIdx.y));
  if (c.rows == 0)
    return; // the whole block: its slot is past the batch's chunks
  const pack* w_row =
      reinterpret_cast<const pack*>(w) + (static_cast<std::size_t>(c.expert) * n + (row < n ? row : n - 1)) * vectors;
  const pack* x = reinterpret_cast<const pack*>(xs) + static_cast<std::size_t>(c.first_row) * vectors;

  float acc[M];
#pragma unroll
  for (int m = 0; m < M; ++m)
    acc[m] = 0.0f;
  for (int base = first; base < vectors; base += stride * unroll) {
    pack wv[unroll];
#pragma unroll
    for (int u = 0; u < unroll; ++u) {
      const int v = base + stride * u;
      wv[u] = v < vectors ? load_weights(w_row + v) : pack{};
    }
#pragma unroll
    for (int u = 0; u < unroll; ++u) {
      const int v = base + stride * u;
      if (v < vectors) {
#pragma unroll
        for (int m = 0; m < M; ++m)
          if (m < c.rows)
            acc[m] = dot(wv[u], x[static_cast<std::size_t>(m) * vectors + v], acc[m]);
      }
    }
  }
#pragma unroll
  for (int m = 0; m < M; ++m)
    acc[m] = detail::warp_sum(acc[m]);

  if (split > 1) { // the same for the whole block
    __shared__ float parts[max_block_warps][M];
    if (lane == 0) {
#pragma unroll
      for (int m = 0; m < M; ++m)
        parts[warp][m] = acc[m];
    }
    __syncthreads();
    if (part == 0 && lane == 0) {
      for (int p = 1; p < split; ++p) {
#pragma unroll
        for (int m = 0; m < M; ++m)
          acc[m] += parts[warp + p][m];
      }
    }
  }
  if (row < n && part == 0 && lane == 0) {
#pragma unroll
    for (int m = 0; m < M; ++m)
      if (m < c.rows)
        ys[(static_cast<std::size_t>(c.first_row) + m) * n + row] = detail::from_float<T>(acc[m]);
  }
}

template <class T, int V, int M>
cudaError_t launch(const T* xs, const T* w, const int* offsets, int experts, int slots, int n, int k, T* ys,
                   cudaStream_t stream) {
  // As gemv.cu: 8 loads in flight a lane at up to two rows, 4 as more rows take registers.
  constexpr int unroll = M <= 2 ? 8 : 4;
  const int split = gemv_split(k / V * 8); // gemv_split counts 8-element vectors
  const int block_warps = split > min_block_warps ? split : min_block_warps;
  const int rows_per_block = block_warps / split;
  for (int first = 0; first < slots; first += max_grid_slots) {
    cudaLaunchConfig_t config{};
    config.gridDim = dim3(static_cast<unsigned>((n + rows_per_block - 1) / rows_per_block),
                          static_cast<unsigned>(slots - first < max_grid_slots ? slots - first : max_grid_slots));
    config.blockDim = dim3(static_cast<unsigned>(block_warps * 32));
    config.stream = stream;
    cudaLaunchAttribute attribute{};
    attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attribute.val.programmaticStreamSerializationAllowed = 1;
    config.attrs = &attribute;
    config.numAttrs = 1;
    if (auto err = cudaLaunchKernelEx(&config, grouped_gemv_kernel<T, V, M, unroll>, xs, w, offsets, experts, first, n,
                                      k, split, ys);
        err != cudaSuccess)
      return err;
  }
  return cudaSuccess;
}

template <class T, int V>
cudaError_t by_rows(const T* xs, const T* w, const int* offsets, int experts, int entries, int n, int k, T* ys,
                    cudaStream_t stream) {
  // Slots: sum over experts of ceil(count / R) <= (entries + used experts * (R - 1)) / R.
  constexpr int r = moe_chunk_rows;
  const long long used = experts < entries ? experts : entries;
  const int slots = static_cast<int>((entries + used * (r - 1)) / r);
  // A chunk holds at most min(entries, R) rows: the kernel with the fewest accumulators that fits.
  const int most = entries < r ? entries : r;
  static_assert(moe_chunk_rows == 8, "one instantiation per power of two up to the chunk");
  if (most == 1)
    return launch<T, V, 1>(xs, w, offsets, experts, slots, n, k, ys, stream);
  if (most == 2)
    return launch<T, V, 2>(xs, w, offsets, experts, slots, n, k, ys, stream);
  if (most <= 4)
    return launch<T, V, 4>(xs, w, offsets, experts, slots, n, k, ys, stream);
  return launch<T, V, 8>(xs, w, offsets, experts, slots, n, k, ys, stream);
}
} // namespace

template <class T>
cudaError_t moe_grouped_gemv(const T* xs, const T* w, const int* expert_offsets, int experts, int entries, int n, int k,
                             T* ys, cudaStream_t stream) {
  if (experts < 1 || experts > moe_max_experts || entries < 0 || n < 0 || k < 1)
    return cudaErrorInvalidValue;
  if (entries == 0 || n == 0)
    return cudaSuccess;
  constexpr int wide = 16 / static_cast<int>(sizeof(T));
  const auto address = [](const void* p) { return reinterpret_cast<std::uintptr_t>(p); };
  if (k % wide == 0 && (address(xs) | address(w)) % 16 == 0)
    return by_rows<T, wide>(xs, w, expert_offsets, experts, entries, n, k, ys, stream);
  return by_rows<T, 1>(xs, w, expert_offsets, experts, entries, n, k, ys, stream);
}

#define TROUPE_INSTANTIATE(T) \
  template cudaError_t moe_grouped_gemv<T>(const T*, const T*, const int*, int, int, int, int, T*, cudaStream_t);
TROUPE_INSTANTIATE(float)
TROUPE_INSTANTIATE(__nv_bfloat16)
TROUPE_INSTANTIATE(__half)
#undef TROUPE_INSTANTIATE

} // namespace troupe::kernels::cuda
