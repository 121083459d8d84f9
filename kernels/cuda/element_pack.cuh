// Packs of V consecutive elements moved as one load or store (up to 16 bytes), for the
// element-wise kernels: a warp of 2-byte loads fetches 64 bytes a request, a warp of 16-byte
// loads 512. Which V a launch may use depends on the sizes and the pointers' alignment, so
// launchers ask widest_pack and instantiate their kernel for each width. Only .cu files include this.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace troupe::kernels::cuda::detail {

template <class T, int V>
struct alignas(sizeof(T) * V) element_pack {
  T e[V];
};

template <int V, class T>
__device__ __forceinline__ element_pack<T, V> load_pack(const T* p) {
  return *reinterpret_cast<const element_pack<T, V>*>(p);
}
template <int V, class T>
__device__ __forceinline__ void store_pack(T* p, const element_pack<T, V>& v) {
  *reinterpret_cast<element_pack<T, V>*>(p) = v;
}

// The widest V in max_elems, max_elems / 2, ..., 1 that divides `count` (every offset a
// kernel adds is a multiple of it) and to whose V * element_bytes every pointer is aligned.
// element_bytes: the largest element among the arrays the pointers address.
template <class... P>
int widest_pack(int count, int max_elems, std::size_t element_bytes, const P*... ptrs) {
  for (int v = max_elems; v > 1; v /= 2) {
    const std::size_t align = v * element_bytes;
    if (count % v == 0 && ((reinterpret_cast<std::uintptr_t>(ptrs) % align == 0) && ...))
      return v;
  }
  return 1;
}

// launch(std::integral_constant<int, V>{}) for the pack width v that widest_pack answered (8, 4,
// 2, else 1): the one switch from that answer to a kernel instantiated for the width.
template <class Launch>
cudaError_t with_pack_width(int v, Launch&& launch) {
  switch (v) {
    case 8:
      return launch(std::integral_constant<int, 8>{});
    case 4:
      return launch(std::integral_constant<int, 4>{});
    case 2:
      return launch(std::integral_constant<int, 2>{});
    default:
      return launch(std::integral_constant<int, 1>{});
  }
}

} // namespace troupe::kernels::cuda::detail
