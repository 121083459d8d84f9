// Kernel micro-benchmarks of the CUDA backend: paged attention (decode over block
// sizes, contexts, batches and bf16 / fp8 caches; prefill chunks), RMSNorm,
// SiLU-and-mul, RoPE + KV write, and the linear layers of a small decode batch (cuBLASLt
// against troupe's GEMV) at Llama shapes, bf16 activations.
// Each case: median of CUDA-event times after a warm-up, with inputs rotated over
// copies larger than L2 (60 MiB on H200); bytes that must move / time, as a
// fraction of the 4.3 TB/s copy ceiling of GPU.md, and for attention the FLOPs
// (causal QK^T and PV) / time as a fraction of 790 TFLOP/s; for attention also the time per
// launch inside a CUDA graph of back-to-back launches (as a decode step runs it: without the
// host's launch latency). Prints a markdown table (also to --out FILE). --sweep: only decode attention over split-K
// partition lengths (paged_attention_params::min_partition) and block-table widths. --gemm-candidates: only the time of
// each of cuBLASLt's candidate algorithms at the 13B layers (decode and prefill rows).
// --decode-attention: only the split-K decode attention rows (8B and 13B shapes, bf16 and fp8 caches).
// --sliding-window: only decode attention at 8B shapes (bf16, block 128), batch 1 and 16: a
// sliding window of 4,096 at context 32,768, against full attention at 4,096 and at 32,768.
// --softcap: only decode (8B GQA over bf16 and fp8, 13B MHA) and 8B prefill attention with Gemma 2's
// logit cap of 50 against none.
// --profile-attention: a few decode attention cases, each timed, then launched once more between
// cudaProfilerStart and cudaProfilerStop, for `ncu --profile-from-start off` to profile that launch.
// --prefill-attention: only the prefill attention rows (with --profile-attention: each also profiled).
// --gemv: only the decode linear layers at m = 1 and 2, cuBLASLt and the GEMV at each split (and
// at m = 1 with fp16 weights).
// --fp8-gemv: only the 13B decode linear layers at m = 1, 2, 4, 8 (and 16 for INT4 and cuBLASLt): cuBLASLt and the GEMV
// (m <= 4) on bf16 weights against fp8_gemv on e4m3 weights with a scale a row and a scale per 128 columns, and
// int4_gemv on INT4 codes with groups of 128 (bytes: the codes and scales); the graph column also
// gives the fastest and slowest repetition. --int4-gemv: the same.
// --qkv-bias: only a Qwen2-7B-shaped QKV GEMM with and without its bias, m = 1 .. 4096.
// --sampling: only sample_rows (top-p 0.9), compute_logprobs (top 5) and apply_penalties (1,501-token
// histories) at 1 and 12 rows of 32,000 and 128,256 and 64 of 128,256.
// --moe: only the MoE experts' grouped GEMV (moe_grouped_gemv, bf16) at Mixtral-8x7B's and Qwen3-30B-A3B's
// expert shapes, batch 1 and 16, random distinct top-k experts a token; bytes: the used experts' weights.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_profiler_api.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <numeric>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "kernels/cuda/cublaslt_gemm.hpp"
#include "kernels/cuda/cuda_graph.hpp"
#include "kernels/cuda/cuda_stream.hpp"
#include "kernels/cuda/device_buffer.hpp"
#include "kernels/cuda/fp8_linear.hpp"
#include "kernels/cuda/gemv.hpp"
#include "kernels/cuda/int4_linear.hpp"
#include "kernels/cuda/logprobs.hpp"
#include "kernels/cuda/moe.hpp"
#include "kernels/cuda/paged_attention.hpp"
#include "kernels/cuda/penalties.hpp"
#include "kernels/cuda/rms_norm.hpp"
#include "kernels/cuda/rope_write_kv.hpp"
#include "kernels/cuda/sampling.hpp"
#include "kernels/cuda/silu_and_mul.hpp"
#include "runtime/sampler.hpp"

namespace {

namespace kcu = troupe::kernels::cuda;
using bf16 = __nv_bfloat16;
using fp8 = __nv_fp8_e4m3;
constexpr double ceiling_bytes_per_s = 4.3e12;
constexpr double ceiling_flops = 790e12;
constexpr std::size_t rotate_bytes = 256ull << 20; // > 4x L2
bool profile_launches = false;                     // --profile-attention

template <class T>
T encode(float x) {
  if constexpr (std::is_same_v<T, bf16>)
    return __float2bfloat16_rn(x);
  else
    return T(x);
}

// Random values in [-1, 1): speed must not depend on them, but zeros could take shortcuts.
// Large buffers repeat a 4M-element random pattern (copied on the device: multi-GB caches
// would take minutes to fill from the host).
template <class T>
kcu::device_buffer<T> random_values(std::size_t n, unsigned seed) {
  const std::size_t pattern = std::min<std::size_t>(n, std::size_t{1} << 22);
  std::vector<T> host(pattern);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (auto& x : host)
    x = encode<T>(u(rng));
  kcu::device_buffer<T> d(n);
  kcu::check(cudaMemcpy(d.data(), host.data(), pattern * sizeof(T), cudaMemcpyHostToDevice), "cudaMemcpy (pattern)");
  for (std::size_t done = pattern; done < n;) {
    const std::size_t chunk = std::min(done, n - done);
    kcu::check(cudaMemcpy(d.data() + done, d.data(), chunk * sizeof(T), cudaMemcpyDeviceToDevice),
               "cudaMemcpy (repeat pattern)");
    done += chunk;
  }
  return d;
}
kcu::device_buffer<bf16> random_bf16(std::size_t n, unsigned seed) {
  return random_values<bf16>(n, seed);
}

struct row {
  std::string name;
  double us, bytes;
  double flops = 0.0;                      // 0: not reported
  double graph_us = 0.0;                   // per launch inside a CUDA graph (0: not measured)
  std::pair<double, double> graph_range{}; // its fastest and slowest repetition (0, 0: not reported)
};

// Median microseconds of launch(i) over reps, i rotating through `copies` input sets (and where
// `range` is given, the fastest and slowest).
double time_us(const std::function<cudaError_t(int)>& launch, int copies, cudaStream_t stream, int reps = 50,
               std::pair<double, double>* range = nullptr) {
  for (int i = 0; i < 5; ++i)
    kcu::check(launch(i % copies), "warm-up launch");
  kcu::check(cudaStreamSynchronize(stream), "warm-up");
  std::vector<double> times;
  kcu::cuda_event start(true), stop(true);
  for (int r = 0; r < reps; ++r) {
    start.record(stream);
    kcu::check(launch(r % copies), "launch");
    stop.record(stream);
    stop.synchronize();
    times.push_back(1000.0 * stop.elapsed_since(start));
  }
  std::sort(times.begin(), times.end());
  if (range != nullptr)
    *range = {times.front(), times.back()};
  return times[times.size() / 2];
}

// Median microseconds per launch of max(copies, 8) launches (launch(i % copies)) captured in one
// CUDA graph, the way a decode step runs its kernels: back to back, without the host's launch
// latency that a lone launch between two events includes, each kernel's inputs last touched
// `copies` launches before (past L2).
double graph_time_us(const std::function<cudaError_t(int)>& launch, int copies, cudaStream_t stream, int reps = 20,
                     std::pair<double, double>* range = nullptr) {
  const int n = std::max(copies, 8);
  cudaGraph_t captured = nullptr;
  kcu::check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
  cudaError_t launched = cudaSuccess;
  for (int i = 0; i < n && launched == cudaSuccess; ++i)
    launched = launch(i % copies);
  const cudaError_t ended = cudaStreamEndCapture(stream, &captured); // always: it ends capture mode
  if (launched != cudaSuccess && captured != nullptr)
    cudaGraphDestroy(captured);
  kcu::check(launched, "captured launch");
  kcu::check(ended, "cudaStreamEndCapture");
  const kcu::cuda_graph graph(captured);
  const double us = time_us([&](int) { return graph.launch(stream); }, 1, stream, reps, range) / n;
  if (range != nullptr)
    *range = {range->first / n, range->second / n};
  return us;
}

int copies_for(std::size_t bytes) {
  return static_cast<int>(std::clamp<std::size_t>(rotate_bytes / std::max<std::size_t>(bytes, 1), 1, 64));
}

// Decode (q_len 1) or one prefill chunk of q_len tokens per sequence, each over a context of
// `context` positions (the chunk is its last q_len). Bytes: K and V of every position a token
// sees once, q and out; FLOPs: 4 * head_dim per (query head, visible position). `fast`: with the
// workspace (split-K and tensor-core tiles); without, the simple kernel. `window`:
// paged_attention_params::window (0: full attention); `softcap`: paged_attention_params::softcap.
// `table_context`: positions the block tables are wide enough for (the engine's tables span the
// model's whole context, and the split-K plan follows that width); 0: the context itself.
// `min_partition`: paged_attention_params::min_partition. `counters`: split-K partitions merge in
// their last block (as the runner calls it); false: in the combine kernel.
template <class C>
row bench_attention(const char* label, int batch, int q_len, int context, int heads, int kv_heads, int hd, int bs,
                    cudaStream_t stream, bool fast = true, int table_context = 0, int min_partition = 0,
                    bool counters = true, int window = 0, float softcap = 0.0f) {
  const int blocks_per_seq = (std::max(context, table_context) + bs - 1) / bs;
  const int num_blocks = batch * blocks_per_seq;
  const std::size_t pool = static_cast<std::size_t>(num_blocks) * kv_heads * bs * hd;
  const int seen = window > 0 ? std::min(context, window + q_len - 1) : context; // positions a sequence's tokens see
  const double kv_bytes = 2.0 * batch * seen * kv_heads * hd * sizeof(C);
  const int copies = copies_for(static_cast<std::size_t>(kv_bytes)); // small caches rotate past L2
  auto k = random_values<C>(pool * copies, 1), v = random_values<C>(pool * copies, 2);
  const int tokens = batch * q_len, q_stride = (heads + 2 * kv_heads) * hd;
  auto q = random_bf16(static_cast<std::size_t>(tokens) * q_stride, 3);
  kcu::device_buffer<bf16> out(static_cast<std::size_t>(tokens) * heads * hd);
  std::vector<std::int32_t> table(num_blocks), qs(batch + 1), pos(tokens);
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), std::mt19937(4));
  std::vector<kcu::device_buffer<std::int32_t>> d_tables;
  for (int c = 0; c < copies; ++c) {
    std::vector<std::int32_t> shifted(table);
    for (auto& b : shifted)
      b += c * num_blocks;
    d_tables.emplace_back(shifted.size());
    d_tables.back().upload(shifted);
  }
  for (int b = 0; b <= batch; ++b)
    qs[b] = b * q_len;
  double visible = 0.0; // (token, position) pairs
  for (int t = 0; t < tokens; ++t) {
    pos[t] = context - q_len + t % q_len;
    visible += window > 0 ? std::min(pos[t] + 1, window) : pos[t] + 1.0;
  }
  kcu::device_buffer<std::int32_t> d_qs(qs.size()), d_pos(pos.size());
  d_qs.upload(qs);
  d_pos.upload(pos);
  kcu::device_buffer<float> workspace(std::max<std::size_t>(
      kcu::paged_attention_workspace_bytes(tokens, heads, kv_heads, hd, blocks_per_seq * bs) / sizeof(float), 1));
  kcu::paged_attention_params<bf16, C> p;
  p.q = q.data();
  p.q_stride = q_stride;
  p.out = out.data();
  p.k_cache = k.data();
  p.v_cache = v.data();
  p.positions = d_pos.data();
  p.query_start = d_qs.data();
  p.tokens = tokens;
  p.seqs = batch;
  p.max_blocks_per_seq = blocks_per_seq;
  p.heads = heads;
  p.kv_heads = kv_heads;
  p.head_dim = hd;
  p.block_size = bs;
  p.scale = 0.088f;
  p.window = window;
  p.softcap = softcap;
  kcu::device_buffer<std::uint32_t> split_counters(kcu::paged_attention_counter_count(tokens, heads));
  split_counters.fill_bytes(0);
  if (fast) {
    p.workspace = workspace.data();
    p.workspace_bytes = workspace.bytes();
    p.min_partition = min_partition;
    p.split_counters = counters ? split_counters.data() : nullptr;
    p.min_query_len = q_len; // as the runner passes them: prefill chunks launch no split-K grid,
    p.max_query_len = q_len; // decode batches no prefill tiles
  }
  auto launch = [&](int i) {
    auto c = p;
    c.block_tables = d_tables[i].data();
    return kcu::paged_attention(c, stream);
  };
  const double bytes = kv_bytes + 2.0 * tokens * heads * hd * sizeof(bf16);
  const double us = time_us(launch, copies, stream, 20);
  const double graph_us = graph_time_us(launch, copies, stream);
  if (profile_launches) { // one more launch, on the input set used longest ago (not in L2), for ncu
    kcu::check(cudaProfilerStart(), "cudaProfilerStart");
    kcu::check(launch(std::max(copies, 8) % copies), "profiled launch");
    kcu::check(cudaStreamSynchronize(stream), "profiled launch");
    kcu::check(cudaProfilerStop(), "cudaProfilerStop");
  }
  // The partitions this context is divided into (the plan counts them for the table's width);
  // under a window, its span from its first visible position rounded down to a 64-position granule.
  const int per_part = kcu::paged_attention_partition_size<bf16, C>(tokens, heads, kv_heads, hd, blocks_per_seq * bs,
                                                                    workspace.bytes(), min_partition, context, window);
  const int span = context - std::max(0, window > 0 ? context - window : 0) / 64 * 64;
  const int used_parts = (span + per_part - 1) / per_part;
  std::string path = !fast ? " (simple kernel)"
                     : q_len == 1 && used_parts > 1
                         ? ", split " + std::to_string(used_parts) + " x " + std::to_string(per_part)
                         : "";
  if (table_context > context)
    path += ", tables " + std::to_string(blocks_per_seq * bs) + " wide";
  if (window > 0)
    path = ", window " + std::to_string(window) + path;
  if (fast && !counters && q_len == 1 && used_parts > 1)
    path += ", combine kernel";
  if (softcap > 0.0f)
    path += ", softcap " + std::to_string(static_cast<int>(softcap));
  char name[200];
  std::snprintf(name, sizeof name, "paged_attention %s %s: batch %d x %d q, ctx %d, %d/%d heads, hd %d, bs %d%s", label,
                std::is_same_v<C, fp8> ? "fp8" : "bf16", batch, q_len, context, heads, kv_heads, hd, bs, path.c_str());
  return {name, us, bytes, 4.0 * hd * heads * visible, graph_us};
}

// The linear layers of a Llama-2-13B decode step: y[m, n] = x[m, k] · w[n, k]ᵀ.
struct linear_layer {
  const char* name;
  int n, k;
};
constexpr linear_layer decode_layers_13b[] = {
    {"qkv", 15360, 5120}, {"o", 5120, 5120}, {"gate_up", 27648, 5120}, {"down", 5120, 13824}};
// ... and of Llama-3-8B, with the LM heads of both.
constexpr linear_layer decode_layers_8b[] = {
    {"8B qkv", 6144, 4096}, {"8B o", 4096, 4096}, {"8B gate_up", 28672, 4096}, {"8B down", 4096, 14336}};
constexpr linear_layer lm_heads[] = {{"13B LM head", 32000, 5120}, {"8B LM head", 128256, 4096}};

// How bench_linear computes a layer: through cuBLASLt, or the GEMV with its own choice of
// warps a row (gemv_split), or with a given one (1..gemv_max_split).
constexpr int through_cublaslt = -1, gemv_own_split = 0;

// One linear layer of a small decode batch, y[m, n] = x[m, k] · w[n, k]ᵀ in E (bf16 or fp16),
// through cuBLASLt or troupe's GEMV, alone between events and back to back in a graph. Bytes:
// the weights (x and y are a few KB).
template <class E = bf16>
row bench_linear(const char* layer, int m, int n, int k, int how, kcu::cublaslt_gemm& gemm, cudaStream_t stream) {
  const std::size_t w_elems = static_cast<std::size_t>(n) * k;
  const int copies = copies_for(w_elems * sizeof(E));
  auto w = random_values<E>(w_elems * copies, 11), x = random_values<E>(static_cast<std::size_t>(m) * k, 12);
  kcu::device_buffer<E> y(static_cast<std::size_t>(m) * n);
  auto launch = [&](int i) -> cudaError_t {
    const E* wi = w.data() + i * w_elems;
    if (how == gemv_own_split)
      return kcu::gemv(x.data(), wi, y.data(), m, n, k, stream);
    if (how > 0)
      return kcu::gemv(x.data(), wi, y.data(), m, n, k, stream, how);
    const auto type = std::is_same_v<E, bf16> ? kcu::gemm_type::bf16 : kcu::gemm_type::f16;
    return gemm.linear(x.data(), wi, y.data(), m, n, k, type, type, stream) == CUBLAS_STATUS_SUCCESS ? cudaSuccess
                                                                                                     : cudaErrorUnknown;
  };
  char name[160];
  const char* dtype = std::is_same_v<E, bf16> ? "" : " fp16";
  if (how == through_cublaslt)
    std::snprintf(name, sizeof name, "linear %s%s: %d x %d x %d (m x n x k), cuBLASLt", layer, dtype, m, n, k);
  else
    std::snprintf(name, sizeof name, "linear %s%s: %d x %d x %d (m x n x k), troupe GEMV, %d warps a row", layer, dtype,
                  m, n, k, how == gemv_own_split ? kcu::gemv_split(k) : how);
  const double us = time_us(launch, copies, stream);
  std::pair<double, double> range;
  const double graph_us = graph_time_us(launch, copies, stream, 20, &range);
  return {name, us, static_cast<double>(w_elems * sizeof(E)), 0.0, graph_us, range};
}

// --fp8-gemv: the same layer with e4m3 weights, a scale a row (group == k) or per `group` columns,
// through fp8_gemv. Bytes: the codes and scales (x and y are a few KB).
row bench_fp8_linear(const char* layer, int m, int n, int k, int group, cudaStream_t stream) {
  const std::size_t w_elems = static_cast<std::size_t>(n) * k, s_elems = static_cast<std::size_t>(n) * (k / group);
  const std::size_t bytes = w_elems + s_elems * sizeof(float);
  const int copies = copies_for(bytes);
  auto codes = random_values<fp8>(w_elems * copies, 11);
  auto scales = random_values<float>(s_elems * copies, 13);
  auto x = random_values<bf16>(static_cast<std::size_t>(m) * k, 12);
  kcu::device_buffer<bf16> y(static_cast<std::size_t>(m) * n);
  auto launch = [&](int i) -> cudaError_t {
    const kcu::fp8_weight_view w{reinterpret_cast<const std::uint8_t*>(codes.data() + i * w_elems),
                                 scales.data() + i * s_elems, group};
    return kcu::fp8_gemv(x.data(), w, static_cast<const bf16*>(nullptr), y.data(), m, n, k, stream);
  };
  char name[160];
  std::snprintf(name, sizeof name, "linear %s fp8: %d x %d x %d (m x n x k), fp8 GEMV, scale per %s, %d warps a row",
                layer, m, n, k, group == k ? "row" : "128 columns", kcu::fp8_gemv_split(k));
  const double us = time_us(launch, copies, stream);
  std::pair<double, double> range;
  const double graph_us = graph_time_us(launch, copies, stream, 20, &range);
  return {name, us, static_cast<double>(bytes), 0.0, graph_us, range};
}

// --fp8-gemv (and --int4-gemv): the same layer with INT4 codes and a {scale, zero} per 128 columns
// (AWQ's form), through int4_gemv. Bytes: the codes and group records.
row bench_int4_linear(const char* layer, int m, int n, int k, cudaStream_t stream) {
  constexpr int group = 128;
  const std::size_t words = static_cast<std::size_t>(n) * k / 8, g_elems = 2 * static_cast<std::size_t>(n) * (k / group);
  const std::size_t bytes = words * 4 + g_elems * sizeof(float);
  const int copies = copies_for(bytes);
  // Random bytes as codes (the bits of random e4m3 values); scales and zeros: any finite values time the same.
  auto codes = random_values<fp8>(words * 4 * copies, 11);
  auto groups = random_values<float>(g_elems * copies, 13);
  auto x = random_values<bf16>(static_cast<std::size_t>(m) * k, 12);
  kcu::device_buffer<bf16> y(static_cast<std::size_t>(m) * n);
  auto launch = [&](int i) -> cudaError_t {
    const kcu::int4_weight_view w{reinterpret_cast<const std::uint32_t*>(codes.data() + i * words * 4),
                                  reinterpret_cast<const float2*>(groups.data() + i * g_elems), group};
    return kcu::int4_gemv(x.data(), w, static_cast<const bf16*>(nullptr), y.data(), m, n, k, stream);
  };
  char name[160];
  std::snprintf(name, sizeof name, "linear %s int4: %d x %d x %d (m x n x k), int4 GEMV, groups of 128, %d warps a row",
                layer, m, n, k, kcu::int4_gemv_split(n, k));
  const double us = time_us(launch, copies, stream);
  std::pair<double, double> range;
  const double graph_us = graph_time_us(launch, copies, stream, 20, &range);
  return {name, us, static_cast<double>(bytes), 0.0, graph_us, range};
}

// --gemm-candidates: how much a per-shape autotune of cuBLASLt could gain on the 13B linear
// layers, at decode and prefill row counts. The heuristic's algorithms for y[m, n] = x · wᵀ (bf16,
// as cublaslt_gemm plans it, with the pointers' alignments), each timed like bench_linear; rows:
// the heuristic's first (what the runner runs), the fastest, and the rank of the fastest.
std::vector<row> bench_gemm_candidates(kcu::cublaslt_gemm& gemm, const char* layer, int m, int n, int k,
                                       cudaStream_t stream) {
  const std::size_t w_elems = static_cast<std::size_t>(n) * k;
  const int copies = copies_for(w_elems * sizeof(bf16));
  auto w = random_bf16(w_elems * copies, 11), x = random_bf16(static_cast<std::size_t>(m) * k, 12);
  kcu::device_buffer<bf16> y(static_cast<std::size_t>(m) * n);
  const auto type = kcu::gemm_type::bf16;
  const int found = gemm.candidate_count(x.data(), w.data(), y.data(), m, n, k, type, type);
  std::vector<double> us;
  for (int i = 0; i < found; ++i) {
    auto launch = [&](int copy) {
      return gemm.linear_candidate(i, x.data(), w.data() + copy * w_elems, y.data(), m, n, k, type, type, stream) ==
                     CUBLAS_STATUS_SUCCESS
                 ? cudaSuccess
                 : cudaErrorUnknown;
    };
    us.push_back(launch(0) == cudaSuccess ? time_us(launch, copies, stream) : 1e30);
  }
  std::vector<row> out;
  if (us.empty())
    return out;
  const auto best = std::min_element(us.begin(), us.end()) - us.begin();
  const double bytes = static_cast<double>(w_elems * sizeof(bf16));
  const double flops = 2.0 * m * n * static_cast<double>(k);
  char name[160];
  std::snprintf(name, sizeof name, "linear %s: %d x %d x %d, cuBLASLt heuristic's first of %d", layer, m, n, k, found);
  out.push_back({name, us[0], bytes, flops});
  std::snprintf(name, sizeof name, "linear %s: %d x %d x %d, cuBLASLt fastest of %d (rank %d)", layer, m, n, k, found,
                static_cast<int>(best) + 1);
  out.push_back({name, us[best], bytes, flops});
  return out;
}

// --qkv-bias: what a bias costs a QKV GEMM. Qwen2-7B's shape (n = 28 + 2 x 4 heads of 128, k = 3584)
// at decode and prefill row counts, y = x · wᵀ (+ b) in bf16. cuBLASLt never splits k when it adds a
// bias (cublaslt_gemm.hpp says why), so a row each: without the bias (the heuristic's free choice),
// with it, and for m <= gemv_max_rows the GEMV with the bias. The name carries cuBLASLt's algorithm.
std::vector<row> bench_qkv_bias(kcu::cublaslt_gemm& gemm, int m, int n, int k, cudaStream_t stream) {
  const std::size_t w_elems = static_cast<std::size_t>(n) * k;
  const int copies = copies_for(w_elems * sizeof(bf16));
  auto w = random_bf16(w_elems * copies, 11), x = random_bf16(static_cast<std::size_t>(m) * k, 12);
  auto bias = random_bf16(n, 13);
  kcu::device_buffer<bf16> y(static_cast<std::size_t>(m) * n);
  const auto type = kcu::gemm_type::bf16;
  const double bytes = static_cast<double>(w_elems * sizeof(bf16));
  const double flops = 2.0 * m * n * static_cast<double>(k);
  std::vector<row> out;
  for (const bf16* b : {static_cast<const bf16*>(nullptr), static_cast<const bf16*>(bias.data())}) {
    cublasStatus_t planned = CUBLAS_STATUS_SUCCESS;
    const auto algo = gemm.algorithm_of(x.data(), w.data(), y.data(), m, n, k, type, type, b, planned);
    kcu::check(planned, "planning the QKV GEMM");
    auto launch = [&](int i) {
      return gemm.linear(x.data(), w.data() + i * w_elems, y.data(), m, n, k, type, type, stream, b) ==
                     CUBLAS_STATUS_SUCCESS
                 ? cudaSuccess
                 : cudaErrorUnknown;
    };
    char name[200];
    std::snprintf(name, sizeof name, "qkv %d x %d x %d, cuBLASLt %s (algo %d, tile %d, split-K %d)", m, n, k,
                  b ? "with bias" : "no bias", algo.id, algo.tile, algo.split_k);
    out.push_back({name, time_us(launch, copies, stream), bytes, flops, graph_time_us(launch, copies, stream)});
  }
  if (m <= kcu::gemv_max_rows) {
    auto launch = [&](int i) {
      return kcu::gemv(x.data(), w.data() + i * w_elems, bias.data(), y.data(), m, n, k, stream);
    };
    char name[200];
    std::snprintf(name, sizeof name, "qkv %d x %d x %d, troupe GEMV with bias", m, n, k);
    out.push_back({name, time_us(launch, copies, stream), bytes, flops, graph_time_us(launch, copies, stream)});
  }
  return out;
}

row bench_add_rms_norm(int rows, int dim, cudaStream_t stream) {
  const std::size_t n = static_cast<std::size_t>(rows) * dim;
  const int copies = copies_for(3 * n * sizeof(bf16));
  auto residual = random_bf16(n * copies, 5), x = random_bf16(n * copies, 6), w = random_bf16(dim, 7);
  kcu::device_buffer<bf16> out(n * copies);
  auto launch = [&](int i) {
    return kcu::add_rms_norm<bf16>(residual.data() + i * n, x.data() + i * n, w.data(), out.data() + i * n, rows, dim,
                                   1e-5f, stream);
  };
  char name[96];
  std::snprintf(name, sizeof name, "add_rms_norm: %d x %d", rows, dim);
  return {name, time_us(launch, copies, stream), 4.0 * n * sizeof(bf16)};
}

row bench_silu(int rows, int inter, cudaStream_t stream) {
  const std::size_t n = static_cast<std::size_t>(rows) * inter;
  const int copies = copies_for(3 * n * sizeof(bf16));
  auto in = random_bf16(2 * n * copies, 8);
  kcu::device_buffer<bf16> out(n * copies);
  auto launch = [&](int i) {
    return kcu::silu_and_mul<bf16>(in.data() + 2 * i * n, out.data() + i * n, rows, inter, stream);
  };
  char name[96];
  std::snprintf(name, sizeof name, "silu_and_mul: %d x %d", rows, inter);
  return {name, time_us(launch, copies, stream), 3.0 * n * sizeof(bf16)};
}

row bench_rope(int tokens, int heads, int kv_heads, int hd, int bs, cudaStream_t stream) {
  const int width = (heads + 2 * kv_heads) * hd;
  const std::size_t n = static_cast<std::size_t>(tokens) * width;
  const int copies = copies_for(n * sizeof(bf16));
  auto qkv = random_bf16(n * copies, 9);
  const int num_blocks = (tokens + bs - 1) / bs;
  kcu::device_buffer<bf16> k(static_cast<std::size_t>(num_blocks) * kv_heads * bs * hd), v(k.size());
  std::vector<float> inv_freq(hd / 2);
  for (int i = 0; i < hd / 2; ++i)
    inv_freq[i] = std::pow(10000.0f, -2.0f * i / hd);
  std::vector<std::int32_t> pos(tokens);
  std::vector<std::int64_t> slots(tokens);
  std::iota(pos.begin(), pos.end(), 0);
  std::iota(slots.begin(), slots.end(), 0);
  kcu::device_buffer<float> d_freq(inv_freq.size());
  kcu::device_buffer<std::int32_t> d_pos(pos.size());
  kcu::device_buffer<std::int64_t> d_slots(slots.size());
  d_freq.upload(inv_freq);
  d_pos.upload(pos);
  d_slots.upload(slots);
  kcu::rope_write_kv_params<bf16, bf16> p;
  p.positions = d_pos.data();
  p.inv_freq = d_freq.data();
  p.slot_mapping = d_slots.data();
  p.k_cache = k.data();
  p.v_cache = v.data();
  p.tokens = tokens;
  p.heads = heads;
  p.kv_heads = kv_heads;
  p.head_dim = hd;
  p.block_size = bs;
  auto launch = [&](int i) {
    auto q = p;
    q.qkv = qkv.data() + i * n;
    return kcu::rope_write_kv(q, stream);
  };
  char name[96];
  std::snprintf(name, sizeof name, "rope_write_kv: %d tokens, %d/%d heads, hd %d", tokens, heads, kv_heads, hd);
  // Reads q, k, v; writes q back and k, v into the cache.
  const double bytes = static_cast<double>(tokens) * (2.0 * heads + 4.0 * kv_heads) * hd * sizeof(bf16);
  return {name, time_us(launch, copies, stream), bytes};
}

// Sampling `rows` rows of fp32 logits (normal, stddev 3: peaked like a model's) on the GPU,
// against what the host path costs for the same rows: the logits' copy to pageable memory
// plus runtime::sampler on one thread (timed on the host, median of 20).
std::vector<row> bench_sampling(int rows, int vocab, const char* what, const troupe::runtime::sampling_params& p,
                                cudaStream_t stream) {
  const std::size_t n = static_cast<std::size_t>(rows) * vocab;
  std::vector<float> host(n);
  std::mt19937 rng(rows * 31 + vocab);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (auto& x : host)
    x = normal(rng);
  kcu::device_buffer<float> logits(n);
  logits.upload(host);
  std::vector<kcu::sample_row_params> params(rows);
  for (int r = 0; r < rows; ++r)
    params[r] = {r, p.temperature, p.top_k, p.top_p, p.min_p, troupe::runtime::counter_uniform(r, 1)};
  kcu::device_buffer<kcu::sample_row_params> d_params(rows);
  d_params.upload(params);
  kcu::device_buffer<std::int32_t> tokens(rows);
  auto launch = [&](int) {
    return kcu::sample_rows(logits.data(), vocab, d_params.data(), rows, tokens.data(), stream);
  };
  char name[160];
  std::snprintf(name, sizeof name, "sample_rows %s: %d rows x vocab %d", what, rows, vocab);
  std::vector<row> out{{name, time_us(launch, 1, stream), static_cast<double>(n) * sizeof(float)}};

  std::vector<double> times;
  std::vector<float> copy(n);
  troupe::runtime::sampler sampler;
  for (int rep = 0; rep < 20; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    kcu::check(cudaMemcpyAsync(copy.data(), logits.data(), n * sizeof(float), cudaMemcpyDeviceToHost, stream),
               "cudaMemcpyAsync (logits)");
    kcu::check(cudaStreamSynchronize(stream), "sync");
    for (int r = 0; r < rows; ++r)
      sampler.sample(std::span<float>(copy).subspan(static_cast<std::size_t>(r) * vocab, vocab), p, {}, {},
                     static_cast<std::uint64_t>(r), 1);
    times.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(times.begin(), times.end());
  std::snprintf(name, sizeof name, "host path (logits copy + runtime::sampler) %s: %d rows x vocab %d", what, rows,
                vocab);
  out.push_back({name, times[times.size() / 2], static_cast<double>(n) * sizeof(float)});
  return out;
}

// Log-probabilities (chosen + top 5) of `rows` rows of the same peaked logits: the pass over
// each row's maximum and sum, and the register top-n.
row bench_logprobs(int rows, int vocab, cudaStream_t stream) {
  const std::size_t n = static_cast<std::size_t>(rows) * vocab;
  std::vector<float> host(n);
  std::mt19937 rng(rows * 17 + vocab);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (auto& x : host)
    x = normal(rng);
  kcu::device_buffer<float> logits(n);
  logits.upload(host);
  std::vector<kcu::logprob_row> params(rows);
  std::vector<std::int32_t> chosen(rows);
  for (int r = 0; r < rows; ++r) {
    params[r] = {r, r, 5};
    chosen[r] = (r * 7919) % vocab;
  }
  kcu::device_buffer<kcu::logprob_row> d_params(rows);
  d_params.upload(params);
  kcu::device_buffer<std::int32_t> tokens(rows);
  tokens.upload(chosen);
  kcu::device_buffer<kcu::logprob_result> out(rows);
  auto launch = [&](int) {
    return kcu::compute_logprobs(logits.data(), vocab, d_params.data(), rows, 5, tokens.data(), out.data(), stream);
  };
  char name[96];
  std::snprintf(name, sizeof name, "compute_logprobs top-5: %d rows x vocab %d", rows, vocab);
  return {name, time_us(launch, 1, stream), static_cast<double>(n) * sizeof(float) * 2};
}

// Repetition + frequency + presence penalties of `rows` rows, each over a history of `history` tokens.
row bench_penalties(int rows, int vocab, int history, cudaStream_t stream) {
  const std::size_t n = static_cast<std::size_t>(rows) * vocab;
  kcu::device_buffer<float> logits(2 * n); // the rows, then their scratch rows
  logits.fill_bytes(0);
  std::mt19937 rng(rows + history);
  std::uniform_int_distribution<int> any(0, vocab - 1);
  std::vector<std::int32_t> ids(static_cast<std::size_t>(rows) * history);
  for (auto& t : ids)
    t = any(rng);
  std::vector<kcu::penalty_row> params(rows);
  for (int r = 0; r < rows; ++r)
    params[r] = {r, rows + r, -1, r * history, history, history - 64, 1.2f, 0.5f, 0.5f};
  kcu::device_buffer<kcu::penalty_row> d_params(rows);
  d_params.upload(params);
  kcu::device_buffer<std::int32_t> tokens(ids.size());
  tokens.upload(ids);
  auto launch = [&](int) {
    return kcu::apply_penalties(logits.data(), vocab, d_params.data(), rows, tokens.data(), nullptr, stream);
  };
  char name[96];
  std::snprintf(name, sizeof name, "apply_penalties: %d rows x vocab %d, %d-token histories", rows, vocab, history);
  return {name, time_us(launch, 1, stream), static_cast<double>(ids.size()) * 4 * 3};
}

// Decode attention at Llama-3-8B shapes (32/8 heads, hd 128) over both caches: contexts 1k / 4k / 16k x batches
// --moe: one expert linear layer of a decode batch through moe_grouped_gemv: `batch` tokens, each on
// top_k distinct random experts of `experts`, grouped as moe_align groups them (offsets computed here).
// Bytes: the weights of the experts used (each read once: at most 8 rows a chunk here), xs and ys.
// The weights rotate over copies past L2 (Qwen3's 8 experts of gate/up are 50 MB).
row bench_moe_gemv(const char* layer, int experts, int top_k, int n, int k, int batch, cudaStream_t stream) {
  std::mt19937 rng(batch * 31 + n);
  std::vector<int> pool(experts), count(experts, 0);
  std::iota(pool.begin(), pool.end(), 0);
  for (int t = 0; t < batch; ++t) {
    std::shuffle(pool.begin(), pool.end(), rng);
    for (int j = 0; j < top_k; ++j)
      ++count[pool[j]];
  }
  std::vector<int> offsets(experts + 1, 0);
  int used = 0;
  for (int e = 0; e < experts; ++e) {
    offsets[e + 1] = offsets[e] + count[e];
    used += count[e] > 0;
  }
  const int entries = batch * top_k;
  const std::size_t w_elems = static_cast<std::size_t>(experts) * n * k;
  const double bytes = (static_cast<double>(used) * n * k + static_cast<double>(entries) * (n + k)) * sizeof(bf16);
  const int copies = copies_for(static_cast<std::size_t>(bytes));
  auto w = random_bf16(w_elems * copies, 21), xs = random_bf16(static_cast<std::size_t>(entries) * k, 22);
  kcu::device_buffer<bf16> ys(static_cast<std::size_t>(entries) * n);
  kcu::device_buffer<int> d_offsets(offsets.size());
  d_offsets.upload(offsets);
  auto launch = [&](int i) {
    return kcu::moe_grouped_gemv<bf16>(xs.data(), w.data() + i * w_elems, d_offsets.data(), experts, entries, n, k,
                                       ys.data(), stream);
  };
  char name[200];
  std::snprintf(name, sizeof name, "moe_grouped_gemv %s: batch %d, %d of %d experts used (top %d), %d x %d (n x k)",
                layer, batch, used, experts, top_k, n, k);
  const double us = time_us(launch, copies, stream);
  std::pair<double, double> range;
  const double graph_us = graph_time_us(launch, copies, stream, 20, &range);
  return {name, us, bytes, 0.0, graph_us, range};
}

// 1-64 at block size 16, then block sizes 32-128 at batch 8, ctx 4k. In the full table and in --decode-attention.
void push_decode_8b_grid(std::vector<row>& rows, cudaStream_t stream) {
  for (int context : {1024, 4096, 16384})
    for (int batch : {1, 8, 32, 64}) {
      rows.push_back(bench_attention<bf16>("decode 8B", batch, 1, context, 32, 8, 128, 16, stream));
      rows.push_back(bench_attention<fp8>("decode 8B", batch, 1, context, 32, 8, 128, 16, stream));
    }
  for (int bs : {32, 64, 128}) {
    rows.push_back(bench_attention<bf16>("decode 8B", 8, 1, 4096, 32, 8, 128, bs, stream));
    rows.push_back(bench_attention<fp8>("decode 8B", 8, 1, 4096, 32, 8, 128, bs, stream));
  }
}

} // namespace

int main(int argc, char** argv) {
  std::string out_path;
  bool sweep = false;        // --sweep: only the split-K partition sweep of decode attention
  bool candidates = false;   // --gemm-candidates: only cuBLASLt's candidate algorithms at decode shapes
  bool decode_only = false;  // --decode-attention: only the split-K decode attention rows
  bool prefill_only = false; // --prefill-attention: only the prefill attention rows
  bool gemv_sweep = false;   // --gemv: only the decode linear layers, cuBLASLt and the GEMV at each split
  bool qkv_bias = false;     // --qkv-bias: only a QKV GEMM with and without its bias
  bool fp8_gemv = false;     // --fp8-gemv: only the 13B decode linear layers, bf16 against fp8 weights
  bool sampling = false;     // --sampling: only the sampler, log-probability and penalty kernels
  bool sliding = false;      // --sliding-window: only decode attention under a sliding window against full
  bool softcap = false;      // --softcap: only attention with a logit cap against none
  bool moe = false;          // --moe: only the MoE experts' grouped GEMV
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--sampling")
      sampling = true;
    if (std::string(argv[i]) == "--out" && i + 1 < argc)
      out_path = argv[i + 1];
    if (std::string(argv[i]) == "--sweep")
      sweep = true;
    if (std::string(argv[i]) == "--gemm-candidates")
      candidates = true;
    if (std::string(argv[i]) == "--decode-attention")
      decode_only = true;
    if (std::string(argv[i]) == "--profile-attention")
      profile_launches = true;
    if (std::string(argv[i]) == "--prefill-attention")
      prefill_only = true;
    if (std::string(argv[i]) == "--gemv")
      gemv_sweep = true;
    if (std::string(argv[i]) == "--qkv-bias")
      qkv_bias = true;
    if (std::string(argv[i]) == "--fp8-gemv" || std::string(argv[i]) == "--int4-gemv")
      fp8_gemv = true;
    if (std::string(argv[i]) == "--sliding-window")
      sliding = true;
    if (std::string(argv[i]) == "--softcap")
      softcap = true;
    if (std::string(argv[i]) == "--moe")
      moe = true;
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::puts("no CUDA device");
    return 77;
  }
  try {
    kcu::cuda_stream stream;
    std::vector<row> rows;
    if (sweep) {
      // Decode attention over partition sizes (0: the launcher's choice), with tables as wide as
      // the context and as wide as the engine's (4096 positions: Llama-2-13B's whole context).
      for (int table : {0, 4096})
        for (int part : {0, 128, 256, 384, 512, 768, 1024, 2048}) {
          rows.push_back(bench_attention<bf16>("decode 13B", 12, 1, 1501, 40, 40, 128, 16, stream, true, table, part));
          rows.push_back(bench_attention<bf16>("decode 13B", 1, 1, 1501, 40, 40, 128, 16, stream, true, table, part));
        }
      for (int part : {0, 256, 512, 1024})
        rows.push_back(bench_attention<bf16>("decode 13B", 8, 1, 4096, 40, 40, 128, 16, stream, true, 0, part));
      for (int part : {0, 256, 512, 1024})
        rows.push_back(bench_attention<bf16>("decode 8B", 8, 1, 4096, 32, 8, 128, 16, stream, true, 0, part));
    }
    if (candidates) {
      // Decode batches, and prefill of 1,000 and 4,096 tokens (where the rate is FLOPs).
      kcu::cublaslt_gemm gemm;
      for (int m : {1, 12, 1000, 4096})
        for (auto [name, n, k] : decode_layers_13b)
          for (auto& r : bench_gemm_candidates(gemm, name, m, n, k, stream))
            rows.push_back(std::move(r));
    }
    if (profile_launches && !prefill_only) {
      // Small decode batches, where a block's fixed costs show: GQA (tensor cores) and MHA (CUDA cores).
      rows.push_back(bench_attention<bf16>("decode 8B", 8, 1, 4096, 32, 8, 128, 16, stream));
      rows.push_back(bench_attention<fp8>("decode 8B", 8, 1, 4096, 32, 8, 128, 16, stream));
      rows.push_back(bench_attention<bf16>("decode 8B", 1, 1, 1024, 32, 8, 128, 16, stream));
      rows.push_back(bench_attention<bf16>("decode 13B", 1, 1, 1501, 40, 40, 128, 16, stream, true, 4096));
      rows.push_back(bench_attention<bf16>("decode 8B", 64, 1, 4096, 32, 8, 128, 16, stream));
      rows.push_back(bench_attention<bf16>("decode 8B", 8, 1, 16384, 32, 8, 128, 16, stream));
      rows.push_back(bench_attention<bf16>("decode 8B", 1, 1, 16384, 32, 8, 128, 16, stream));
      rows.push_back(bench_attention<bf16>("decode 8B", 8, 1, 1024, 32, 8, 128, 16, stream));
    }
    if (decode_only) {
      rows.push_back(bench_attention<bf16>("decode 13B", 12, 1, 1536, 40, 40, 128, 16, stream));
      rows.push_back(bench_attention<fp8>("decode 13B", 12, 1, 1536, 40, 40, 128, 16, stream));
      rows.push_back(bench_attention<bf16>("decode 13B", 8, 1, 4096, 40, 40, 128, 16, stream));
      rows.push_back(bench_attention<fp8>("decode 13B", 8, 1, 4096, 40, 40, 128, 16, stream));
      rows.push_back(bench_attention<bf16>("decode 13B", 1, 1, 1501, 40, 40, 128, 16, stream, true, 4096));
      rows.push_back(bench_attention<fp8>("decode 13B", 1, 1, 1501, 40, 40, 128, 16, stream, true, 4096));
      push_decode_8b_grid(rows, stream);
      rows.push_back(bench_attention<bf16>("decode 8B", 12, 1, 1500, 32, 8, 128, 16, stream, true, 8192));
      rows.push_back(bench_attention<fp8>("decode 8B", 12, 1, 1500, 32, 8, 128, 16, stream, true, 8192));
      // Long contexts, where a token may take more than 16 partitions of 2048 positions or more.
      for (int context : {32768, 65536, 131072})
        for (int batch : {1, 2}) {
          rows.push_back(bench_attention<bf16>("decode 8B", batch, 1, context, 32, 8, 128, 16, stream));
          rows.push_back(bench_attention<fp8>("decode 8B", batch, 1, context, 32, 8, 128, 16, stream));
        }
    }
    if (gemv_sweep) {
      // Every decode linear layer of the 13B and 8B shapes at m = 1 and 2: cuBLASLt, then the GEMV
      // at each number of warps a row.
      kcu::cublaslt_gemm gemm;
      for (int m : {1, 2})
        for (auto layers : {std::span<const linear_layer>(decode_layers_13b),
                            std::span<const linear_layer>(decode_layers_8b), std::span<const linear_layer>(lm_heads)})
          for (const auto& [name, n, k] : layers)
            for (int how : {through_cublaslt, 1, 2, 4, 8})
              rows.push_back(bench_linear(name, m, n, k, how, gemm, stream));
      // fp16 weights (model.dtype=float16) at one row: cuBLASLt and the GEMV at its own split.
      for (auto layers : {std::span<const linear_layer>(decode_layers_13b), std::span<const linear_layer>(lm_heads)})
        for (const auto& [name, n, k] : layers)
          for (int how : {through_cublaslt, gemv_own_split})
            rows.push_back(bench_linear<__half>(name, 1, n, k, how, gemm, stream));
    }
    if (fp8_gemv) {
      // Every 13B decode linear layer: cuBLASLt and the GEMV on bf16 weights, fp8_gemv on e4m3.
      kcu::cublaslt_gemm gemm;
      for (int m : {1, 2, 4, 8, 16})
        for (const auto& [name, n, k] : decode_layers_13b) {
          rows.push_back(bench_linear(name, m, n, k, through_cublaslt, gemm, stream));
          if (m <= kcu::gemv_max_rows)
            rows.push_back(bench_linear(name, m, n, k, gemv_own_split, gemm, stream));
          if (m <= kcu::fp8_gemv_max_rows)
            for (int group : {k, 128})
              rows.push_back(bench_fp8_linear(name, m, n, k, group, stream));
          rows.push_back(bench_int4_linear(name, m, n, k, stream));
        }
    }
    if (qkv_bias) {
      kcu::cublaslt_gemm gemm;
      for (int m : {1, 2, 3, 4, 6, 8, 12, 16, 32, 64, 256, 1000, 4096})
        for (auto& r : bench_qkv_bias(gemm, m, 4608, 3584, stream))
          rows.push_back(std::move(r));
    }
    if (sliding) {
      // A window's cost should be that of full attention at a context of the window, not of the
      // context: each batch as full attention at 4,096, under a window of 4,096 at 32,768, and as
      // full attention at 32,768 (tables as wide as the context).
      for (int batch : {1, 16}) {
        rows.push_back(bench_attention<bf16>("decode 8B", batch, 1, 4096, 32, 8, 128, 128, stream));
        rows.push_back(
            bench_attention<bf16>("decode 8B", batch, 1, 32768, 32, 8, 128, 128, stream, true, 0, 0, true, 4096));
        rows.push_back(bench_attention<bf16>("decode 8B", batch, 1, 32768, 32, 8, 128, 128, stream));
      }
    }
    if (softcap) {
      for (float cap : {0.0f, 50.0f}) {
        rows.push_back(
            bench_attention<bf16>("decode 8B", 16, 1, 4096, 32, 8, 128, 16, stream, true, 0, 0, true, 0, cap));
        rows.push_back(
            bench_attention<fp8>("decode 8B", 16, 1, 4096, 32, 8, 128, 16, stream, true, 0, 0, true, 0, cap));
        rows.push_back(
            bench_attention<bf16>("decode 13B", 12, 1, 1536, 40, 40, 128, 16, stream, true, 0, 0, true, 0, cap));
        rows.push_back(
            bench_attention<bf16>("prefill 8B", 2, 512, 1024, 32, 8, 128, 16, stream, true, 0, 0, true, 0, cap));
      }
    }
    if (prefill_only) {
      rows.push_back(bench_attention<bf16>("prefill 8B", 2, 512, 1024, 32, 8, 128, 16, stream));
      rows.push_back(bench_attention<bf16>("prefill 13B", 1, 1000, 1000, 40, 40, 128, 16, stream));
      rows.push_back(bench_attention<bf16>("prefill 13B", 1, 4096, 4096, 40, 40, 128, 16, stream));
      rows.push_back(bench_attention<fp8>("prefill 13B", 1, 4096, 4096, 40, 40, 128, 16, stream));
    }
    if (sampling) {
      troupe::runtime::sampling_params nucleus;
      nucleus.temperature = 0.8f;
      nucleus.top_p = 0.9f;
      for (auto [rows_n, vocab] : {std::pair{1, 32000}, std::pair{12, 32000}, std::pair{1, 128256},
                                   std::pair{12, 128256}, std::pair{64, 128256}}) {
        rows.push_back(bench_sampling(rows_n, vocab, "temperature 0.8, top-p 0.9", nucleus, stream).front());
        rows.push_back(bench_logprobs(rows_n, vocab, stream));
        rows.push_back(bench_penalties(rows_n, vocab, 1501, stream));
      }
    }
    if (moe) {
      // Mixtral-8x7B (hidden 4096, intermediate 14336, top 2 of 8) and Qwen3-30B-A3B (2048, 768, top 8 of 128).
      for (int batch : {1, 16}) {
        rows.push_back(bench_moe_gemv("Mixtral-8x7B gate_up", 8, 2, 28672, 4096, batch, stream));
        rows.push_back(bench_moe_gemv("Mixtral-8x7B down", 8, 2, 4096, 14336, batch, stream));
        rows.push_back(bench_moe_gemv("Qwen3-30B-A3B gate_up", 128, 8, 1536, 2048, batch, stream));
        rows.push_back(bench_moe_gemv("Qwen3-30B-A3B down", 128, 8, 2048, 768, batch, stream));
      }
    }
    if (!sweep && !candidates && !decode_only && !profile_launches && !prefill_only && !gemv_sweep && !qkv_bias &&
        !sampling && !fp8_gemv && !sliding && !softcap && !moe) {
      // Llama-2-13B (40 heads, MHA, hd 128) and Llama-3-8B (32/8 heads) shapes.
      rows.push_back(bench_attention<bf16>("decode 13B", 12, 1, 1536, 40, 40, 128, 16, stream, false));
      rows.push_back(bench_attention<bf16>("decode 13B", 12, 1, 1536, 40, 40, 128, 16, stream));
      rows.push_back(bench_attention<bf16>("decode 13B", 64, 1, 2048, 40, 40, 128, 16, stream));
      for (int bs : {16, 32, 64, 128})
        rows.push_back(bench_attention<bf16>("decode 13B", 8, 1, 4096, 40, 40, 128, bs, stream));
      rows.push_back(bench_attention<fp8>("decode 13B", 12, 1, 1536, 40, 40, 128, 16, stream));
      for (int bs : {16, 128})
        rows.push_back(bench_attention<fp8>("decode 13B", 8, 1, 4096, 40, 40, 128, bs, stream));
      rows.push_back(bench_attention<bf16>("decode 8B", 64, 1, 2048, 32, 8, 128, 16, stream, false));
      rows.push_back(bench_attention<bf16>("decode 8B", 64, 1, 2048, 32, 8, 128, 128, stream));
      // Split-K partitions merged by the combine kernel, as before the merge moved into the split kernels.
      rows.push_back(bench_attention<bf16>("decode 13B", 1, 1, 1501, 40, 40, 128, 16, stream, true, 4096));
      rows.push_back(bench_attention<bf16>("decode 13B", 1, 1, 1501, 40, 40, 128, 16, stream, true, 4096, 0, false));
      rows.push_back(bench_attention<bf16>("decode 13B", 12, 1, 1501, 40, 40, 128, 16, stream, true, 4096));
      rows.push_back(bench_attention<bf16>("decode 13B", 12, 1, 1501, 40, 40, 128, 16, stream, true, 4096, 0, false));
      for (int batch : {1, 8}) {
        rows.push_back(bench_attention<bf16>("decode 8B", batch, 1, 4096, 32, 8, 128, 16, stream, true, 0, 0, false));
        rows.push_back(bench_attention<fp8>("decode 8B", batch, 1, 4096, 32, 8, 128, 16, stream, true, 0, 0, false));
      }
      push_decode_8b_grid(rows, stream);
      rows.push_back(bench_attention<bf16>("prefill 8B", 2, 512, 1024, 32, 8, 128, 16, stream, false));
      rows.push_back(bench_attention<bf16>("prefill 8B", 2, 512, 1024, 32, 8, 128, 16, stream));
      rows.push_back(bench_attention<bf16>("prefill 13B", 1, 1000, 1000, 40, 40, 128, 16, stream, false));
      rows.push_back(bench_attention<bf16>("prefill 13B", 1, 1000, 1000, 40, 40, 128, 16, stream));
      rows.push_back(bench_attention<bf16>("prefill 13B", 1, 4096, 4096, 40, 40, 128, 16, stream));
      rows.push_back(bench_attention<fp8>("prefill 13B", 1, 4096, 4096, 40, 40, 128, 16, stream));
      {
        // The 13B decode step's linear layers at batch 1 and 2.
        kcu::cublaslt_gemm gemm;
        for (int m : {1, 2})
          for (auto [name, n, k] : decode_layers_13b)
            for (int how : {through_cublaslt, gemv_own_split})
              rows.push_back(bench_linear(name, m, n, k, how, gemm, stream));
      }
      rows.push_back(bench_add_rms_norm(12, 5120, stream));
      rows.push_back(bench_add_rms_norm(4096, 5120, stream));
      rows.push_back(bench_silu(12, 13824, stream));
      rows.push_back(bench_silu(4096, 13824, stream));
      rows.push_back(bench_rope(12, 40, 40, 128, 16, stream));
      rows.push_back(bench_rope(4096, 32, 8, 128, 16, stream));
      troupe::runtime::sampling_params greedy, nucleus;
      greedy.temperature = 0.0f;
      nucleus.temperature = 0.8f;
      nucleus.top_p = 0.9f;
      troupe::runtime::sampling_params top_k = nucleus;
      top_k.top_k = 50;
      for (const auto& [what, p] : {std::pair{"greedy", greedy}, std::pair{"temperature 0.8, top-p 0.9", nucleus},
                                    std::pair{"top-k 50, top-p 0.9", top_k}})
        for (auto [rows_n, vocab] : {std::pair{1, 32000}, std::pair{12, 32000}, std::pair{64, 128256}})
          for (auto& r : bench_sampling(rows_n, vocab, what, p, stream))
            rows.push_back(std::move(r));
    }

    // "in a graph": the same kernel, per launch, back to back in a CUDA graph (graph_time_us);
    // attention and linear rows only; linear rows add (fastest-slowest) of the repetitions.
    std::string table =
        "| kernel | median us | GB/s | of 4.3 TB/s | TFLOP/s | of 790 TFLOP/s | in a graph us | "
        "of 4.3 TB/s in a graph |\n"
        "|---|---:|---:|---:|---:|---:|---:|---:|\n";
    for (const auto& r : rows) {
      char line[480], compute[64] = "- | -", graph[80] = "- | -";
      const double rate = r.bytes / (r.us * 1e-6);
      if (r.flops > 0.0) {
        const double flops = r.flops / (r.us * 1e-6);
        std::snprintf(compute, sizeof compute, "%.1f | %.1f%%", flops / 1e12, 100.0 * flops / ceiling_flops);
      }
      if (r.graph_us > 0.0 && r.graph_range.second > 0.0)
        std::snprintf(graph, sizeof graph, "%.1f (%.1f-%.1f) | %.1f%%", r.graph_us, r.graph_range.first,
                      r.graph_range.second, 100.0 * r.bytes / (r.graph_us * 1e-6) / ceiling_bytes_per_s);
      else if (r.graph_us > 0.0)
        std::snprintf(graph, sizeof graph, "%.1f | %.1f%%", r.graph_us,
                      100.0 * r.bytes / (r.graph_us * 1e-6) / ceiling_bytes_per_s);
      std::snprintf(line, sizeof line, "| %s | %.1f | %.0f | %.1f%% | %s | %s |\n", r.name.c_str(), r.us, rate / 1e9,
                    100.0 * rate / ceiling_bytes_per_s, compute, graph);
      table += line;
    }
    std::fputs(table.c_str(), stdout);
    if (!out_path.empty())
      if (FILE* f = std::fopen(out_path.c_str(), "w")) {
        std::fputs(table.c_str(), f);
        std::fclose(f);
      }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_kernels_gpu: %s\n", e.what());
    return 1;
  }
  return 0;
}
