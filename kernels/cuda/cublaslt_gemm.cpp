// cuBLASLt behind one call: row-major y = x · wᵀ expressed as the column-major
// product yᵀ = w · xᵀ ("TN"), planned once per shape and cached.
#include "kernels/cuda/cublaslt_gemm.hpp"

#include <algorithm>
#include <functional>
#include <utility>

namespace troupe::kernels::cuda {

namespace {

cudaDataType_t data_type(gemm_type t) {
  return t == gemm_type::bf16 ? CUDA_R_16BF : CUDA_R_32F;
}

// The largest power of two (at most 256) that divides the address: cuBLASLt's heuristic
// assumes 256-byte alignment unless told otherwise, and a kernel picked under that
// assumption may read misaligned vectors.
std::uint16_t alignment_of(const void* p) {
  auto address = reinterpret_cast<std::uintptr_t>(p);
  std::uintptr_t align = 256;
  while (align > 1 && address % align != 0)
    align /= 2;
  return static_cast<std::uint16_t>(align);
}

} // namespace

cublaslt_gemm::cublaslt_gemm(std::size_t workspace_bytes) : workspace_(workspace_bytes) {
  check(cublasLtCreate(&handle_), "cublasLtCreate");
}

cublaslt_gemm::~cublaslt_gemm() {
  for (auto* plans : {&plans_, &candidates_})
    for (auto& [k, p] : *plans)
      release(p);
  if (handle_ != nullptr)
    cublasLtDestroy(handle_);
}

std::size_t cublaslt_gemm::key_hash::operator()(const key& k) const noexcept {
  std::size_t h =
      std::hash<long long>{}((static_cast<long long>(k.m) << 40) ^ (static_cast<long long>(k.n) << 20) ^ k.k);
  h ^= (static_cast<std::size_t>(k.in) << 1 | static_cast<std::size_t>(k.out)) + 0x9e3779b97f4a7c15ull + (h << 6) +
       (h >> 2);
  h ^= (static_cast<std::size_t>(k.align_x) << 32 | static_cast<std::size_t>(k.align_w) << 16 | k.align_y) +
       0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h;
}

void cublaslt_gemm::release(plan& p) noexcept {
  if (p.a != nullptr)
    cublasLtMatrixLayoutDestroy(p.a);
  if (p.b != nullptr)
    cublasLtMatrixLayoutDestroy(p.b);
  if (p.c != nullptr)
    cublasLtMatrixLayoutDestroy(p.c);
  if (p.op != nullptr)
    cublasLtMatmulDescDestroy(p.op);
  p = plan{};
}

cublasStatus_t cublaslt_gemm::make_plan(const key& k, int algos, plan& out) noexcept {
  plan p;
  auto fail = [&](cublasStatus_t s) {
    release(p);
    return s;
  };
  cublasStatus_t s = cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  if (s != CUBLAS_STATUS_SUCCESS)
    return fail(s);
  const cublasOperation_t transpose = CUBLAS_OP_T, keep = CUBLAS_OP_N;
  if ((s = cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &transpose, sizeof transpose)) !=
          CUBLAS_STATUS_SUCCESS ||
      (s = cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &keep, sizeof keep)) !=
          CUBLAS_STATUS_SUCCESS)
    return fail(s);
  // Column-major views of the row-major operands:
  //   A = w: [k, n] ld k (transposed to [n, k]);  B = x: [k, m] ld k;  C = D = y: [n, m] ld n.
  if ((s = cublasLtMatrixLayoutCreate(&p.a, data_type(k.in), k.k, k.n, k.k)) != CUBLAS_STATUS_SUCCESS ||
      (s = cublasLtMatrixLayoutCreate(&p.b, data_type(k.in), k.k, k.m, k.k)) != CUBLAS_STATUS_SUCCESS ||
      (s = cublasLtMatrixLayoutCreate(&p.c, data_type(k.out), k.n, k.m, k.n)) != CUBLAS_STATUS_SUCCESS)
    return fail(s);

  cublasLtMatmulPreference_t pref = nullptr;
  if ((s = cublasLtMatmulPreferenceCreate(&pref)) != CUBLAS_STATUS_SUCCESS)
    return fail(s);
  const std::uint64_t max_workspace = workspace_.bytes();
  const std::uint32_t align_a = k.align_w, align_b = k.align_x, align_c = k.align_y;
  cublasLtMatmulHeuristicResult_t results[max_candidates] = {};
  const int requested = std::clamp(algos, 1, max_candidates);
  int found = 0;
  if ((s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &max_workspace,
                                                sizeof max_workspace)) == CUBLAS_STATUS_SUCCESS &&
      (s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a,
                                                sizeof align_a)) == CUBLAS_STATUS_SUCCESS &&
      (s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b,
                                                sizeof align_b)) == CUBLAS_STATUS_SUCCESS &&
      (s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_c,
                                                sizeof align_c)) == CUBLAS_STATUS_SUCCESS &&
      (s = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_c,
                                                sizeof align_c)) == CUBLAS_STATUS_SUCCESS)
    s = cublasLtMatmulAlgoGetHeuristic(handle_, p.op, p.a, p.b, p.c, p.c, pref, requested, results, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (s != CUBLAS_STATUS_SUCCESS)
    return fail(s);
  if (found == 0)
    return fail(CUBLAS_STATUS_NOT_SUPPORTED);
  try {
    for (int i = 0; i < found; ++i)
      p.algos.push_back(results[i].algo);
  } catch (...) {
    return fail(CUBLAS_STATUS_ALLOC_FAILED);
  }
  out = std::move(p);
  return CUBLAS_STATUS_SUCCESS;
}

cublaslt_gemm::key cublaslt_gemm::key_of(const void* x, const void* w, const void* y, int m, int n, int k,
                                         gemm_type in_type, gemm_type out_type) noexcept {
  return {m, n, k, in_type, out_type, alignment_of(x), alignment_of(w), alignment_of(y)};
}

const cublaslt_gemm::plan* cublaslt_gemm::find_plan(std::unordered_map<key, plan, key_hash>& plans, const key& k,
                                                    int algos, cublasStatus_t& status) noexcept {
  status = CUBLAS_STATUS_SUCCESS;
  if (auto it = plans.find(k); it != plans.end())
    return &it->second;
  plan p;
  if ((status = make_plan(k, algos, p)) != CUBLAS_STATUS_SUCCESS)
    return nullptr;
  try {
    return &plans.emplace(k, std::move(p)).first->second;
  } catch (...) {
    release(p);
    status = CUBLAS_STATUS_ALLOC_FAILED;
    return nullptr;
  }
}

cublasStatus_t cublaslt_gemm::run(const plan& p, const cublasLtMatmulAlgo_t& algo, const void* x, const void* w,
                                  void* y, cudaStream_t stream) noexcept {
  const float alpha = 1.0f, beta = 0.0f;
  return cublasLtMatmul(handle_, p.op, &alpha, w, p.a, x, p.b, &beta, y, p.c, y, p.c, &algo, workspace_.data(),
                        workspace_.bytes(), stream);
}

cublasStatus_t cublaslt_gemm::linear(const void* x, const void* w, void* y, int m, int n, int k, gemm_type in_type,
                                     gemm_type out_type, cudaStream_t stream) noexcept {
  if (m <= 0 || n <= 0 || k <= 0)
    return m == 0 ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
  cublasStatus_t s = CUBLAS_STATUS_SUCCESS;
  const plan* p = find_plan(plans_, key_of(x, w, y, m, n, k, in_type, out_type), 1, s);
  return p != nullptr ? run(*p, p->algos.front(), x, w, y, stream) : s;
}

int cublaslt_gemm::candidate_count(const void* x, const void* w, const void* y, int m, int n, int k, gemm_type in_type,
                                   gemm_type out_type) noexcept {
  if (m <= 0 || n <= 0 || k <= 0)
    return 0;
  cublasStatus_t s = CUBLAS_STATUS_SUCCESS;
  const plan* p = find_plan(candidates_, key_of(x, w, y, m, n, k, in_type, out_type), max_candidates, s);
  return p != nullptr ? static_cast<int>(p->algos.size()) : 0;
}

cublasStatus_t cublaslt_gemm::linear_candidate(int index, const void* x, const void* w, void* y, int m, int n, int k,
                                               gemm_type in_type, gemm_type out_type, cudaStream_t stream) noexcept {
  if (m <= 0 || n <= 0 || k <= 0)
    return CUBLAS_STATUS_INVALID_VALUE;
  cublasStatus_t s = CUBLAS_STATUS_SUCCESS;
  const plan* p = find_plan(candidates_, key_of(x, w, y, m, n, k, in_type, out_type), max_candidates, s);
  if (p == nullptr)
    return s;
  if (index < 0 || index >= static_cast<int>(p->algos.size()))
    return CUBLAS_STATUS_INVALID_VALUE;
  return run(*p, p->algos[static_cast<std::size_t>(index)], x, w, y, stream);
}

} // namespace troupe::kernels::cuda
