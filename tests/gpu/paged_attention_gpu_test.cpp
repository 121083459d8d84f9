// The CUDA paged attention matches the CPU reference over mixed batches: a
// fresh prefill, prefill chunks over a cached prefix, decodes with short and
// long (multi-tile) contexts and an empty sequence, in scattered blocks of
// size 1, 16 and 128; MHA and GQA; head sizes 8..256 (256 with a group of 16
// needs more than 48 KiB of shared memory); q read with the fused QKV row stride.
// Each batch runs on the simple kernel (no workspace) and on the fast paths (with
// a workspace poisoned with NaN): split-K decode over contexts of 1..5000 placed
// around the partition boundaries, the tensor-core prefill tiles (sequence lengths
// that are not multiples of the tile, cached prefixes, block sizes that are no power
// of two), MHA decode over blocks of 1 to 256 rows, and a too-small workspace. Calls the
// tiles cannot serve (q off 16-byte alignment, a negative scale) must be routed to the
// split-K kernels. A decode right behind the RoPE kernel reads the rows RoPE writes.
// Sliding windows (paged_attention_params::window) on every path, with the cache before each
// sequence's earliest window NaN; a window past every context is full attention, bit for bit.
// Gemma 2's logit soft-capping (paged_attention_params::softcap) on every path, with and without
// a window, over scores large enough for the cap to matter.
// Tolerances: fp32 |d| <= 2e-5 (1 + |x|) (online vs two-pass softmax, order of sums);
// 16-bit activations T (bf16, fp16; over a cache of T or fp8) |d| <= 1e-4 + 2u |x|, u T's
// unit roundoff (2^-8, 2^-11): the inputs are exactly what the CPU sees (rounded first), the
// arithmetic is fp32 (the tensor-core decode kernels multiply bf16 / fp16 inputs exactly and
// split P into two parts of T, or two fp16 parts for an fp8 cache), and the output is rounded
// once. Rows of prefill chunks may also have P rounded to T (the prefill tiles do):
// probability_rounding_allowance.
// TROUPE_GPU_TEST_SMALL=1 runs every case at reduced sizes (scripts/gpu-run's compute-sanitizer
// pass, which slows kernels by orders of magnitude): see small_sizes().
#include <doctest/doctest.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <numeric>
#include <string_view>

#include "kernels/cpu/cpu_kernels.hpp"
#include "kernels/cuda/cuda_graph.hpp"
#include "kernels/cuda/cuda_stream.hpp"
#include "kernels/cuda/paged_attention.hpp"
#include "kernels/cuda/rope_write_kv.hpp"
#include "runtime/rope.hpp"
#include "tests/gpu/gpu_test_support.hpp"

using namespace troupe::testing::gpu;
namespace kcu = troupe::kernels::cuda;
namespace kcpu = troupe::kernels::cpu;

namespace {

struct seq_shape {
  int cached; // positions already in the cache before this step
  int fresh;  // this step's tokens (0: the sequence is in the batch without tokens)
};

// TROUPE_GPU_TEST_SMALL=1: long_decodes reach 1200 positions instead of 5000 (still several
// partitions: the plan is made for the shorter width), and prefill chunks (sequences of more than one
// fresh token) are cut to 140 tokens over at most 300 cached ones (still more than one 128-token
// tile, off its size). Decodes keep their contexts: the cases whose point is a huge context (more
// than 32 partitions, 2^18 positions) need it, and a decode costs little next to a prefill.
bool small_sizes() {
  static const bool small = [] {
    const char* v = std::getenv("TROUPE_GPU_TEST_SMALL");
    return v != nullptr && std::string_view(v) == "1";
  }();
  return small;
}
std::vector<seq_shape> sized(std::vector<seq_shape> seqs) {
  if (small_sizes())
    for (auto& s : seqs)
      if (s.fresh > 1)
        s = {std::min(s.cached, 300), std::min(s.fresh, 140)};
  return seqs;
}

// none: the simple kernel; full: paged_attention_workspace_bytes and split-K counters (the
// partitions merge in their last block, as the runner calls it); separate: the same workspace
// without counters (a combine kernel merges); tiny: one float (coarser split); invariant: the
// batch-invariant plan (engine.deterministic: invariant_parts = 8, its workspace, counters).
enum class scratch { none, full, separate, tiny, invariant };

const std::vector<seq_shape> mixed_batch = {{0, 1}, {0, 37}, {50, 1}, {40, 0}, {130, 20}, {300, 1}, {17, 3}};

// Queries scaled far up make the softmax one-hot, but a (token, head) whose two best scores lie
// within the rounding of an fp32 dot product of that size (~0.1 of a logit at 2^20) has no
// one-hot answer the GPU and the CPU both reach: the two positions share the weight, by amounts
// that rounding decides. Such a query row is drawn again (as stored in T), so that every row's
// best score leads the next by at least 64 logits (a weight ratio of e^-64).
template <class T>
void separate_best_scores(std::vector<float>& qkv, int q_stride, float q_scale, float scale,
                          const std::vector<std::int32_t>& positions, const std::vector<std::int32_t>& query_start,
                          const std::vector<std::int32_t>& tables, int max_blocks, int heads, int kv_heads,
                          int head_dim, int block_size, int window, const std::vector<float>& k_cache,
                          std::mt19937& rng) {
  const int seqs = static_cast<int>(query_start.size()) - 1;
  for (int s = 0; s < seqs; ++s)
    for (int t = query_start[s]; t < query_start[s + 1]; ++t)
      for (int h = 0; h < heads; ++h) {
        float* q = qkv.data() + static_cast<std::size_t>(t) * q_stride + static_cast<std::size_t>(h) * head_dim;
        const int g = h / (heads / kv_heads);
        for (int attempt = 0;; ++attempt) {
          REQUIRE(attempt < 100);
          double best = -INFINITY, second = -INFINITY;
          const int first = window > 0 ? std::max(0, positions[t] - window + 1) : 0;
          for (int pos = first; pos <= positions[t]; ++pos) {
            const std::int32_t block = tables[static_cast<std::size_t>(s) * max_blocks + pos / block_size];
            const float* k =
                k_cache.data() +
                ((static_cast<std::size_t>(block) * kv_heads + g) * block_size + pos % block_size) * head_dim;
            double dot = 0.0;
            for (int d = 0; d < head_dim; ++d)
              dot += static_cast<double>(q[d]) * k[d];
            if (dot > best) {
              second = best;
              best = dot;
            } else if (dot > second)
              second = dot;
          }
          if (positions[t] == first || (best - second) * scale >= 64.0)
            break;
          std::vector<float> row = random_values(head_dim, rng);
          for (auto& x : row)
            x *= q_scale;
          round_through<T>(row);
          std::copy(row.begin(), row.end(), q);
        }
      }
}

// Ways a call may depart from the runner's, which some kernels cannot serve (the launcher must
// route it elsewhere): q two elements past a 16-byte boundary, with a row stride that is no
// multiple of 8 elements; a negative softmax scale.
struct call_quirks {
  int q_misalign = 0;
  float scale_sign = 1.0f;
};

// A batch laid out in the paged cache: block tables drawn from a shuffled pool (with spare blocks
// that no sequence uses), and each sequence's query positions (its fresh tokens after its cached ones).
struct paged_batch {
  std::vector<std::int32_t> tables, positions, query_start;
  int max_blocks = 0, total_blocks = 0;
};
paged_batch scatter_batch(const std::vector<seq_shape>& seqs, int block_size, std::mt19937& rng) {
  paged_batch b;
  b.total_blocks = 5;
  for (auto s : seqs) {
    const int blocks = (s.cached + s.fresh + block_size - 1) / block_size;
    b.max_blocks = std::max(b.max_blocks, blocks);
    b.total_blocks += blocks;
  }
  std::vector<std::int32_t> pool(b.total_blocks);
  std::iota(pool.begin(), pool.end(), 0);
  std::shuffle(pool.begin(), pool.end(), rng);
  b.tables.assign(seqs.size() * static_cast<std::size_t>(b.max_blocks), -1);
  b.query_start = {0};
  for (std::size_t s = 0; s < seqs.size(); ++s) {
    const int blocks = (seqs[s].cached + seqs[s].fresh + block_size - 1) / block_size;
    for (int i = 0; i < blocks; ++i) {
      b.tables[s * b.max_blocks + i] = pool.back();
      pool.pop_back();
    }
    for (int i = 0; i < seqs[s].fresh; ++i)
      b.positions.push_back(seqs[s].cached + i);
    b.query_start.push_back(static_cast<std::int32_t>(b.positions.size()));
  }
  return b;
}

// The q part (`q_width` values from `q_offset` on) of each of `tokens` fused QKV rows.
std::vector<float> query_rows(const std::vector<float>& qkv, int tokens, int q_stride, int q_offset, int q_width) {
  std::vector<float> q(static_cast<std::size_t>(tokens) * q_width);
  for (int t = 0; t < tokens; ++t)
    std::copy_n(qkv.data() + q_offset + static_cast<std::size_t>(t) * q_stride, q_width,
                q.data() + static_cast<std::size_t>(t) * q_width);
  return q;
}

// The CPU's attention (the reference) of the queries `q` over a batch laid out by scatter_batch,
// under a sliding window of `window` positions (0: none), its scores capped at `softcap` (0: none).
std::vector<float> reference_attention(const std::vector<float>& q, const paged_batch& b, int heads, int kv_heads,
                                       int head_dim, int block_size, float scale, const std::vector<float>& k_cache,
                                       const std::vector<float>& v_cache, int window = 0, float softcap = 0.0f) {
  std::vector<float> out(q.size());
  kcpu::paged_attention({.q = q,
                         .out = out,
                         .positions = b.positions,
                         .query_start = b.query_start,
                         .block_tables = b.tables,
                         .max_blocks_per_seq = b.max_blocks,
                         .heads = heads,
                         .kv_heads = kv_heads,
                         .head_dim = head_dim,
                         .block_size = block_size,
                         .scale = scale,
                         .window = window,
                         .softcap = softcap,
                         .k_cache = k_cache,
                         .v_cache = v_cache},
                        nullptr);
  return out;
}

// The allowance of each output element for the rounding of the probabilities P to T before P V,
// which the tensor-core prefill tiles do (as FlashAttention does; the row sums keep fp32): each
// weight moves by at most T's unit roundoff u of itself (2^-8 for bf16, 2^-11 for fp16), so an
// output by at most u sum_j w_j |v_j|, the attention over |V|. (fp16 weights below 2^-14 are
// subnormal and move by up to 2^-25 absolute instead; over these tests' contexts, at most a few
// thousand positions, that stays inside the 1e-4 every element is allowed.) Rows of sequences with
// more than 16 query tokens (those the tiles may take) get it; decode rows get none.
template <class T>
std::vector<float> probability_rounding_allowance(const std::vector<float>& q, const paged_batch& b,
                                                  const std::vector<seq_shape>& seqs, int heads, int kv_heads,
                                                  int head_dim, int block_size, float scale,
                                                  const std::vector<float>& k_cache, const std::vector<float>& v_cache,
                                                  int window, float softcap) {
  std::vector<float> v_abs(v_cache.size());
  std::transform(v_cache.begin(), v_cache.end(), v_abs.begin(), [](float v) { return std::abs(v); });
  std::vector<float> allowance =
      reference_attention(q, b, heads, kv_heads, head_dim, block_size, scale, k_cache, v_abs, window, softcap);
  const std::size_t row = static_cast<std::size_t>(heads) * head_dim;
  for (std::size_t s = 0; s < seqs.size(); ++s) {
    const float factor = seqs[s].fresh > 16 ? unit_roundoff<T>() : 0.0f;
    for (std::size_t i = b.query_start[s] * row; i < b.query_start[s + 1] * row; ++i)
      allowance[i] *= factor;
  }
  return allowance;
}

// Runs one call and checks it against the CPU reference; returns the GPU's output (as floats).
// `window`: paged_attention_params::window (0: none); `softcap`: paged_attention_params::softcap.
template <class T, class C>
std::vector<float> check_paged_attention(const std::vector<seq_shape>& requested, int heads, int kv_heads, int head_dim,
                                         int block_size, float kv_scale, scratch ws, unsigned seed,
                                         float q_scale = 1.0f, int min_query_len = 0, int max_query_len = 0,
                                         call_quirks quirks = {}, int window = 0, float softcap = 0.0f) {
  CAPTURE(window);
  CAPTURE(softcap);
  CAPTURE(heads);
  CAPTURE(kv_heads);
  CAPTURE(head_dim);
  CAPTURE(block_size);
  CAPTURE(seed);
  CAPTURE(q_scale);
  CAPTURE(static_cast<int>(ws));
  CAPTURE(quirks.q_misalign);
  CAPTURE(quirks.scale_sign);
  CAPTURE(small_sizes());
  const std::vector<seq_shape> seqs = sized(requested);
  const int num_seqs = static_cast<int>(seqs.size());
  std::mt19937 rng(seed);

  const paged_batch batch = scatter_batch(seqs, block_size, rng);
  const auto &tables = batch.tables, &positions = batch.positions, &query_start = batch.query_start;
  const int max_blocks = batch.max_blocks, total_blocks = batch.total_blocks;
  const int tokens = static_cast<int>(positions.size());

  // Random cache (all of it: stale data in unused slots must not leak in) and queries. The slots
  // past each context in its last block are NaN: kernels read whole runs of a block (bulk copies
  // of 16 rows), and a row past the context that reached a score or a weighted sum would show.
  // Under a window, so are the positions before the earliest window of each sequence's tokens
  // (a kernel may read K rows there, in the runs of a block that its window reaches into, but
  // none may reach an output, not even as a zero weight times NaN).
  const std::size_t pool_elems = static_cast<std::size_t>(total_blocks) * kv_heads * block_size * head_dim;
  auto k_cache = random_values(pool_elems, rng);
  auto v_cache = random_values(pool_elems, rng);
  auto poison = [&](int s, int pos) {
    for (int g = 0; g < kv_heads; ++g) {
      const std::int32_t block = tables[static_cast<std::size_t>(s) * max_blocks + pos / block_size];
      const std::size_t row =
          ((static_cast<std::size_t>(block) * kv_heads + g) * block_size + pos % block_size) * head_dim;
      std::fill_n(k_cache.begin() + row, head_dim, std::numeric_limits<float>::quiet_NaN());
      std::fill_n(v_cache.begin() + row, head_dim, std::numeric_limits<float>::quiet_NaN());
    }
  };
  for (int s = 0; s < num_seqs; ++s) {
    const int context = seqs[s].cached + seqs[s].fresh;
    const int blocks = (context + block_size - 1) / block_size;
    for (int pos = context; pos < blocks * block_size; ++pos)
      poison(s, pos);
    if (window > 0) {
      int seen_from = context; // the first position a token of the sequence sees (none: its whole cache)
      for (int t = query_start[s]; t < query_start[s + 1]; ++t)
        seen_from = std::min(seen_from, std::max(0, positions[t] - window + 1));
      for (int pos = 0; pos < seen_from; ++pos)
        poison(s, pos);
    }
  }
  round_through<C>(k_cache, kv_scale);
  round_through<C>(v_cache, kv_scale);
  const int q_stride = (heads + 2 * kv_heads) * head_dim + quirks.q_misalign;
  const int q_offset = quirks.q_misalign; // where q starts in the qkv buffer
  auto qkv = random_values(static_cast<std::size_t>(tokens) * q_stride + q_offset, rng);
  for (auto& x : qkv)
    x *= q_scale;
  round_through<T>(qkv);
  const float scale = quirks.scale_sign / std::sqrt(static_cast<float>(head_dim));
  REQUIRE((q_scale <= 1.0f || q_offset == 0)); // separate_best_scores reads q from the buffer's start
  // Capped scores need no separating: at the softcap cases' q_scale (8) the rounding of a score
  // (~1e-5) moves no weight by more than that, however near the best two are.
  if (q_scale > 1.0f && softcap == 0.0f)
    separate_best_scores<T>(qkv, q_stride, q_scale, scale, positions, query_start, tables, max_blocks, heads, kv_heads,
                            head_dim, block_size, window, k_cache, rng);
  const std::vector<float> q = query_rows(qkv, tokens, q_stride, q_offset, heads * head_dim);

  const std::vector<float> expected =
      reference_attention(q, batch, heads, kv_heads, head_dim, block_size, scale, k_cache, v_cache, window, softcap);

  auto d_qkv = to_device<T>(qkv);
  auto d_k = to_device<C>(k_cache, kv_scale);
  auto d_v = to_device<C>(v_cache, kv_scale);
  auto d_pos = to_device_raw(positions);
  auto d_qs = to_device_raw(query_start);
  auto d_tables = to_device_raw(tables);
  auto d_out = poisoned<T>(expected.size());
  kcu::paged_attention_params<T, C> p;
  p.q = d_qkv.data() + q_offset;
  p.q_stride = q_stride;
  p.out = d_out.data();
  p.k_cache = d_k.data();
  p.v_cache = d_v.data();
  p.positions = d_pos.data();
  p.query_start = d_qs.data();
  p.block_tables = d_tables.data();
  p.tokens = tokens;
  p.seqs = num_seqs;
  p.max_blocks_per_seq = max_blocks;
  p.heads = heads;
  p.kv_heads = kv_heads;
  p.head_dim = head_dim;
  p.block_size = block_size;
  p.scale = scale;
  p.k_scale = kv_scale;
  p.v_scale = kv_scale;
  p.min_query_len = min_query_len;
  p.max_query_len = max_query_len;
  p.window = window;
  p.softcap = softcap;
  // The workspace starts as NaN: a partial the kernels did not write must not reach the output.
  kcu::device_buffer<float> d_ws;
  if (ws == scratch::invariant)
    p.invariant_parts = 8;
  if (ws != scratch::none) {
    const std::size_t want =
        ws == scratch::invariant
            ? kcu::paged_attention_invariant_workspace_bytes(tokens, heads, head_dim, p.invariant_parts)
            : kcu::paged_attention_workspace_bytes(tokens, heads, kv_heads, head_dim, max_blocks * block_size);
    CHECK(want < (64u << 20));
    p.workspace_bytes = ws == scratch::tiny ? sizeof(float) : want;
    d_ws = kcu::device_buffer<float>(std::max<std::size_t>(p.workspace_bytes / sizeof(float), 1));
    d_ws.fill_bytes(0xff);
    p.workspace = d_ws.data();
  }
  // Counters start at zero (the caller's duty) and every call must leave them so.
  kcu::device_buffer<std::uint32_t> d_counters;
  if (ws == scratch::full || ws == scratch::invariant) {
    d_counters = kcu::device_buffer<std::uint32_t>(kcu::paged_attention_counter_count(tokens, heads));
    d_counters.fill_bytes(0);
    p.split_counters = d_counters.data();
  }
  const int partition = kcu::paged_attention_partition_size<T, C>(
      tokens, heads, kv_heads, head_dim, max_blocks * block_size, p.workspace_bytes, 0, 0, window);
  CAPTURE(partition);
  REQUIRE(kcu::paged_attention(p, nullptr) == cudaSuccess);
  sync_or_fail();
  if (ws == scratch::full || ws == scratch::invariant) {
    std::vector<std::uint32_t> counters(d_counters.size());
    d_counters.download(counters);
    CHECK(std::count(counters.begin(), counters.end(), 0u) == static_cast<std::ptrdiff_t>(counters.size()));
  }
  const tolerance tol = std::is_same_v<T, float> ? tolerance{2e-5f, 2e-5f} : tolerance{1e-4f, 2 * unit_roundoff<T>()};
  std::vector<float> got = from_device(d_out);
  check_close(got, expected, tol, std::string("paged_attention ") + dtype_name<T>() + "/" + dtype_name<C>(),
              std::is_same_v<T, float>
                  ? std::vector<float>{}
                  : probability_rounding_allowance<T>(q, batch, seqs, heads, kv_heads, head_dim, block_size, scale,
                                                      k_cache, v_cache, window, softcap));
  return got;
}

template <class T, class C>
void check_mixed(int heads, int kv_heads, int head_dim, int block_size, float kv_scale, scratch ws = scratch::none) {
  check_paged_attention<T, C>(mixed_batch, heads, kv_heads, head_dim, block_size, kv_scale, ws,
                              heads * 131 + head_dim * 7 + block_size);
}

// Decodes (one token each) whose contexts sit on and beside the chunk (128) and the split-K
// partition boundaries of this shape, from 1 to 5000 positions (each context is divided into
// the plan's count of partitions, so the partitions of the shorter ones differ).
std::vector<seq_shape> long_decodes(int heads, int kv_heads, int head_dim, int block_size) {
  constexpr int count = 14;
  const int longest = small_sizes() ? 1200 : 5000;
  const int max_context = (longest + block_size - 1) / block_size * block_size;
  const int P = kcu::paged_attention_partition_size<__nv_bfloat16, __nv_bfloat16>(count, heads, kv_heads, head_dim,
                                                                                  max_context, SIZE_MAX);
  const int contexts[count] = {1, 2, 127, 128, 129, 700, P - 1, P, P + 1, 2 * P, 2 * P + 1, 3 * P - 1, 4096, longest};
  std::vector<seq_shape> seqs;
  for (int c : contexts) {
    c = std::clamp(c, 1, longest);
    seqs.push_back({c - 1, 1});
  }
  return seqs;
}

// Prefill chunks for the tiles: lengths off the tile size, over cached prefixes, beside
// short runs (split-K), a long decode and an empty sequence; the longest walk several K/V
// tiles through both shared-memory stages.
const std::vector<seq_shape> prefill_batch = {{0, 100},  {0, 17}, {37, 65}, {500, 130}, {0, 64},  {3, 200},
                                              {1000, 1}, {40, 0}, {2, 5},   {0, 129},   {0, 300}, {700, 260}};

unsigned fresh_seed() {
  return std::random_device{}();
}

struct head_shape {
  int heads, kv_heads, head_dim;
};
const head_shape head_shapes[] = {{8, 4, 8}, {6, 2, 40}, {4, 4, 128}, {32, 4, 64}, {16, 1, 256}};

} // namespace

TEST_CASE("cuda paged_attention matches the CPU reference in fp32") {
  for (int bs : {1, 16, 128})
    for (auto h : head_shapes)
      check_mixed<float, float>(h.heads, h.kv_heads, h.head_dim, bs, 1.0f);
}

TEST_CASE("cuda paged_attention matches the CPU reference in bf16") {
  for (int bs : {1, 16, 128})
    for (auto h : head_shapes)
      check_mixed<__nv_bfloat16, __nv_bfloat16>(h.heads, h.kv_heads, h.head_dim, bs, 1.0f);
}

// fp16 activations take the paths of bf16 ones, with fp16 MMAs: the simple kernel, the split-K
// decode kernels (CUDA cores for MHA, tensor cores for GQA and fp8) and the prefill tiles, over
// an fp16 or an fp8 cache.
TEST_CASE("cuda paged_attention matches the CPU reference in fp16") {
  for (int bs : {1, 16, 128})
    for (auto h : head_shapes) {
      check_mixed<__half, __half>(h.heads, h.kv_heads, h.head_dim, bs, 1.0f);
      check_mixed<__half, __half>(h.heads, h.kv_heads, h.head_dim, bs, 1.0f, scratch::full);
      check_mixed<__half, __nv_fp8_e4m3>(h.heads, h.kv_heads, h.head_dim, bs, 0.02f, scratch::full);
    }
}

TEST_CASE("cuda paged_attention reads an fp8 e4m3 cache with its scale") {
  for (int bs : {1, 16, 128})
    for (auto h : head_shapes)
      check_mixed<__nv_bfloat16, __nv_fp8_e4m3>(h.heads, h.kv_heads, h.head_dim, bs, 0.02f);
}

TEST_CASE("cuda paged_attention fast paths match the CPU reference on mixed batches") {
  for (int bs : {1, 16, 128})
    for (auto h : head_shapes) {
      check_mixed<float, float>(h.heads, h.kv_heads, h.head_dim, bs, 1.0f, scratch::full);
      check_mixed<__nv_bfloat16, __nv_bfloat16>(h.heads, h.kv_heads, h.head_dim, bs, 1.0f, scratch::full);
      check_mixed<__nv_bfloat16, __nv_fp8_e4m3>(h.heads, h.kv_heads, h.head_dim, bs, 0.02f, scratch::full);
    }
}

// engine.deterministic's plan: every token, prefill rows too, through the split-K kernels with
// partitions cut from its own context, on every path (MHA and GQA on tensor cores, fp32, fp8).
TEST_CASE("cuda paged_attention's batch-invariant plan matches the CPU reference on mixed batches") {
  for (int bs : {1, 16, 128})
    for (auto h : head_shapes) {
      check_mixed<float, float>(h.heads, h.kv_heads, h.head_dim, bs, 1.0f, scratch::invariant);
      check_mixed<__nv_bfloat16, __nv_bfloat16>(h.heads, h.kv_heads, h.head_dim, bs, 1.0f, scratch::invariant);
      check_mixed<__nv_bfloat16, __nv_fp8_e4m3>(h.heads, h.kv_heads, h.head_dim, bs, 0.02f, scratch::invariant);
    }
  check_paged_attention<__nv_bfloat16, __nv_bfloat16>(long_decodes(8, 2, 128, 16), 8, 2, 128, 16, 1.0f,
                                                      scratch::invariant, 77);
}

// The partitions merged by the combine kernel (no counters), on the decode shapes of every path:
// MHA and GQA on tensor cores, fp32 and head_dim 40 on CUDA cores, fp8 on both.
TEST_CASE("cuda paged_attention split-K decode without counters merges in a combine kernel") {
  for (auto h : {head_shape{2, 2, 128}, head_shape{8, 2, 128}, head_shape{6, 2, 40}})
    for (int bs : {1, 16}) {
      const auto seqs = long_decodes(h.heads, h.kv_heads, h.head_dim, bs);
      check_paged_attention<float, float>(seqs, h.heads, h.kv_heads, h.head_dim, bs, 1.0f, scratch::separate,
                                          fresh_seed());
      check_paged_attention<__nv_bfloat16, __nv_bfloat16>(seqs, h.heads, h.kv_heads, h.head_dim, bs, 1.0f,
                                                          scratch::separate, fresh_seed());
      check_paged_attention<__nv_bfloat16, __nv_fp8_e4m3>(seqs, h.heads, h.kv_heads, h.head_dim, bs, 0.02f,
                                                          scratch::separate, fresh_seed());
    }
}

// MHA (head_dim 128 and 64), GQA 4, GQA 8, a group of 16 (two head chunks, head_dim 256), and
// head_dim 40 (idle lanes).
const head_shape decode_shapes[] = {{2, 2, 128}, {4, 4, 64}, {8, 2, 128}, {8, 1, 64}, {16, 1, 256}, {6, 2, 40}};

TEST_CASE("cuda paged_attention split-K decode matches the CPU reference over contexts of 1..5000") {
  for (auto h : decode_shapes) {
    check_paged_attention<float, float>(long_decodes(h.heads, h.kv_heads, h.head_dim, 16), h.heads, h.kv_heads,
                                        h.head_dim, 16, 1.0f, scratch::full, fresh_seed());
    for (int bs : {1, 16, 128}) {
      const auto seqs = long_decodes(h.heads, h.kv_heads, h.head_dim, bs);
      check_paged_attention<__nv_bfloat16, __nv_bfloat16>(seqs, h.heads, h.kv_heads, h.head_dim, bs, 1.0f,
                                                          scratch::full, fresh_seed());
      check_paged_attention<__nv_bfloat16, __nv_fp8_e4m3>(seqs, h.heads, h.kv_heads, h.head_dim, bs, 0.02f,
                                                          scratch::full, fresh_seed());
      check_paged_attention<__half, __half>(seqs, h.heads, h.kv_heads, h.head_dim, bs, 1.0f, scratch::full,
                                            fresh_seed());
      check_paged_attention<__half, __nv_fp8_e4m3>(seqs, h.heads, h.kv_heads, h.head_dim, bs, 0.02f, scratch::full,
                                                   fresh_seed());
    }
  }
}

// MHA decode (one token a sequence, and mixed batches) over blocks of 1 and 3 rows (a 128-position
// chunk spans 128 and 43-44 blocks), 24 (blocks cut by the chunk's edges), and 256 (one block
// holds two chunks).
TEST_CASE("cuda paged_attention split-K decode of MHA reads blocks of any size") {
  for (auto h : {head_shape{2, 2, 128}, head_shape{4, 4, 64}})
    for (int bs : {1, 3, 24, 256}) {
      check_paged_attention<__nv_bfloat16, __nv_bfloat16>(long_decodes(h.heads, h.kv_heads, h.head_dim, bs), h.heads,
                                                          h.kv_heads, h.head_dim, bs, 1.0f, scratch::full, fresh_seed(),
                                                          1.0f, 1, 1);
      check_paged_attention<__nv_bfloat16, __nv_bfloat16>(mixed_batch, h.heads, h.kv_heads, h.head_dim, bs, 1.0f,
                                                          scratch::full, fresh_seed());
    }
}

// A decode step's attention reads Q and each token's newest K and V rows, which the RoPE kernel
// right ahead of it writes: a kernel that started early to stage the older rows (an experiment,
// bench/results/2026-12-01-h200-mha-staged) must still read those as written. The newest rows
// start as NaN, RoPE writes them, and the attention right behind it (in a stream, and both
// captured in a CUDA graph) must match the CPU's attention over what RoPE wrote (the same
// kernels, run apart).
TEST_CASE("cuda paged_attention decode right behind RoPE reads the rows RoPE writes") {
  using bf16 = __nv_bfloat16;
  const int block_size = 16;
  const std::vector<seq_shape> decodes = {{0, 1},    {99, 1},   {127, 1},  {128, 1},
                                          {1500, 1}, {3999, 1}, {2048, 1}, {16, 1}};
  const int seqs = static_cast<int>(decodes.size());
  for (auto h : {head_shape{40, 40, 128}, head_shape{8, 8, 64}}) {
    CAPTURE(h.heads);
    CAPTURE(h.head_dim);
    std::mt19937 rng(fresh_seed());
    const int width = (h.heads + 2 * h.kv_heads) * h.head_dim;
    const paged_batch batch = scatter_batch(decodes, block_size, rng);
    const auto &tables = batch.tables, &positions = batch.positions, &query_start = batch.query_start;
    const int max_blocks = batch.max_blocks, total_blocks = batch.total_blocks;
    std::vector<std::int64_t> slots; // where RoPE writes each token's row
    for (int s = 0; s < seqs; ++s) {
      const int pos = positions[s];
      slots.push_back(static_cast<std::int64_t>(tables[static_cast<std::size_t>(s) * max_blocks + pos / block_size]) *
                          block_size +
                      pos % block_size);
    }
    // The cache before the step: random, with every newest row NaN (RoPE writes it).
    const std::size_t pool_elems = static_cast<std::size_t>(total_blocks) * h.kv_heads * block_size * h.head_dim;
    auto k_before = random_values(pool_elems, rng), v_before = random_values(pool_elems, rng);
    for (std::int64_t slot : slots)
      for (int g = 0; g < h.kv_heads; ++g) {
        const std::size_t row =
            ((static_cast<std::size_t>(slot / block_size) * h.kv_heads + g) * block_size + slot % block_size) *
            h.head_dim;
        std::fill_n(k_before.begin() + row, h.head_dim, std::numeric_limits<float>::quiet_NaN());
        std::fill_n(v_before.begin() + row, h.head_dim, std::numeric_limits<float>::quiet_NaN());
      }
    auto qkv_before = random_values(static_cast<std::size_t>(seqs) * width, rng);
    const auto k_host = encode_all<bf16>(k_before), v_host = encode_all<bf16>(v_before);
    const auto qkv_host = encode_all<bf16>(qkv_before);
    troupe::runtime::model_config cfg;
    cfg.head_dim = h.head_dim;
    auto d_freq = to_device_raw(troupe::runtime::rope_inv_freq(cfg));
    auto d_qkv = to_device<bf16>(qkv_before);
    auto d_k = to_device<bf16>(k_before), d_v = to_device<bf16>(v_before);
    auto d_pos = to_device_raw(positions);
    auto d_qs = to_device_raw(query_start);
    auto d_tables = to_device_raw(tables);
    auto d_slots = to_device_raw(slots);
    kcu::device_buffer<bf16> d_out(static_cast<std::size_t>(seqs) * h.heads * h.head_dim);

    kcu::rope_write_kv_params<bf16, bf16> rope;
    rope.qkv = d_qkv.data();
    rope.positions = d_pos.data();
    rope.inv_freq = d_freq.data();
    rope.slot_mapping = d_slots.data();
    rope.k_cache = d_k.data();
    rope.v_cache = d_v.data();
    rope.tokens = seqs;
    rope.heads = h.heads;
    rope.kv_heads = h.kv_heads;
    rope.head_dim = h.head_dim;
    rope.block_size = block_size;
    kcu::paged_attention_params<bf16, bf16> p;
    p.q = d_qkv.data();
    p.q_stride = width;
    p.out = d_out.data();
    p.k_cache = d_k.data();
    p.v_cache = d_v.data();
    p.positions = d_pos.data();
    p.query_start = d_qs.data();
    p.block_tables = d_tables.data();
    p.tokens = seqs;
    p.seqs = seqs;
    p.max_blocks_per_seq = max_blocks;
    p.heads = h.heads;
    p.kv_heads = h.kv_heads;
    p.head_dim = h.head_dim;
    p.block_size = block_size;
    p.scale = 1.0f / std::sqrt(static_cast<float>(h.head_dim));
    p.min_query_len = 1;
    p.max_query_len = 1;
    const std::size_t ws_bytes =
        kcu::paged_attention_workspace_bytes(seqs, h.heads, h.kv_heads, h.head_dim, max_blocks * block_size);
    kcu::device_buffer<float> d_ws(std::max<std::size_t>(ws_bytes / sizeof(float), 1));
    kcu::device_buffer<std::uint32_t> d_counters(kcu::paged_attention_counter_count(seqs, h.heads));
    d_counters.fill_bytes(0);
    p.workspace = d_ws.data();
    p.workspace_bytes = ws_bytes;
    p.split_counters = d_counters.data();

    // What RoPE writes, run on its own; then the CPU's attention over it.
    REQUIRE(kcu::rope_write_kv(rope, nullptr) == cudaSuccess);
    sync_or_fail();
    const auto qkv = from_device(d_qkv), k_cache = from_device(d_k), v_cache = from_device(d_v);
    const std::vector<float> q = query_rows(qkv, seqs, width, 0, h.heads * h.head_dim);
    const std::vector<float> expected =
        reference_attention(q, batch, h.heads, h.kv_heads, h.head_dim, block_size, p.scale, k_cache, v_cache);

    kcu::cuda_stream stream;
    auto reset = [&] { // the step's inputs again: Q unrotated, the newest rows NaN, the output poisoned
      d_qkv.upload(qkv_host);
      d_k.upload(k_host);
      d_v.upload(v_host);
      d_out.fill_bytes(0xff);
      sync_or_fail();
    };
    const tolerance tol{1e-4f, 1.0f / 128};
    for (int run = 0; run < 3; ++run) { // in stream order
      reset();
      REQUIRE(kcu::rope_write_kv(rope, stream.get()) == cudaSuccess);
      REQUIRE(kcu::paged_attention(p, stream.get()) == cudaSuccess);
      sync_or_fail();
      check_close(from_device(d_out), expected, tol, "attention right behind RoPE");
    }
    { // captured in a CUDA graph
      REQUIRE(cudaStreamBeginCapture(stream.get(), cudaStreamCaptureModeThreadLocal) == cudaSuccess);
      const cudaError_t rotated = kcu::rope_write_kv(rope, stream.get());
      const cudaError_t attended = kcu::paged_attention(p, stream.get());
      cudaGraph_t graph = nullptr;
      REQUIRE(cudaStreamEndCapture(stream.get(), &graph) == cudaSuccess);
      REQUIRE(rotated == cudaSuccess);
      REQUIRE(attended == cudaSuccess);
      kcu::cuda_graph exec(graph);
      for (int run = 0; run < 3; ++run) {
        reset();
        REQUIRE(exec.launch(stream.get()) == cudaSuccess);
        sync_or_fail();
        check_close(from_device(d_out), expected, tol, "attention right behind RoPE, in a graph");
      }
    }
  }
}

// Contexts past 64k positions take more than 32 partitions of at least 2048 positions: the
// merge's warp per row then walks its partitions' statistics in two passes of its 32 lanes.
TEST_CASE("cuda paged_attention split-K decode merges more than 32 partitions of 8 rows") {
  const std::vector<seq_shape> seqs = {{69999, 1}, {40000, 1}, {70, 1}};
  for (auto h : {head_shape{16, 2, 128}, head_shape{16, 1, 256}}) {
    const int width = 70000; // the tables of 16-position blocks the check builds
    const int partition = kcu::paged_attention_partition_size<__nv_bfloat16, __nv_bfloat16>(
        3, h.heads, h.kv_heads, h.head_dim, width,
        kcu::paged_attention_workspace_bytes(3, h.heads, h.kv_heads, h.head_dim, width), 0, 70000);
    CAPTURE(partition);
    REQUIRE((70000 + partition - 1) / partition > 32);
    check_paged_attention<__nv_bfloat16, __nv_bfloat16>(seqs, h.heads, h.kv_heads, h.head_dim, 16, 1.0f, scratch::full,
                                                        fresh_seed());
    check_paged_attention<__nv_bfloat16, __nv_fp8_e4m3>(seqs, h.heads, h.kv_heads, h.head_dim, 16, 0.02f, scratch::full,
                                                        fresh_seed());
  }
}

// The merge keeps 2 floats per (row, partition) and 1 per row in the shared memory a block no
// longer needs; at head_dim 64 the tensor-core kernel has 4 warps x 8 heads x 64 dims = 2048 of
// them. A context of 2^18 positions takes 128 partitions of 2048, and 8 rows of 128 partitions
// need 2056: the merging block reads its partials per element (merge_partials_streamed).
TEST_CASE("cuda paged_attention split-K decode merges per element past the block's spare shared memory") {
  constexpr int context = 1 << 18;
  const std::vector<seq_shape> seqs = {{context - 1, 1}, {1000, 1}};
  const int partition = kcu::paged_attention_partition_size<__nv_bfloat16, __nv_bfloat16>(
      2, 8, 1, 64, context, kcu::paged_attention_workspace_bytes(2, 8, 1, 64, context), 0, context);
  CAPTURE(partition);
  REQUIRE(2 * 8 * ((context + partition - 1) / partition) + 8 > 2048);
  check_paged_attention<__nv_bfloat16, __nv_bfloat16>(seqs, 8, 1, 64, 16, 1.0f, scratch::full, fresh_seed());
  check_paged_attention<__nv_bfloat16, __nv_fp8_e4m3>(seqs, 8, 1, 64, 16, 0.02f, scratch::full, fresh_seed());
}

// A decode batch of more than 16 tokens with max_query_len 1 launches no prefill tiles (their
// blocks would all exit at once): every output comes from the split-K kernel (the poisoned
// output would show a row it missed). A mixed batch that claims its true longest sequence still
// gets its tiles.
TEST_CASE("cuda paged_attention skips the prefill tiles when max_query_len says no sequence needs them") {
  std::vector<seq_shape> decodes;
  for (int i = 0; i < 24; ++i)
    decodes.push_back({(i * 397) % 3000, 1});
  for (auto h : {head_shape{4, 4, 128}, head_shape{8, 2, 128}}) {
    check_paged_attention<__nv_bfloat16, __nv_bfloat16>(decodes, h.heads, h.kv_heads, h.head_dim, 16, 1.0f,
                                                        scratch::full, fresh_seed(), 1.0f, 1, 1);
    check_paged_attention<__nv_bfloat16, __nv_fp8_e4m3>(decodes, h.heads, h.kv_heads, h.head_dim, 16, 0.02f,
                                                        scratch::full, fresh_seed(), 1.0f, 1, 1);
    check_paged_attention<__nv_bfloat16, __nv_bfloat16>(mixed_batch, h.heads, h.kv_heads, h.head_dim, 16, 1.0f,
                                                        scratch::full, fresh_seed(), 1.0f, 0, 37);
  }
}

// A context shorter than the tables are wide (a CUDA graph's plan is made for the widest) is cut
// into partitions of whole 64-position granules, at least a 128-position chunk long, as even as
// that allows (no partition a granule or more longer than needed), never into more partitions
// than the widest context (the
// workspace holds that many), and into no more blocks than the widest's plan would launch. At
// these widths no token has more than 16 partitions (detail::merge_parts_max), which one block
// merges (only contexts past 32k take more, each at least 2048 positions long).
TEST_CASE("cuda paged_attention split-K partitions of shorter contexts stay within the plan") {
  for (auto h : {head_shape{40, 40, 128}, head_shape{32, 8, 128}})
    for (int tokens : {1, 8, 12, 64})
      for (int width : {4096, 8192}) {
        CAPTURE(h.heads);
        CAPTURE(tokens);
        CAPTURE(width);
        const std::size_t ws = kcu::paged_attention_workspace_bytes(tokens, h.heads, h.kv_heads, h.head_dim, width);
        const int widest = kcu::paged_attention_partition_size<__nv_bfloat16, __nv_fp8_e4m3>(
            tokens, h.heads, h.kv_heads, h.head_dim, width, ws);
        REQUIRE(widest > 0);
        const int max_parts = (width + widest - 1) / widest;
        for (int context : {1, 127, 128, 129, 1501, 2048, 4095, width}) {
          CAPTURE(context);
          const int partition = kcu::paged_attention_partition_size<__nv_bfloat16, __nv_fp8_e4m3>(
              tokens, h.heads, h.kv_heads, h.head_dim, width, ws, 0, context);
          CHECK(partition >= 128);
          CHECK(partition % 64 == 0);
          const int parts = (context + partition - 1) / partition;
          if (partition > 128) // even: one granule less and the same partitions would not cover the context
            CHECK(static_cast<long long>(partition - 64) * parts < context);
          CHECK((context + partition - 1) / partition <= max_parts);
          CHECK((context + partition - 1) / partition <= 16);
        }
      }
}

// The tensor-core decode of an fp8 cache runs Q through fp16 (largest 65504, normal from 2^-14):
// queries 2^20 times larger (one-hot softmax; separate_best_scores keeps near ties out) and 2^20
// times smaller (uniform) must come out as the CPU's, on MHA, GQA 4 and GQA 8.
TEST_CASE("cuda paged_attention decode keeps queries far outside the fp16 range") {
  for (float q_scale : {0x1p20f, 0x1p-20f})
    for (auto h : {head_shape{2, 2, 128}, head_shape{8, 2, 128}, head_shape{8, 1, 64}})
      for (int bs : {16, 128}) {
        const auto seqs = long_decodes(h.heads, h.kv_heads, h.head_dim, bs);
        check_paged_attention<__nv_bfloat16, __nv_fp8_e4m3>(seqs, h.heads, h.kv_heads, h.head_dim, bs, 0.02f,
                                                            scratch::full, fresh_seed(), q_scale);
        check_paged_attention<__nv_bfloat16, __nv_bfloat16>(seqs, h.heads, h.kv_heads, h.head_dim, bs, 1.0f,
                                                            scratch::full, fresh_seed(), q_scale);
      }
}

TEST_CASE("cuda paged_attention with a too-small workspace splits coarser and stays correct") {
  for (int bs : {16, 128}) {
    check_paged_attention<__nv_bfloat16, __nv_bfloat16>(long_decodes(8, 2, 128, bs), 8, 2, 128, bs, 1.0f, scratch::tiny,
                                                        fresh_seed());
    check_paged_attention<__nv_bfloat16, __nv_bfloat16>(prefill_batch, 8, 2, 128, bs, 1.0f, scratch::tiny,
                                                        fresh_seed());
  }
}

// Tiles of 128 (MHA), 32 (group 4) and 16 (group 8) tokens; head_dim 128 and 64.
const head_shape prefill_shapes[] = {{4, 4, 128}, {8, 2, 128}, {8, 1, 64}, {16, 4, 64}};

TEST_CASE("cuda paged_attention prefill tiles match the CPU reference") {
  for (auto h : prefill_shapes)
    for (int bs : {1, 16, 128}) {
      check_paged_attention<__nv_bfloat16, __nv_bfloat16>(prefill_batch, h.heads, h.kv_heads, h.head_dim, bs, 1.0f,
                                                          scratch::full, fresh_seed());
      check_paged_attention<__nv_bfloat16, __nv_fp8_e4m3>(prefill_batch, h.heads, h.kv_heads, h.head_dim, bs, 0.02f,
                                                          scratch::full, fresh_seed());
      check_paged_attention<float, float>(prefill_batch, h.heads, h.kv_heads, h.head_dim, bs, 1.0f, scratch::full,
                                          fresh_seed());
      check_paged_attention<__half, __half>(prefill_batch, h.heads, h.kv_heads, h.head_dim, bs, 1.0f, scratch::full,
                                            fresh_seed());
      check_paged_attention<__half, __nv_fp8_e4m3>(prefill_batch, h.heads, h.kv_heads, h.head_dim, bs, 0.02f,
                                                   scratch::full, fresh_seed());
    }
}

TEST_CASE("cuda paged_attention prefill tiles alone serve a call whose every sequence is long enough") {
  // min_query_len above the tiles' threshold: no split-K grid is launched, and every output
  // still comes from the tiled kernel (the poisoned output would show a row it missed).
  const std::vector<seq_shape> long_prefills = {{0, 100}, {37, 65}, {500, 130}, {0, 17}, {700, 260}, {3, 40}};
  for (auto h : prefill_shapes)
    for (int bs : {1, 16, 128}) {
      check_paged_attention<__nv_bfloat16, __nv_bfloat16>(long_prefills, h.heads, h.kv_heads, h.head_dim, bs, 1.0f,
                                                          scratch::full, fresh_seed(), 1.0f, 17);
      check_paged_attention<__nv_bfloat16, __nv_fp8_e4m3>(long_prefills, h.heads, h.kv_heads, h.head_dim, bs, 0.02f,
                                                          scratch::full, fresh_seed(), 1.0f, 17);
      check_paged_attention<__half, __half>(long_prefills, h.heads, h.kv_heads, h.head_dim, bs, 1.0f, scratch::full,
                                            fresh_seed(), 1.0f, 17);
      check_paged_attention<__half, __nv_fp8_e4m3>(long_prefills, h.heads, h.kv_heads, h.head_dim, bs, 0.02f,
                                                   scratch::full, fresh_seed(), 1.0f, 17);
    }
  // A max_query_len below min_query_len is a caller's slip; it counts as unknown, so the tiles
  // still launch and cover every row.
  check_paged_attention<__nv_bfloat16, __nv_bfloat16>(long_prefills, 8, 2, 128, 16, 1.0f, scratch::full, fresh_seed(),
                                                      1.0f, 17, 5);
}

TEST_CASE("cuda paged_attention prefill tiles gather blocks whose size is no power of two") {
  // The tiles gather `loads` consecutive rows a thread (8 for bf16 and head_dim 128, 4 for 64 or
  // an fp8 cache, 2 for both): one table look-up when the block size is a multiple of it (24,
  // 40; 12 for 4), else one a row (3; 12 for 8), with the division, not the shift.
  const std::vector<seq_shape> long_prefills = {{0, 100}, {37, 65}, {500, 130}, {0, 17}, {3, 40}};
  for (auto h : {head_shape{8, 2, 128}, head_shape{8, 1, 64}})
    for (int bs : {3, 12, 24, 40}) {
      check_paged_attention<__nv_bfloat16, __nv_bfloat16>(long_prefills, h.heads, h.kv_heads, h.head_dim, bs, 1.0f,
                                                          scratch::full, fresh_seed(), 1.0f, 17);
      check_paged_attention<__nv_bfloat16, __nv_fp8_e4m3>(long_prefills, h.heads, h.kv_heads, h.head_dim, bs, 0.02f,
                                                          scratch::full, fresh_seed(), 1.0f, 17);
    }
}

TEST_CASE("cuda paged_attention routes prefills the tiles cannot serve to the split-K kernels") {
  // The tiles copy q in 16-byte pieces and need a positive scale. A q two elements off that
  // alignment (row stride no multiple of 8), or a negative scale, must still get every row right,
  // with min_query_len telling the launcher that every sequence is long.
  const std::vector<seq_shape> long_prefills = {{0, 100}, {37, 65}, {500, 130}, {0, 17}};
  for (auto h : {head_shape{8, 2, 128}, head_shape{4, 4, 64}}) {
    check_paged_attention<__nv_bfloat16, __nv_bfloat16>(long_prefills, h.heads, h.kv_heads, h.head_dim, 16, 1.0f,
                                                        scratch::full, fresh_seed(), 1.0f, 17, 0, {.q_misalign = 2});
    check_paged_attention<__nv_bfloat16, __nv_fp8_e4m3>(long_prefills, h.heads, h.kv_heads, h.head_dim, 16, 0.02f,
                                                        scratch::full, fresh_seed(), 1.0f, 17, 0, {.q_misalign = 2});
    check_paged_attention<__nv_bfloat16, __nv_bfloat16>(long_prefills, h.heads, h.kv_heads, h.head_dim, 16, 1.0f,
                                                        scratch::full, fresh_seed(), 1.0f, 17, 0,
                                                        {.scale_sign = -1.0f});
  }
}

namespace {

// Sliding windows (paged_attention_params::window): 1 (the token alone), 7 and 64 (within and on
// a granule), 100 (past one), 4096 (most decode contexts pass it; its span takes several
// partitions) and 5000 (the longest decode context: a window no token passes, in tables wider).
const int windows[] = {1, 7, 64, 100, 4096, 5000};

template <class C>
constexpr float kv_scale_of() {
  return std::is_same_v<C, __nv_fp8_e4m3> ? 0.02f : 1.0f;
}

// check_paged_attention of a call under `window`.
template <class T, class C>
std::vector<float> check_window(const std::vector<seq_shape>& seqs, head_shape h, int block_size, scratch ws,
                                int window, unsigned seed, int min_query_len = 0) {
  return check_paged_attention<T, C>(seqs, h.heads, h.kv_heads, h.head_dim, block_size, kv_scale_of<C>(), ws, seed,
                                     1.0f, min_query_len, 0, {}, window);
}

// Every path in one call: decodes of short and long contexts and runs of up to 16 tokens
// (split-K), prefill chunks (the tiles), one over a cached prefix longer than most windows
// ({300, 40}), a fresh prefill longer than them, and an empty sequence.
const std::vector<seq_shape> window_batch = {{0, 1},  {0, 37},  {50, 1},   {40, 0},   {130, 20}, {300, 40},
                                             {17, 3}, {0, 140}, {1000, 1}, {4999, 1}, {700, 5},  {250, 16}};

// Decodes for `window`: long_decodes' contexts (1..5000, on and beside the chunk and partition
// boundaries), and contexts whose window starts 1, 16, 17, 40 and 63 positions past a granule:
// the token's first partition then starts with that many masked positions (part of a
// tensor-core warp's 16-position step, a whole step, more). Short windows take them right past
// the window and 10 granules further; long ones, whose contexts cost the most, two of them.
std::vector<seq_shape> window_decodes(head_shape h, int block_size, int window) {
  std::vector<seq_shape> seqs = long_decodes(h.heads, h.kv_heads, h.head_dim, block_size);
  const int longest = small_sizes() ? 1200 : 5000;
  const std::vector<int> past =
      window <= 1000 ? std::vector<int>{1, 16, 17, 40, 63, 640 + 17, 640 + 63} : std::vector<int>{17, 63};
  for (int offset : past)
    if (window + offset <= longest)
      seqs.push_back({window + offset - 1, 1});
  return seqs;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

} // namespace

TEST_CASE("cuda paged_attention sliding window on the simple kernel matches the CPU reference") {
  for (int window : windows)
    for (int bs : {16, 24, 128})
      for (auto h : head_shapes) {
        check_window<float, float>(window_batch, h, bs, scratch::none, window, fresh_seed());
        check_window<__nv_bfloat16, __nv_fp8_e4m3>(window_batch, h, bs, scratch::none, window, fresh_seed());
      }
}

// Split-K (decodes, runs of up to 16 tokens) and the prefill tiles in one call.
TEST_CASE("cuda paged_attention sliding window fast paths match the CPU reference on mixed batches") {
  for (int window : windows)
    for (int bs : {16, 24, 128})
      for (auto h : head_shapes) {
        if (bs == 16)
          check_window<float, float>(window_batch, h, bs, scratch::full, window, fresh_seed());
        check_window<__nv_bfloat16, __nv_bfloat16>(window_batch, h, bs, scratch::full, window, fresh_seed());
        check_window<__nv_bfloat16, __nv_fp8_e4m3>(window_batch, h, bs, scratch::full, window, fresh_seed());
      }
}

// The CUDA-core split kernel (MHA over fp32 and 16-bit caches; head_dim 40, idle lanes; a group of
// 16 at head_dim 256, two head chunks) and the tensor-core one (MHA over fp8; GQA 4 and 8 over
// bf16, fp16 and fp8 caches at head_dim 128 and 64: registers for 16-bit caches and blocks that
// are no power of two, staged bulk copies for fp8 in blocks of 16 and 128), their partitions
// merged in the last block and in the combine kernel.
TEST_CASE("cuda paged_attention sliding window split-K decode matches the CPU reference over contexts of 1..5000") {
  for (int window : windows)
    for (int bs : {16, 24, 128}) {
      CAPTURE(bs);
      for (auto h : {head_shape{2, 2, 128}, head_shape{6, 2, 40}, head_shape{16, 1, 256}}) {
        if (h.heads != 2 && bs != 16)
          continue; // MHA at head_dim 128 covers the block sizes
        const auto seqs = window_decodes(h, bs, window);
        check_window<float, float>(seqs, h, bs, scratch::full, window, fresh_seed());
        check_window<__half, __half>(seqs, h, bs, scratch::full, window, fresh_seed());
        check_window<__nv_bfloat16, __nv_bfloat16>(seqs, h, bs, scratch::separate, window, fresh_seed());
        check_window<__nv_bfloat16, __nv_fp8_e4m3>(seqs, h, bs, scratch::full, window, fresh_seed());
      }
      for (auto h : {head_shape{8, 2, 128}, head_shape{8, 1, 64}}) {
        const auto seqs = window_decodes(h, bs, window);
        check_window<__nv_bfloat16, __nv_bfloat16>(seqs, h, bs, scratch::full, window, fresh_seed());
        check_window<__nv_bfloat16, __nv_bfloat16>(seqs, h, bs, scratch::separate, window, fresh_seed());
        check_window<__nv_bfloat16, __nv_fp8_e4m3>(seqs, h, bs, scratch::full, window, fresh_seed());
        check_window<__half, __nv_fp8_e4m3>(seqs, h, bs, scratch::separate, window, fresh_seed());
        if (bs == 16)
          check_window<__half, __half>(seqs, h, bs, scratch::full, window, fresh_seed());
      }
    }
}

// The tiles alone (every sequence longer than 16 tokens): chunks over cached prefixes longer
// than the window ({300, 40} and {500, 130} under 100: the key tiles before a block's earliest
// window are skipped, and rows see none of some tiles), fresh prefills longer than it, lengths
// off the tile; windows that are no multiple of the 64-position key tile (333); blocks of 16 and
// 128, of 24 (a table look-up per run of rows) and 3 (a look-up per row).
TEST_CASE("cuda paged_attention sliding window prefill tiles match the CPU reference") {
  const std::vector<seq_shape> prefills = {{0, 100}, {0, 17}, {37, 65}, {500, 130}, {300, 40}, {3, 200}};
  for (int window : {1, 7, 64, 100, 333, 4096})
    for (auto h : prefill_shapes)
      for (int bs : {3, 16, 24, 128}) {
        check_window<__nv_bfloat16, __nv_bfloat16>(prefills, h, bs, scratch::full, window, fresh_seed(), 17);
        if (bs == 16 || bs == 24)
          check_window<__nv_bfloat16, __nv_fp8_e4m3>(prefills, h, bs, scratch::full, window, fresh_seed(), 17);
        if (bs == 128) {
          check_window<__half, __half>(prefills, h, bs, scratch::full, window, fresh_seed(), 17);
          check_window<__half, __nv_fp8_e4m3>(prefills, h, bs, scratch::full, window, fresh_seed(), 17);
        }
      }
}

// engine.deterministic's plan cuts a token's window span, from its own context and the window.
TEST_CASE("cuda paged_attention sliding window on the batch-invariant plan matches the CPU reference") {
  for (int window : windows)
    for (int bs : {16, 24, 128}) {
      for (auto h : head_shapes) {
        if (bs == 16)
          check_window<float, float>(window_batch, h, bs, scratch::invariant, window, fresh_seed());
        check_window<__nv_bfloat16, __nv_bfloat16>(window_batch, h, bs, scratch::invariant, window, fresh_seed());
        if (bs != 24)
          check_window<__nv_bfloat16, __nv_fp8_e4m3>(window_batch, h, bs, scratch::invariant, window, fresh_seed());
      }
      const head_shape gqa{8, 2, 128};
      check_window<__nv_bfloat16, __nv_bfloat16>(window_decodes(gqa, bs, window), gqa, bs, scratch::invariant, window,
                                                 fresh_seed());
    }
}

// A window wider than the tables: the same plan, partitions and arithmetic as full attention.
TEST_CASE("cuda paged_attention with a window wider than the tables equals full attention bit for bit") {
  constexpr int wide = 1 << 20;
  for (scratch ws : {scratch::none, scratch::full, scratch::separate, scratch::invariant})
    for (int bs : {16, 24})
      for (auto h : {head_shape{2, 2, 128}, head_shape{8, 2, 128}, head_shape{6, 2, 40}}) {
        CAPTURE(bs);
        CAPTURE(h.heads);
        CAPTURE(h.head_dim);
        CAPTURE(static_cast<int>(ws));
        const unsigned seed = fresh_seed();
        CHECK(same_bits(check_window<float, float>(window_batch, h, bs, ws, 0, seed),
                        check_window<float, float>(window_batch, h, bs, ws, wide, seed)));
        CHECK(same_bits(check_window<__nv_bfloat16, __nv_bfloat16>(window_batch, h, bs, ws, 0, seed),
                        check_window<__nv_bfloat16, __nv_bfloat16>(window_batch, h, bs, ws, wide, seed)));
        CHECK(same_bits(check_window<__half, __nv_fp8_e4m3>(window_batch, h, bs, ws, 0, seed),
                        check_window<__half, __nv_fp8_e4m3>(window_batch, h, bs, ws, wide, seed)));
      }
}

// Decodes and a prefill chunk at contexts of up to 32,768 whose every position before the
// earliest window is NaN (check_paged_attention): MHA on CUDA cores, GQA on tensor cores.
TEST_CASE("cuda paged_attention sliding window at a 32k context sees only its window") {
  const std::vector<seq_shape> seqs = {{32767, 1}, {4095, 1}, {9000, 3}, {12000, 40}};
  for (int bs : {16, 128})
    for (auto h : {head_shape{1, 1, 128}, head_shape{2, 1, 128}}) {
      CAPTURE(bs);
      for (scratch ws : {scratch::none, scratch::full, scratch::separate, scratch::invariant})
        check_window<__nv_bfloat16, __nv_bfloat16>(seqs, h, bs, ws, 4096, fresh_seed());
      check_window<__nv_bfloat16, __nv_bfloat16>(seqs, h, bs, scratch::full, 100, fresh_seed());
      check_window<__nv_bfloat16, __nv_fp8_e4m3>(seqs, h, bs, scratch::full, 4096, fresh_seed());
      check_window<__half, __half>(seqs, h, bs, scratch::full, 4096, fresh_seed());
      check_window<float, float>(seqs, h, bs, scratch::full, 4096, fresh_seed());
    }
}

// The cost follows the window: a token at context N under a window W is cut as full attention
// cuts a context of W positions over tables W wide, exactly so when N - W is a whole number of
// 64-position granules (its span, from its first visible position rounded down to a granule, is
// then W positions), and any span (W to W + 63 positions) into no more partitions than that
// plan holds; a context within the window as that context under full attention. A window wider
// than the tables is full attention.
TEST_CASE("cuda paged_attention sliding window cuts a token's window as full attention cuts a context that long") {
  using bf16 = __nv_bfloat16;
  constexpr int width = 32768;
  for (auto h : {head_shape{32, 8, 128}, head_shape{40, 40, 128}, head_shape{8, 1, 64}})
    for (int tokens : {1, 8, 16, 64})
      for (std::size_t ws :
           {kcu::paged_attention_workspace_bytes(tokens, h.heads, h.kv_heads, h.head_dim, width), SIZE_MAX})
        for (int window : {100, 1000, 4096}) {
          CAPTURE(h.heads);
          CAPTURE(tokens);
          CAPTURE(ws);
          CAPTURE(window);
          auto partition = [&](int tables, int context, int w) {
            return kcu::paged_attention_partition_size<bf16, bf16>(tokens, h.heads, h.kv_heads, h.head_dim, tables, ws,
                                                                   0, context, w);
          };
          const int plan = partition(window, 0, 0);
          REQUIRE(plan > 0);
          const int max_parts = (window + plan - 1) / plan;
          const int full = partition(window, window, 0);
          for (int context : {window, window + 64, window + 64 * 100, window + (width - window) / 64 * 64}) {
            CAPTURE(context);
            CHECK(partition(width, context, window) == full);
          }
          for (int context : {1, window / 2, window - 1})
            if (context >= 1) {
              CAPTURE(context);
              CHECK(partition(width, context, window) == partition(window, context, 0));
            }
          for (int context : {window + 1, window + 63, window + 65, 12345, width - 1, width}) {
            CAPTURE(context);
            const int span = context - (context - window) / 64 * 64;
            const int cut = partition(width, context, window);
            CHECK(span <= window + 63);
            CHECK(cut >= 128);
            CHECK(cut % 64 == 0);
            CHECK((span + cut - 1) / cut <= max_parts);
          }
          for (int context : {1, 1000, width})
            CHECK(partition(width, context, 1 << 20) == partition(width, context, 0));
        }
}

namespace {

// Gemma 2's logit soft-capping: caps of 50 (Gemma 2's: the largest scores bend) and 5 (every large
// score flattened) over queries 8x the other cases' (scores of |s| ~ 20 to 30), with no window and
// with one of 100 (decodes past it, tiles that start before it, a masked head in a partition).
// Gemma 2's cap of 50 under full attention, and a cap of 5 that bends every score under a window of 100.
struct softcap_case {
  float softcap;
  int window;
};
const softcap_case softcap_cases[] = {{50.0f, 0}, {5.0f, 100}};

template <class T, class C>
void check_softcap(const std::vector<seq_shape>& seqs, head_shape h, scratch ws, float softcap, int window,
                   int min_query_len = 0) {
  check_paged_attention<T, C>(seqs, h.heads, h.kv_heads, h.head_dim, 16, kv_scale_of<C>(), ws, fresh_seed(), 8.0f,
                              min_query_len, 0, {}, window, softcap);
}

std::vector<seq_shape> softcap_decodes(head_shape h, int window) {
  return window > 0 ? window_decodes(h, 16, window) : long_decodes(h.heads, h.kv_heads, h.head_dim, 16);
}

} // namespace

TEST_CASE("cuda paged_attention softcap on the simple kernel matches the CPU reference") {
  for (auto [softcap, window] : softcap_cases)
    for (auto h : {head_shape{6, 2, 40}, head_shape{32, 4, 64}}) {
      check_softcap<float, float>(window_batch, h, scratch::none, softcap, window);
      check_softcap<__nv_bfloat16, __nv_bfloat16>(window_batch, h, scratch::none, softcap, window);
      check_softcap<__half, __nv_fp8_e4m3>(window_batch, h, scratch::none, softcap, window);
    }
}

// The CUDA-core split kernel (MHA over fp32 and 16-bit caches; a group of 16 at head_dim 256 over
// bf16 and fp8, two head chunks; head_dim 40, idle lanes) and the tensor-core one (MHA over fp8;
// GQA 4 and 8 over bf16, fp16 and fp8 caches), their partitions merged in the last block and in
// the combine kernel.
TEST_CASE("cuda paged_attention softcap on the split-K decode kernels matches the CPU reference") {
  for (auto [softcap, window] : softcap_cases) {
    const head_shape mha{2, 2, 128}, wide{16, 1, 256}, odd{6, 2, 40};
    check_softcap<float, float>(softcap_decodes(mha, window), mha, scratch::full, softcap, window);
    check_softcap<__nv_bfloat16, __nv_bfloat16>(softcap_decodes(mha, window), mha, scratch::separate, softcap, window);
    check_softcap<__half, __half>(softcap_decodes(mha, window), mha, scratch::full, softcap, window);
    check_softcap<__nv_bfloat16, __nv_fp8_e4m3>(softcap_decodes(mha, window), mha, scratch::full, softcap, window);
    check_softcap<__nv_bfloat16, __nv_bfloat16>(softcap_decodes(wide, window), wide, scratch::separate, softcap,
                                                window);
    check_softcap<__nv_bfloat16, __nv_fp8_e4m3>(softcap_decodes(wide, window), wide, scratch::full, softcap, window);
    check_softcap<float, float>(softcap_decodes(odd, window), odd, scratch::separate, softcap, window);
    for (auto h : {head_shape{8, 2, 128}, head_shape{8, 1, 64}}) {
      const auto seqs = softcap_decodes(h, window);
      check_softcap<__nv_bfloat16, __nv_bfloat16>(seqs, h, scratch::full, softcap, window);
      check_softcap<__half, __half>(seqs, h, scratch::separate, softcap, window);
      check_softcap<__nv_bfloat16, __nv_fp8_e4m3>(seqs, h, scratch::separate, softcap, window);
      check_softcap<__half, __nv_fp8_e4m3>(seqs, h, scratch::full, softcap, window);
    }
  }
}

// The tiles alone (every sequence longer than 16 tokens), which cap the raw scores before their
// masks and then scale by log2(e) only.
TEST_CASE("cuda paged_attention softcap on the prefill tiles matches the CPU reference") {
  const std::vector<seq_shape> prefills = {{0, 100}, {0, 17}, {37, 65}, {500, 130}, {300, 40}, {3, 200}};
  for (auto [softcap, window] : softcap_cases)
    for (auto h : {head_shape{8, 2, 128}, head_shape{16, 4, 64}}) {
      check_softcap<__nv_bfloat16, __nv_bfloat16>(prefills, h, scratch::full, softcap, window, 17);
      check_softcap<__nv_bfloat16, __nv_fp8_e4m3>(prefills, h, scratch::full, softcap, window, 17);
      check_softcap<__half, __half>(prefills, h, scratch::full, softcap, window, 17);
      check_softcap<__half, __nv_fp8_e4m3>(prefills, h, scratch::full, softcap, window, 17);
    }
}

TEST_CASE("cuda paged_attention softcap on the batch-invariant plan matches the CPU reference") {
  for (auto [softcap, window] : softcap_cases)
    for (auto h : {head_shape{8, 2, 128}, head_shape{6, 2, 40}}) {
      check_softcap<float, float>(window_batch, h, scratch::invariant, softcap, window);
      check_softcap<__nv_bfloat16, __nv_bfloat16>(window_batch, h, scratch::invariant, softcap, window);
      check_softcap<__nv_bfloat16, __nv_fp8_e4m3>(window_batch, h, scratch::invariant, softcap, window);
    }
}
