// The GEMM of every linear layer: y = x · wᵀ (+ bias) through cuBLASLt, with an algorithm
// chosen once per shape and dtype by the heuristic and kept, and a workspace owned here.
// Batch-invariant selection (engine.deterministic) runs one algorithm per (n, k) for every m.
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

// How linear() picks the algorithm of a call.
enum class gemm_selection {
  // The heuristic's first for each (m, n, k): the fastest it knows, but its tile and split of k
  // change with m, so a row's bits depend on how many rows share the call.
  per_shape,
  // One algorithm per (n, k, types, alignments), the heuristic's first unsplit one for
  // batch_invariant_rows rows, run for every m: each output element is then one K loop of fixed
  // order over its own row of x, whatever the other rows are (engine.deterministic).
  batch_invariant,
};

class cublaslt_gemm {
 public:
  // The m that batch-invariant algorithms are chosen for: between a decode batch and a prefill
  // chunk, so that neither gets a tile made for the other's extreme.
  static constexpr int batch_invariant_rows = 64;

  explicit cublaslt_gemm(std::size_t workspace_bytes = std::size_t{32} << 20,
                         gemm_selection selection = gemm_selection::per_shape);
  gemm_selection selection() const noexcept { return selection_; }
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
  // bias epilogue round y before the bias is added, and a bf16 y is then rounded twice. Under
  // batch_invariant selection no call splits k, and every m of one (n, k) gets the same algorithm
  // (or NOT_SUPPORTED, when cuBLASLt says that algorithm cannot run this m).
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
  // not as k.align_bias says) only tells it the bias pointer's alignment. Under batch_invariant
  // selection a plan for `algos` == 1 takes the one algorithm of its (n, k) instead.
  cublasStatus_t make_plan(const key& k, const void* bias, int algos, plan& out) noexcept;
  // The descriptors of a call (operation, bias epilogue, layouts), without algorithms.
  cublasStatus_t make_descriptors(const key& k, const void* bias, plan& p) noexcept;
  // The heuristic's algorithms for p's descriptors, best first, at most `algos`; only unsplit ones
  // when `unsplit_only`. NOT_SUPPORTED when there are none.
  cublasStatus_t ask_heuristic(const key& k, int algos, bool unsplit_only, plan& p) noexcept;
  // The plan of this call in `plans` (made with `algos` algorithms on first use), or null with `status` set.
  const plan* find_plan(std::unordered_map<key, plan, key_hash>& plans, const key& k, const void* bias, int algos,
                        cublasStatus_t& status) noexcept;
  cublasStatus_t run(const plan& p, const cublasLtMatmulAlgo_t& algo, const void* x, const void* w, void* y,
                     const void* bias, cudaStream_t stream) noexcept;
  static key key_of(const void* x, const void* w, const void* y, const void* bias, int m, int n, int k,
                    gemm_type in_type, gemm_type out_type) noexcept;
  static void release(plan& p) noexcept;

  cublasLtHandle_t handle_ = nullptr;
  gemm_selection selection_ = gemm_selection::per_shape;
  device_buffer<std::byte> workspace_;
  std::unordered_map<key, plan, key_hash> plans_;      // what linear() runs: the heuristic's first
  std::unordered_map<key, plan, key_hash> candidates_; // up to max_candidates, for linear_candidate()
  std::unordered_map<key, plan, key_hash> invariant_;  // batch_invariant: the algorithm of each (n, k), m = batch_invariant_rows
};

} // namespace troupe::kernels::cuda
