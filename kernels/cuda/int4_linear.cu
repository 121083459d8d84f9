// The INT4-weight GEMV on the tensor cores, and the dequantize kernel. A block is a tile of 16
// output rows, its `split` warps taking its 64-column vectors p, p + split, ...: each lane loads
// its 16 bytes of a vector (four k-steps of A fragments, int4_linear.hpp's layout) before any is
// used, codes kept out of L1. A register of two codes becomes two E by or-ing them into the
// mantissa of 1024 (fp16) or 128 (bf16), exactly, and losing that plus the row's zero in one
// subtraction (exact: an integer in [-15, 15]); the mma multiplies them with x (batch rows as the
// B fragment's 8 columns, twice for up to 16 rows) into fp32 sums that are scaled per group. The
// warps' sums meet in shared memory.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "kernels/cuda/dependent_launch.cuh"
#include "kernels/cuda/weight_stream.cuh"
#include "kernels/cuda/int4_linear.hpp"
#include "kernels/cuda/numeric.cuh"
#include "kernels/cuda/tensor_core.cuh"

namespace troupe::kernels::cuda {

namespace {
constexpr int max_split = 8;
constexpr int loads_in_flight = 4; // 16-byte vectors a lane requests before using the first


// E's pair {bias + zero, bias + zero}, where bias is the power of two whose mantissa the codes are
// or-ed into (1024 for fp16, 128 for bf16): subtracting it turns bias + code into code - zero.
template <class E>
__device__ __forceinline__ std::uint32_t zero_offset(float zero) {
  if constexpr (std::is_same_v<E, __nv_bfloat16>)
    return detail::bits(__float2bfloat162_rn(128.0f + zero));
  else
    return detail::bits(__float2half2_rn(1024.0f + zero));
}

// The two codes at bits `shift` and 16 + `shift` of a word, minus the zero, as a pair of E (the
// lower bits in the lower half).
template <class E>
__device__ __forceinline__ std::uint32_t pair_minus_zero(std::uint32_t word, int shift, std::uint32_t offset) {
  if constexpr (std::is_same_v<E, __nv_bfloat16>) {
    const std::uint32_t biased = ((word >> shift) & 0x000f000fu) | 0x43004300u; // bf16 128 + code, twice
    return detail::bits(__hsub2(*reinterpret_cast<const __nv_bfloat162*>(&biased),
                                *reinterpret_cast<const __nv_bfloat162*>(&offset)));
  } else {
    const std::uint32_t biased = ((word >> shift) & 0x000f000fu) | 0x64006400u; // fp16 1024 + code, twice
    return detail::bits(
        __hsub2(*reinterpret_cast<const __half2*>(&biased), *reinterpret_cast<const __half2*>(&offset)));
  }
}

template <class E>
__device__ __forceinline__ void mma(float (&c)[4], const std::uint32_t (&a)[4], std::uint32_t b0, std::uint32_t b1) {
  if constexpr (std::is_same_v<E, __nv_bfloat16>)
    detail::mma_bf16(c, a, b0, b1);
  else
    detail::mma_f16(c, a, b0, b1);
}

// One block a tile of 16 output rows; NT column tiles of 8 batch rows (m <= 8 NT).
template <int NT, class E, class Out>
__global__ void __launch_bounds__(max_split * 32)
    int4_gemv_kernel(const E* __restrict__ x, const uint4* __restrict__ codes, const float2* __restrict__ groups,
                     int group, const E* __restrict__ bias, Out* __restrict__ y, int m, int n, int k, int split) {
  const int lane = threadIdx.x & 31, part = threadIdx.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int tile = blockIdx.x;
  const int vectors = (k + int4_vector_columns - 1) / int4_vector_columns, ksteps = k / 16;
  const int group_ksteps = group / 16, groups_a_row = k / group;
  const uint4* tile_codes = codes + static_cast<std::size_t>(tile) * vectors * 32 + lane;
  const int row0 = tile * int4_tile_rows + g, row1 = row0 + 8;
  const float2* groups0 = groups + static_cast<std::size_t>(row0 < n ? row0 : n - 1) * groups_a_row;
  const float2* groups1 = groups + static_cast<std::size_t>(row1 < n ? row1 : n - 1) * groups_a_row;
  // x as pairs of E: batch row r, columns 2j, 2j + 1 at x2[r * k / 2 + j]. Lanes past m read none.
  const std::uint32_t* x2 = reinterpret_cast<const std::uint32_t*>(x);
  const int half_k = k / 2;

  // The first round of codes is requested before waiting on the kernel that wrote x: nothing
  // writes weights during a step (see gemv.cu).
  uint4 wv[loads_in_flight];
#pragma unroll
  for (int u = 0; u < loads_in_flight; ++u) {
    const int v = part + split * u;
    wv[u] = v < vectors ? detail::load_streaming(tile_codes + static_cast<std::size_t>(v) * 32) : make_uint4(0, 0, 0, 0);
  }
  detail::wait_for_previous_kernels();

  float acc[NT][4];
#pragma unroll
  for (int j = 0; j < NT; ++j)
    acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
  for (int base = part; base < vectors; base += split * loads_in_flight) {
    if (base > part) {
#pragma unroll
      for (int u = 0; u < loads_in_flight; ++u) {
        const int v = base + split * u;
        wv[u] = v < vectors ? detail::load_streaming(tile_codes + static_cast<std::size_t>(v) * 32) : make_uint4(0, 0, 0, 0);
      }
    }
#pragma unroll
    for (int u = 0; u < loads_in_flight; ++u) {
      const int v = base + split * u;
      if (v >= vectors)
        break;
      const std::uint32_t words[4] = {wv[u].x, wv[u].y, wv[u].z, wv[u].w};
      float sum[NT][4]; // this group's part of the vector, before its scale
      float2 s0 = make_float2(0.0f, 0.0f), s1 = s0;
      std::uint32_t off0 = 0, off1 = 0;
#pragma unroll
      for (int s = 0; s < 4; ++s) {
        const int ks = 4 * v + s;
        if (ks >= ksteps) // k padded to the vector: the rest of it holds no weights
          break;
        if (s == 0 || ks % group_ksteps == 0) { // a group starts: its scales, and fresh sums
          s0 = groups0[ks / group_ksteps];
          s1 = groups1[ks / group_ksteps];
          off0 = zero_offset<E>(s0.y);
          off1 = zero_offset<E>(s1.y);
#pragma unroll
          for (int j = 0; j < NT; ++j)
            sum[j][0] = sum[j][1] = sum[j][2] = sum[j][3] = 0.0f;
        }
        const std::uint32_t a[4] = {pair_minus_zero<E>(words[s], 0, off0), pair_minus_zero<E>(words[s], 4, off1),
                                    pair_minus_zero<E>(words[s], 8, off0), pair_minus_zero<E>(words[s], 12, off1)};
#pragma unroll
        for (int j = 0; j < NT; ++j) {
          const int r = 8 * j + g;
          const std::size_t at = static_cast<std::size_t>(r) * half_k + 8 * ks + t;
          const std::uint32_t b0 = r < m ? x2[at] : 0u, b1 = r < m ? x2[at + 4] : 0u;
          mma<E>(sum[j], a, b0, b1);
        }
        if (s == 3 || ks + 1 == ksteps || (ks + 1) % group_ksteps == 0) { // the group's part ends here
#pragma unroll
          for (int j = 0; j < NT; ++j) {
            acc[j][0] = fmaf(sum[j][0], s0.x, acc[j][0]);
            acc[j][1] = fmaf(sum[j][1], s0.x, acc[j][1]);
            acc[j][2] = fmaf(sum[j][2], s1.x, acc[j][2]);
            acc[j][3] = fmaf(sum[j][3], s1.x, acc[j][3]);
          }
        }
      }
    }
  }

  if (split > 1) { // the same for the whole block
    __shared__ float parts[max_split][NT * 4][32];
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int i = 0; i < 4; ++i)
        parts[part][4 * j + i][lane] = acc[j][i];
    __syncthreads();
    if (part != 0)
      return;
    for (int p = 1; p < split; ++p)
#pragma unroll
      for (int j = 0; j < NT; ++j)
#pragma unroll
        for (int i = 0; i < 4; ++i)
          acc[j][i] += parts[p][4 * j + i][lane];
  }
  // C fragment: acc[j][i] is output row (i < 2 ? row0 : row1), batch row 8 j + 2 t + i % 2.
#pragma unroll
  for (int j = 0; j < NT; ++j)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int row = i < 2 ? row0 : row1, r = 8 * j + 2 * t + (i & 1);
      if (row < n && r < m)
        y[static_cast<std::size_t>(r) * n + row] =
            detail::from_float<Out>(acc[j][i] + (bias != nullptr ? detail::to_float(bias[row]) : 0.0f));
    }
}

template <int NT, class E, class Out>
cudaError_t launch(const E* x, const int4_weight_view& w, const E* bias, Out* y, int m, int n, int k,
                   cudaStream_t stream) {
  const int split = int4_gemv_split(n, k);
  return detail::launch_dependent(int4_gemv_kernel<NT, E, Out>,
                                  static_cast<unsigned>((n + int4_tile_rows - 1) / int4_tile_rows),
                                  static_cast<unsigned>(split * 32), stream, x, reinterpret_cast<const uint4*>(w.codes),
                                  w.groups, w.group, bias, y, m, n, k, split);
}

// out[n, k] = the dequantized weight; each thread one word (one k-step of a lane's A fragment: 8
// codes of rows g, g + 8 and columns 2t, 2t + 1, 2t + 8, 2t + 9), grid-stride. Padding is skipped.
template <class E>
__global__ void dequantize_kernel(const std::uint32_t* __restrict__ codes, const float2* __restrict__ groups,
                                  int group, E* __restrict__ out, std::size_t words, int n, int k) {
  const int vectors = (k + int4_vector_columns - 1) / int4_vector_columns, groups_a_row = k / group;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < words;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const int s = static_cast<int>(i % 4), lane = static_cast<int>((i / 4) % 32);
    const std::size_t tile_vector = i / 128;
    const int v = static_cast<int>(tile_vector % vectors), tile = static_cast<int>(tile_vector / vectors);
    const int column0 = (4 * v + s) * 16 + 2 * (lane & 3);
    if (column0 >= k)
      continue;
    const std::uint32_t word = codes[i];
#pragma unroll
    for (int r = 0; r < 4; ++r) { // register r: row g + 8 (r & 1), columns + 8 (r >> 1)
      const int row = tile * int4_tile_rows + (lane >> 2) + 8 * (r & 1), column = column0 + 8 * (r >> 1);
      if (row >= n)
        continue;
      const float2 g = groups[static_cast<std::size_t>(row) * groups_a_row + column / group];
      const int zero = static_cast<int>(g.y);
      const int lo = static_cast<int>((word >> (4 * r)) & 0xfu), hi = static_cast<int>((word >> (16 + 4 * r)) & 0xfu);
      E* dst = out + static_cast<std::size_t>(row) * k + column;
      dst[0] = detail::from_float<E>(static_cast<float>(lo - zero) * g.x);
      dst[1] = detail::from_float<E>(static_cast<float>(hi - zero) * g.x);
    }
  }
}
} // namespace

int int4_gemv_split(int n, int k) noexcept {
  const long long tiles = (n + int4_tile_rows - 1) / int4_tile_rows;
  const int vectors = (k + int4_vector_columns - 1) / int4_vector_columns;
  int split = 1;
  while (split < max_split && tiles * split < 2112 && vectors >= 2 * split * 4)
    split *= 2;
  return split;
}

bool int4_gemv_applies(const void* x, const int4_weight_view& w, int m, int n, int k) noexcept {
  const auto address = [](const void* p) { return reinterpret_cast<std::uintptr_t>(p); };
  return m >= 1 && m <= int4_gemv_max_rows && n >= 1 && k >= 32 && k % 32 == 0 && w.group >= 32 &&
         w.group % 32 == 0 && k % w.group == 0 && w.groups != nullptr && w.codes != nullptr &&
         (address(x) | address(w.codes)) % 16 == 0 && address(w.groups) % 8 == 0;
}

template <class Out, class E>
cudaError_t int4_gemv(const E* x, const int4_weight_view& w, const E* bias, Out* y, int m, int n, int k,
                      cudaStream_t stream) {
  if (!int4_gemv_applies(x, w, m, n, k))
    return cudaErrorInvalidValue;
  return m <= 8 ? launch<1>(x, w, bias, y, m, n, k, stream) : launch<2>(x, w, bias, y, m, n, k, stream);
}

template <class E>
cudaError_t dequantize_int4(const int4_weight_view& w, E* out, int n, int k, cudaStream_t stream) {
  if (k < 16 || k % 16 != 0 || w.group < 16 || w.group % 16 != 0 || k % w.group != 0 || n < 1 ||
      w.codes == nullptr || w.groups == nullptr || out == nullptr)
    return cudaErrorInvalidValue;
  constexpr int threads = 256;
  const std::size_t tiles = (n + int4_tile_rows - 1) / int4_tile_rows;
  const std::size_t vectors = (k + int4_vector_columns - 1) / int4_vector_columns;
  const std::size_t words = tiles * vectors * 128;
  // Enough blocks to fill the GPU several times over; the grid-stride loop takes the rest.
  const std::size_t blocks = (words + threads - 1) / threads;
  const unsigned grid = static_cast<unsigned>(blocks < 65536 ? blocks : 65536);
  dequantize_kernel<<<grid, threads, 0, stream>>>(w.codes, w.groups, w.group, out, words, n, k);
  return cudaGetLastError();
}

template cudaError_t int4_gemv<__nv_bfloat16, __nv_bfloat16>(const __nv_bfloat16*, const int4_weight_view&,
                                                             const __nv_bfloat16*, __nv_bfloat16*, int, int, int,
                                                             cudaStream_t);
template cudaError_t int4_gemv<float, __nv_bfloat16>(const __nv_bfloat16*, const int4_weight_view&,
                                                     const __nv_bfloat16*, float*, int, int, int, cudaStream_t);
template cudaError_t int4_gemv<__half, __half>(const __half*, const int4_weight_view&, const __half*, __half*, int,
                                               int, int, cudaStream_t);
template cudaError_t int4_gemv<float, __half>(const __half*, const int4_weight_view&, const __half*, float*, int, int,
                                              int, cudaStream_t);
template cudaError_t dequantize_int4<float>(const int4_weight_view&, float*, int, int, cudaStream_t);
template cudaError_t dequantize_int4<__nv_bfloat16>(const int4_weight_view&, __nv_bfloat16*, int, int, cudaStream_t);
template cudaError_t dequantize_int4<__half>(const int4_weight_view&, __half*, int, int, cudaStream_t);

} // namespace troupe::kernels::cuda
