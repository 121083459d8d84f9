// Rows between token order and expert order: the gather of each entry's token row into xs, and
// the weighted sum of a token's expert outputs back into its row. Element-wise grids over
// [rows, hidden] in packs of V elements (element_pack.cuh); blockIdx.y is the row, in slices of
// 65535 (the grid's limit), so no thread divides by hidden.
#include <cuda_bf16.h>

#include "kernels/cuda/element_pack.cuh"
#include "kernels/cuda/moe.hpp"
#include "kernels/cuda/numeric.cuh"

namespace troupe::kernels::cuda {

namespace {
constexpr int threads = 256;
constexpr int max_grid_rows = 65535;

template <class T, int V>
__global__ void gather_kernel(const T* __restrict__ x, const int* __restrict__ sorted_entries, int first, int top_k,
                              int hidden, T* __restrict__ xs) {
  const int i = (blockIdx.x * blockDim.x + threadIdx.x) * V;
  if (i >= hidden)
    return;
  const std::size_t p = first + blockIdx.y;
  const std::size_t token = sorted_entries[p] / top_k;
  detail::store_pack(xs + p * hidden + i, detail::load_pack<V>(x + token * hidden + i));
}

template <class T, int V>
__global__ void combine_kernel(const T* __restrict__ ys, const int* __restrict__ entry_position,
                               const float* __restrict__ topk_weights, int first, int top_k, int hidden,
                               const T* __restrict__ shared, const float* __restrict__ shared_gate_logits,
                               int logits_stride, T* __restrict__ out) {
  const int i = (blockIdx.x * blockDim.x + threadIdx.x) * V;
  if (i >= hidden)
    return;
  const std::size_t t = first + blockIdx.y;
  float acc[V];
#pragma unroll
  for (int v = 0; v < V; ++v)
    acc[v] = 0.0f;
  for (int j = 0; j < top_k; ++j) { // in slot order
    const std::size_t entry = t * top_k + j;
    const float weight = topk_weights[entry];
    const auto y = detail::load_pack<V>(ys + static_cast<std::size_t>(entry_position[entry]) * hidden + i);
#pragma unroll
    for (int v = 0; v < V; ++v)
      acc[v] = fmaf(weight, detail::to_float(y.e[v]), acc[v]);
  }
  if (shared != nullptr) {
    const float gate =
        shared_gate_logits != nullptr ? 1.0f / (1.0f + expf(-shared_gate_logits[t * logits_stride])) : 1.0f;
    const auto s = detail::load_pack<V>(shared + t * hidden + i);
#pragma unroll
    for (int v = 0; v < V; ++v)
      acc[v] = fmaf(gate, detail::to_float(s.e[v]), acc[v]);
  }
  detail::element_pack<T, V> o;
#pragma unroll
  for (int v = 0; v < V; ++v)
    o.e[v] = detail::from_float<T>(acc[v]);
  detail::store_pack(out + t * hidden + i, o);
}

// launch(first, n, grid) for each slice of at most max_grid_rows rows.
template <class Launch>
cudaError_t by_row_slices(int rows, int hidden, int v, Launch&& launch) {
  const int packs = hidden / v;
  for (int first = 0; first < rows; first += max_grid_rows) {
    const int n = rows - first < max_grid_rows ? rows - first : max_grid_rows;
    launch(first, dim3((packs + threads - 1) / threads, n));
    if (auto err = cudaGetLastError(); err != cudaSuccess)
      return err;
  }
  return cudaSuccess;
}
} // namespace

template <class T>
cudaError_t moe_gather_rows(const T* x, const int* sorted_entries, int entries, int top_k, int hidden, T* xs,
                            cudaStream_t stream) {
  if (top_k < 1 || hidden < 0 || entries < 0)
    return cudaErrorInvalidValue;
  if (entries == 0 || hidden == 0)
    return cudaSuccess;
  return detail::with_pack_width(
      detail::widest_pack(hidden, 16 / static_cast<int>(sizeof(T)), sizeof(T), x, xs), [&](auto v) {
        constexpr int V = decltype(v)::value;
        return by_row_slices(entries, hidden, V, [&](int first, dim3 grid) {
          gather_kernel<T, V><<<grid, threads, 0, stream>>>(x, sorted_entries, first, top_k, hidden, xs);
        });
      });
}

template <class T>
cudaError_t moe_combine(const T* ys, const int* entry_position, const float* topk_weights, int rows, int top_k,
                        int hidden, const T* shared, const float* shared_gate_logits, int logits_stride, T* out,
                        cudaStream_t stream) {
  if (top_k < 1 || hidden < 0 || rows < 0)
    return cudaErrorInvalidValue;
  if (rows == 0 || hidden == 0)
    return cudaSuccess;
  const int width = shared != nullptr
                        ? detail::widest_pack(hidden, 16 / static_cast<int>(sizeof(T)), sizeof(T), ys, out, shared)
                        : detail::widest_pack(hidden, 16 / static_cast<int>(sizeof(T)), sizeof(T), ys, out);
  return detail::with_pack_width(width, [&](auto v) {
    constexpr int V = decltype(v)::value;
    return by_row_slices(rows, hidden, V, [&](int first, dim3 grid) {
      combine_kernel<T, V><<<grid, threads, 0, stream>>>(ys, entry_position, topk_weights, first, top_k, hidden, shared,
                                                         shared_gate_logits, logits_stride, out);
    });
  });
}

#define TROUPE_INSTANTIATE(T)                                                                                         \
  template cudaError_t moe_gather_rows<T>(const T*, const int*, int, int, int, T*, cudaStream_t);                     \
  template cudaError_t moe_combine<T>(const T*, const int*, const float*, int, int, int, const T*, const float*, int, \
                                      T*, cudaStream_t);
TROUPE_INSTANTIATE(float)
TROUPE_INSTANTIATE(__nv_bfloat16)
TROUPE_INSTANTIATE(__half)
#undef TROUPE_INSTANTIATE

} // namespace troupe::kernels::cuda
