// A mixture-of-experts layer's MLP on the GPU (kernels/cuda/moe.hpp):
//   router GEMM -> top-k per token -> the entries (token, slot) grouped by expert -> each
//   expert's gate|up over its rows -> activation -> its down -> the weighted sum per token,
// over at most moe_rows_ of the step's rows at a time.
//
// Two ways to run the experts. A decode step's experts have a few rows each: the grouped GEMV
// reads only the chosen experts' weights, once a chunk of rows, and needs nothing from the host
// (CUDA graphs capture it). A long prefill gives every expert many rows: the experts' offsets go
// to the host (one wait a layer) and each expert's rows run through one cuBLASLt GEMM on the
// tensor cores. engine.deterministic always takes the GEMV: its rows are computed alike whatever
// else is in the batch.
#include <algorithm>
#include <type_traits>

#include "kernels/cuda/moe.hpp"
#include "kernels/cuda/silu_and_mul.hpp"
#include "runtime/cuda/cuda_model_runner.hpp"

namespace troupe::runtime {

namespace kc = kernels::cuda;

namespace {

// Entries an expert must have on average before a chunk runs per-expert GEMMs: below it the
// host wait and one launch per expert cost more than the GEMV's CUDA-core arithmetic saves.
constexpr int moe_gemm_min_rows_per_expert = 32;

// The routing arrays inside moe_routing_, each 16-byte aligned (plan_activations sizes them).
struct moe_routing_arrays {
  int* topk_ids;
  float* topk_weights;
  int* sorted_entries;
  int* entry_position;
  int* expert_offsets;
};

moe_routing_arrays carve(std::byte* base, std::size_t entries) {
  const std::size_t slice = round_up(entries * 4, 16);
  return {reinterpret_cast<int*>(base), reinterpret_cast<float*>(base + slice),
          reinterpret_cast<int*>(base + 2 * slice), reinterpret_cast<int*>(base + 3 * slice),
          reinterpret_cast<int*>(base + 4 * slice)};
}

bool capturing(cudaStream_t s) {
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  return cudaStreamIsCapturing(s, &capture) != cudaSuccess || capture != cudaStreamCaptureStatusNone;
}

} // namespace

template <class T>
bool cuda_model_runner::moe_mlp(const layer& w, const T* h, const T* shared, T* out, int rows, step_status& status) {
  const moe_config& m = *config_.moe;
  const int hidden = config_.hidden_size, experts = m.num_experts, top_k = m.experts_per_token,
            inter = shard_.expert_intermediate, router_rows = moe_router_rows(m);
  const kc::gemm_type type = std::is_same_v<T, float>    ? kc::gemm_type::f32
                             : std::is_same_v<T, __half> ? kc::gemm_type::f16
                                                         : kc::gemm_type::bf16;
  const cudaStream_t s = compute_;
  auto ok = [&](cudaError_t e, const char* what) {
    if (e != cudaSuccess && status.ok())
      status = {static_cast<int>(e), what, false};
    return status.ok();
  };
  auto gemm = [&](const void* x, const void* weight, void* y, int rows_, int n, int k, kc::gemm_type out_type,
                  const char* what) {
    const cublasStatus_t e = gemm_.linear(x, weight, y, rows_, n, k, type, out_type, s, nullptr);
    if (e != CUBLAS_STATUS_SUCCESS && status.ok())
      status = {static_cast<int>(e), what, true};
    return status.ok();
  };
  const auto* gate_up = reinterpret_cast<const T*>(w.experts_gate_up.data());
  const auto* down = reinterpret_cast<const T*>(w.experts_down.data());
  auto* xs = reinterpret_cast<T*>(moe_entries_.data()); // gathered rows, then the experts' outputs
  auto* wide = reinterpret_cast<T*>(moe_wide_.data());
  auto* mid = reinterpret_cast<T*>(moe_mid_.data());
  float* logits = moe_router_.data();
  const moe_routing_arrays a = carve(moe_routing_.data(), static_cast<std::size_t>(moe_rows_) * top_k);
  // Both projections of every expert with entries, one GEMM each (offsets read on the host).
  auto per_expert = [&](const T* in, const T* weights, T* result, int n, int k, const char* what) {
    const int* offsets = moe_offsets_host_.data();
    for (int e = 0; e < experts; ++e) {
      const int begin = offsets[e], count = offsets[e + 1] - begin;
      if (count > 0 && !gemm(in + static_cast<std::size_t>(begin) * k, weights + static_cast<std::size_t>(e) * n * k,
                             result + static_cast<std::size_t>(begin) * n, count, n, k, type, what))
        return false;
    }
    return true;
  };

  for (int first = 0; first < rows; first += moe_rows_) {
    const int n = std::min(moe_rows_, rows - first), entries = n * top_k;
    const T* x = h + static_cast<std::size_t>(first) * hidden;
    // [n, hidden] · [router_rows, hidden]ᵀ -> [n, router_rows] fp32 (softmax reads fp32 logits)
    if (!gemm(x, w.router.data(), logits, n, router_rows, hidden, kc::gemm_type::f32, "router gemm") ||
        !ok(kc::moe_route(logits, router_rows, n, experts, top_k, m.normalize_top_k, a.topk_ids, a.topk_weights, s),
            "moe route") ||
        !ok(kc::moe_align(a.topk_ids, n, top_k, experts, a.expert_offsets, a.sorted_entries, a.entry_position, s),
            "moe align") ||
        !ok(kc::moe_gather_rows<T>(x, a.sorted_entries, entries, top_k, hidden, xs, s), "moe gather"))
      return false;
    const bool gemms = !options_.deterministic && entries >= moe_gemm_min_rows_per_expert * experts && !capturing(s);
    if (gemms) {
      if (!ok(cudaMemcpyAsync(moe_offsets_host_.data(), a.expert_offsets, (experts + 1) * sizeof(int),
                              cudaMemcpyDeviceToHost, s),
              "moe offsets to the host") ||
          !ok(cudaStreamSynchronize(s), "moe offsets wait") ||
          !per_expert(xs, gate_up, wide, 2 * inter, hidden, "expert gate_up gemm"))
        return false;
    } else if (!ok(kc::moe_grouped_gemv<T>(xs, gate_up, a.expert_offsets, experts, entries, 2 * inter, hidden, wide, s),
                   "expert gate_up gemv")) {
      return false;
    }
    const cudaError_t act = config_.activation == mlp_activation::gelu_tanh
                                ? kc::gelu_tanh_and_mul<T>(wide, mid, entries, inter, s)
                                : kc::silu_and_mul<T>(wide, mid, entries, inter, s);
    if (!ok(act, "expert activation"))
      return false;
    if (gemms ? !per_expert(mid, down, xs, hidden, inter, "expert down gemm")
              : !ok(kc::moe_grouped_gemv<T>(mid, down, a.expert_offsets, experts, entries, hidden, inter, xs, s),
                    "expert down gemv"))
      return false;
    // The shared expert's gate is the router's row `experts`.
    const T* shared_rows = shared != nullptr ? shared + static_cast<std::size_t>(first) * hidden : nullptr;
    if (!ok(kc::moe_combine<T>(xs, a.entry_position, a.topk_weights, n, top_k, hidden, shared_rows,
                               shared != nullptr ? logits + experts : nullptr, router_rows,
                               out + static_cast<std::size_t>(first) * hidden, s),
            "moe combine"))
      return false;
  }
  return true;
}

template bool cuda_model_runner::moe_mlp<float>(const layer&, const float*, const float*, float*, int, step_status&);
template bool cuda_model_runner::moe_mlp<__half>(const layer&, const __half*, const __half*, __half*, int,
                                                 step_status&);
template bool cuda_model_runner::moe_mlp<__nv_bfloat16>(const layer&, const __nv_bfloat16*, const __nv_bfloat16*,
                                                        __nv_bfloat16*, int, step_status&);

} // namespace troupe::runtime
