// The GEMM of every linear layer: y = x · wᵀ (+ bias) through cuBLASLt, with an algorithm
// chosen once per shape and dtype by the heuristic and kept, and a workspace owned here.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "kernels/cuda/device_buffer.hpp"

namespace troupe::kernels::cuda {

class cublas_error : public std::runtime_error {
 public:
  cublas_error(cublasStatus_t status, const std::string& what)
      : std::runtime_error(what + ": " + cublasLtGetStatusName(status) + " (" + cublasLtGetStatusString(status) + ")"),
        status_(status) {}
  cublasStatus_t status() const noexcept { return status_; }

 private:
  cublasStatus_t status_;
};

inline void check(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS)
    throw cublas_error(status, what);
}

// Element types a linear layer runs in. x and w share one type; y may be wider (fp32
// logits from bf16 or fp16 weights). Accumulation is fp32 always, and never TF32: an fp32
// model on the GPU must match the CPU reference within 1e-3.
enum class gemm_type { f32, bf16, f16 };

// What a planned call runs, as cuBLASLt describes its algorithm (for logs and tests).
struct gemm_algorithm {
  int id = -1, tile = -1;
  int split_k = 1;                                          // 1: no split of k
  std::uint32_t reduction = CUBLASLT_REDUCTION_SCHEME_NONE; // how split-K partial sums meet
};

class cublaslt_gemm {
 public:
  explicit cublaslt_gemm(std::size_t workspace_bytes = std::size_t{32} << 20);
  ~cublaslt_gemm();
  cublaslt_gemm(const cublaslt_gemm&) = delete;
  cublaslt_gemm& operator=(const cublaslt_gemm&) = delete;

  // y[m, n] = x[m, k] · w[n, k]ᵀ (+ bias[n]), all row-major and dense (nn.Linear).
  // x, w: in_type; y and bias: out_type. The bias is cuBLASLt's epilogue: added to the fp32
  // sum before y is rounded, so a bf16 y is rounded once (as torch's addmm does), not once for
  // the product and again for the sum. The first call of a (m, n, k, types, alignments, bias or
  // not) plans it (allocates descriptors, asks the heuristic); later calls only look the plan up.
  // Returns the status instead of throwing: it runs inside a step.
  cublasStatus_t linear(const void* x, const void* w, void* y, int m, int n, int k, gemm_type in_type,
                        gemm_type out_type, cudaStream_t stream, const void* bias = nullptr) noexcept;

  // The algorithm linear() runs for the same call (planned now if it was not yet); `status` gets
  // the planning's result. A call with a bias never splits k: cuBLASLt's split-K kernels with a
  // bias epilogue round y before the bias is added, and a bf16 y is then rounded twice.
  gemm_algorithm algorithm_of(const void* x, const void* w, const void* y, int m, int n, int k, gemm_type in_type,
                              gemm_type out_type, const void* bias, cublasStatus_t& status) noexcept;

  // The heuristic's algorithms for the same call (shape, types and the pointers' alignments), best
  // first, at most max_candidates; linear() runs the first. For timing the alternatives
  // (bench_kernels_gpu --gemm-candidates). Returns how many there are (0 when none or on error).
  static constexpr int max_candidates = 16;
  int candidate_count(const void* x, const void* w, const void* y, int m, int n, int k, gemm_type in_type,
                      gemm_type out_type) noexcept;
  // linear() with candidate `index` (< candidate_count of the same call) instead of the first.
  cublasStatus_t linear_candidate(int index, const void* x, const void* w, void* y, int m, int n, int k,
                                  gemm_type in_type, gemm_type out_type, cudaStream_t stream) noexcept;

  std::size_t workspace_bytes() const noexcept { return workspace_.bytes(); }

 private:
  struct key {
    int m, n, k;
    gemm_type in, out;
    std::uint16_t align_x, align_w, align_y; // bytes the pointers are aligned to (<= 256)
    std::uint16_t align_bias;                // the same for the bias; 0: no bias
    bool operator==(const key&) const = default;
  };
  struct key_hash {
    std::size_t operator()(const key& k) const noexcept;
  };
  // Descriptors and the heuristic's algorithms of one shape, best first; released in the destructor.
  struct plan {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    std::vector<cublasLtMatmulAlgo_t> algos;
  };
  // Asks the heuristic for up to `algos` algorithms (at least one must exist); `bias` (null or
  // not as k.align_bias says) only tells it the bias pointer's alignment.
  cublasStatus_t make_plan(const key& k, const void* bias, int algos, plan& out) noexcept;
  // The plan of this call in `plans` (made with `algos` algorithms on first use), or null with `status` set.
  const plan* find_plan(std::unordered_map<key, plan, key_hash>& plans, const key& k, const void* bias, int algos,
                        cublasStatus_t& status) noexcept;
  cublasStatus_t run(const plan& p, const cublasLtMatmulAlgo_t& algo, const void* x, const void* w, void* y,
                     const void* bias, cudaStream_t stream) noexcept;
  static key key_of(const void* x, const void* w, const void* y, const void* bias, int m, int n, int k,
                    gemm_type in_type, gemm_type out_type) noexcept;
  static void release(plan& p) noexcept;

  cublasLtHandle_t handle_ = nullptr;
  device_buffer<std::byte> workspace_;
  std::unordered_map<key, plan, key_hash> plans_;      // what linear() runs: the heuristic's first
  std::unordered_map<key, plan, key_hash> candidates_; // up to max_candidates, for linear_candidate()
};

} // namespace troupe::kernels::cuda
