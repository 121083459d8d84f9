// Paged attention: the launcher, and the simple kernel that runs when the caller
// gives no workspace (or a shape the fast kernels do not take).
// Simple kernel: one block per (query token, KV head) serves the whole GQA group of
// that KV head, so each K/V element is read once per group. It walks the positions the
// token sees (its context, or under a sliding window the last `window` of it) in tiles:
// a tile of K and V is gathered from the block table into shared memory (converted to
// fp32), the group's scores for the tile are formed, and an online softmax (running max
// and sum in fp32) rescales the accumulator.
// Fast paths (with a workspace): split-K over the context for decode-like tokens
// (paged_attention_split_kv.cu) and query tiles on tensor cores for prefill chunks of bf16 or
// fp16 activations (paged_attention_prefill.cu); the plan below divides a call between them.
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <tuple>
#include <type_traits>

#include "kernels/cuda/numeric.cuh"
#include "kernels/cuda/paged_attention.hpp"
#include "kernels/cuda/paged_attention_internal.cuh"
#include "kernels/cuda/split_k_partition.cuh"

namespace troupe::kernels::cuda {

namespace {
using detail::from_float;
using detail::to_float;
constexpr int threads = 128;
constexpr int max_tile = 64;
constexpr std::size_t default_smem = 48 * 1024;

// Shared-memory floats of one block: q and accumulator [group, hd], K tile [tile, hd + 1]
// (padded: the score loop reads K rows across threads), V tile [tile, hd], scores
// [group, tile], and max / sum / rescale factor per head.
std::size_t smem_floats(int group, int hd, int tile) {
  return 2 * static_cast<std::size_t>(group) * hd + static_cast<std::size_t>(tile) * (2 * hd + 1) +
         static_cast<std::size_t>(group) * tile + 3 * static_cast<std::size_t>(group);
}

// capped: paged_attention_params::softcap > 0 (detail::soft_cap).
template <class T, class C, bool capped>
__global__ void paged_attention_kernel(paged_attention_params<T, C> p, int tile) {
  extern __shared__ float smem[];
  const int t = blockIdx.x, g = blockIdx.y;
  const int hd = p.head_dim, group = p.heads / p.kv_heads;
  float* q_s = smem;                  // [group, hd]
  float* acc_s = q_s + group * hd;    // [group, hd]
  float* k_s = acc_s + group * hd;    // [tile, hd + 1]
  float* v_s = k_s + tile * (hd + 1); // [tile, hd]
  float* s_s = v_s + tile * hd;       // [group, tile]
  float* m_s = s_s + group * tile;    // [group] running max
  float* l_s = m_s + group;           // [group] running sum
  float* alpha_s = l_s + group;       // [group] rescale of this tile

  const int seq = detail::sequence_of(p.query_start, p.seqs, t);
  const std::int32_t* table = p.block_tables + static_cast<std::size_t>(seq) * p.max_blocks_per_seq;
  const int context = p.positions[t] + 1;
  const int first = detail::first_visible(context, p.window);

  const T* q = p.q + static_cast<std::size_t>(t) * p.q_stride + static_cast<std::size_t>(g) * group * hd;
  for (int i = threadIdx.x; i < group * hd; i += blockDim.x) {
    q_s[i] = to_float(q[i]);
    acc_s[i] = 0.0f;
  }
  for (int h = threadIdx.x; h < group; h += blockDim.x) {
    m_s[h] = -INFINITY;
    l_s[h] = 0.0f;
  }
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;

  for (int p0 = first; p0 < context; p0 += tile) {
    const int n = min(tile, context - p0);
    for (int i = threadIdx.x; i < n * hd; i += blockDim.x) {
      const int r = i / hd, d = i - r * hd;
      const int pos = p0 + r;
      const detail::cache_slot at = detail::slot_of(pos, p.block_size, -1);
      const std::size_t src =
          detail::cache_row_offset(table[at.column], at.offset, p.kv_heads, g, p.block_size, hd) + d;
      k_s[r * (hd + 1) + d] = to_float(p.k_cache[src]) * p.k_scale;
      v_s[r * hd + d] = to_float(p.v_cache[src]) * p.v_scale;
    }
    __syncthreads(); // also orders the q / statistics set-up before the first use
    for (int i = threadIdx.x; i < group * n; i += blockDim.x) {
      const int h = i / n, r = i - h * n;
      const float* qh = q_s + h * hd;
      const float* kr = k_s + r * (hd + 1);
      float s = 0.0f;
      for (int d = 0; d < hd; ++d)
        s += qh[d] * kr[d];
      s *= p.scale;
      if constexpr (capped)
        s = detail::soft_cap(s, 1.0f / p.softcap, p.softcap);
      s_s[h * tile + r] = s;
    }
    __syncthreads();
    for (int h = warp; h < group; h += warps) {
      float* sh = s_s + h * tile;
      float tile_max = -INFINITY;
      for (int r = lane; r < n; r += 32)
        tile_max = fmaxf(tile_max, sh[r]);
      const float m_old = m_s[h];
      const float m_new = fmaxf(m_old, detail::warp_max(tile_max));
      float sum = 0.0f;
      for (int r = lane; r < n; r += 32) {
        const float e = expf(sh[r] - m_new);
        sh[r] = e;
        sum += e;
      }
      sum = detail::warp_sum(sum);
      __syncwarp(); // every lane has read m_s[h] before lane 0 overwrites it
      if (lane == 0) {
        const float alpha = expf(m_old - m_new); // 0 on the first tile (m_old = -inf)
        alpha_s[h] = alpha;
        l_s[h] = l_s[h] * alpha + sum;
        m_s[h] = m_new;
      }
    }
    __syncthreads();
    for (int i = threadIdx.x; i < group * hd; i += blockDim.x) {
      const int h = i / hd, d = i - h * hd;
      const float* sh = s_s + h * tile;
      float a = acc_s[i] * alpha_s[h];
      for (int r = 0; r < n; ++r)
        a += sh[r] * v_s[r * hd + d];
      acc_s[i] = a;
    }
    __syncthreads(); // the next tile overwrites K, V and the scores
  }

  T* out = p.out + (static_cast<std::size_t>(t) * p.heads + static_cast<std::size_t>(g) * group) * hd;
  for (int i = threadIdx.x; i < group * hd; i += blockDim.x)
    out[i] = from_float<T>(acc_s[i] / l_s[i / hd]);
}
template <class T, class C>
cudaError_t launch_simple(const paged_attention_params<T, C>& p, cudaStream_t stream) {
  const int group = p.heads / p.kv_heads, hd = p.head_dim;
  // The largest tile (up to max_tile positions) that fits the default 48 KiB; at least 8
  // positions, with more shared memory asked for when the group's rows alone are large.
  int tile = max_tile;
  while (tile > 8 && smem_floats(group, hd, tile) * sizeof(float) > default_smem)
    tile /= 2;
  const std::size_t smem = smem_floats(group, hd, tile) * sizeof(float);
  const auto kernel = p.softcap > 0.0f ? paged_attention_kernel<T, C, true> : paged_attention_kernel<T, C, false>;
  if (smem > default_smem) {
    if (auto err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
        err != cudaSuccess)
      return err;
  }
  const dim3 grid(p.tokens, p.kv_heads);
  kernel<<<grid, threads, smem, stream>>>(p, tile);
  return cudaGetLastError();
}

// Device SM count, cached per device: the plan sizes the split to fill every SM.
cudaError_t sm_count(int& sms) {
  int dev = 0;
  if (auto err = cudaGetDevice(&dev); err != cudaSuccess)
    return err;
  static std::atomic<int> cache[64];
  const bool cached = dev >= 0 && dev < 64;
  if (cached) {
    if (const int c = cache[dev].load(std::memory_order_relaxed); c > 0) {
      sms = c;
      return cudaSuccess;
    }
  }
  if (auto err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev); err != cudaSuccess)
    return err;
  if (cached)
    cache[dev].store(sms, std::memory_order_relaxed);
  return cudaSuccess;
}

struct split_shape {
  int partition = 0, parts = 1;
  std::size_t bytes = 0; // workspace the partitions need (none for one partition)
};

// Partitions of whole granules, at least a chunk long (as detail::token_partition cuts them). At most ~blocks_per_sm
// (token, KV head, head chunk, partition) blocks per SM, which bounds the workspace whatever the context length (blocks
// * partitions stays below 2 * blocks_per_sm * sms whenever there is more than one partition). Within that, with
// `slots` (split blocks the GPU holds at once; 0: unknown), as detail::token_partition weighs a token: the count of
// partitions whose blocks fill the slots best, blocks / slots / ceil(blocks / slots), the fewest partitions among the
// best (each costs the merge a little); a last wave that fills a tenth of the slots leaves HBM idle for a whole wave's
// time (on the H200 at 13B shapes, batch 12, 2 partitions of 768, 960 blocks for 1056 slots, took 105 us where 3 of
// 512, 1440 blocks, took 121 us). But when one wave holds every token's partitions, the most that one wave holds
// (detail::one_wave_parts), unless the best fill fills better with partitions of at least detail::long_partition
// positions. Coarser (down to one partition, which needs no workspace) when the workspace is too small or the grid
// would be too tall.
constexpr long long blocks_per_sm = 32;

split_shape choose_split(long long tokens, int heads, int kv_heads, int hd, long long max_context, int sms,
                         std::size_t workspace, int min_partition = 0, long long slots = 0) {
  const int group = heads / kv_heads;
  const long long chunks = (group + detail::group_chunk(group) - 1) / detail::group_chunk(group);
  const long long blocks = tokens * kv_heads * chunks;
  const long long want = std::max(1LL, (blocks_per_sm * sms + blocks - 1) / blocks);
  auto partition_of = [&](long long n) {
    const long long per = std::max<long long>((max_context + n - 1) / n, min_partition);
    return std::max<long long>(detail::split_chunk,
                               (per + detail::split_granule - 1) / detail::split_granule * detail::split_granule);
  };
  long long partition = partition_of(want);
  if (slots > 0) {
    double best = -1.0;
    for (long long n = 1; n <= want; ++n) {
      const long long candidate = partition_of(n), split_blocks = blocks * ((max_context + candidate - 1) / candidate);
      const double waves = static_cast<double>(split_blocks) / static_cast<double>(slots);
      const double fill = std::round(100.0 * waves / std::ceil(waves)) / 100.0;
      if (fill > best) {
        best = fill;
        partition = candidate;
      }
      if (candidate == detail::split_chunk)
        break; // finer partitions than a chunk do not exist
    }
    if (const long long fit = slots / blocks; fit >= 1) {
      const long long one_wave = partition_of(detail::one_wave_parts(fit, want, max_context));
      const double one_wave_fill =
          std::round(100.0 * static_cast<double>(blocks * ((max_context + one_wave - 1) / one_wave)) /
                     static_cast<double>(slots)) /
          100.0;
      if (partition < detail::long_partition || best <= one_wave_fill)
        partition = one_wave;
    }
  }
  auto parts = [&] { return (max_context + partition - 1) / partition; };
  auto bytes = [&](long long n) {
    return n > 1 ? static_cast<std::size_t>(tokens) * heads * n * (hd + 2) * sizeof(float) : std::size_t{0};
  };
  while (parts() > 1 && (bytes(parts()) > workspace || parts() * chunks > 65535))
    partition *= 2;
  return {static_cast<int>(partition), static_cast<int>(parts()), bytes(parts())};
}

// choose_split for a launch. Every layer of a step asks for the same split, and choosing one
// walks up to max_context / 128 candidates, so the last answer on this thread is kept.
split_shape launch_split_shape(long long tokens, int heads, int kv_heads, int hd, long long max_context, int sms,
                               std::size_t workspace, int min_partition, long long slots) {
  struct memo {
    std::tuple<long long, int, int, int, long long, int, std::size_t, int, long long> key{-1, 0, 0, 0, 0, 0, 0, 0, 0};
    split_shape split;
  };
  thread_local memo last;
  const auto key = std::make_tuple(tokens, heads, kv_heads, hd, max_context, sms, workspace, min_partition, slots);
  if (key != last.key)
    last = {key, choose_split(tokens, heads, kv_heads, hd, max_context, sms, workspace, min_partition, slots)};
  return last.split;
}

// The partition fields of a call's plan: what detail::token_partition needs to cut a context
// as the kernels will (the launcher and paged_attention_partition_size share it).
detail::attention_plan split_plan(const split_shape& split, int tokens, int kv_heads, int group, long long slots) {
  detail::attention_plan plan;
  plan.partition = split.partition;
  plan.max_parts = split.parts;
  plan.head_chunks = (group + detail::group_chunk(group) - 1) / detail::group_chunk(group);
  plan.split_blocks = tokens * kv_heads * plan.head_chunks;
  plan.slots = static_cast<int>(std::min<long long>(slots, INT_MAX));
  return plan;
}

// The context a call's split-K plan is made for: under a sliding window no token sees more than
// `window` positions (its partitions cut those and fewer than a granule before them, which
// detail::token_partition fits in the plan's max_parts whatever the length), so the plan is that
// of full attention over tables `window` wide, and its cost follows the window.
long long planned_context(long long max_context, int window) {
  return window > 0 ? std::min<long long>(max_context, window) : max_context;
}

bool sizes_valid(int tokens, int heads, int kv_heads, int head_dim, long long max_context) {
  return tokens > 0 && heads > 0 && kv_heads > 0 && heads % kv_heads == 0 && head_dim > 0 && max_context > 0 &&
         max_context <= (1LL << 28); // partition starts + lengths stay in int
}
} // namespace

std::size_t paged_attention_workspace_bytes(int tokens, int heads, int kv_heads, int head_dim, int max_context) {
  if (!sizes_valid(tokens, heads, kv_heads, head_dim, max_context))
    return 0;
  int sms = 0;
  if (sm_count(sms) != cudaSuccess || sms <= 0)
    sms = 132; // no device to ask: size for an H200
  // From blocks_per_sm * sms tokens on, every token has one partition (no workspace).
  const long long upto = std::min<long long>(tokens, blocks_per_sm * sms);
  std::size_t most = 0;
  for (long long n = 1; n <= upto; ++n)
    most = std::max(most, choose_split(n, heads, kv_heads, head_dim, max_context, sms, SIZE_MAX).bytes);
  return most;
}

std::size_t paged_attention_invariant_workspace_bytes(int tokens, int heads, int head_dim, int parts) {
  if (tokens <= 0 || heads <= 0 || head_dim <= 0 || parts <= 1)
    return 0;
  return static_cast<std::size_t>(tokens) * heads * parts * (head_dim + 2) * sizeof(float);
}

std::size_t paged_attention_counter_count(int tokens, int heads) {
  // One per (token, KV head, head chunk): at most one per (token, query head).
  return tokens > 0 && heads > 0 ? static_cast<std::size_t>(tokens) * heads : 0;
}

template <class T, class C>
int paged_attention_partition_size(int tokens, int heads, int kv_heads, int head_dim, int max_context,
                                   std::size_t workspace_bytes, int min_partition, int context, int window) {
  if (!sizes_valid(tokens, heads, kv_heads, head_dim, max_context))
    return 0;
  int sms = 0;
  if (sm_count(sms) != cudaSuccess || sms <= 0)
    sms = 132;
  const int group = heads / kv_heads;
  const long long slots = static_cast<long long>(sms) * detail::split_blocks_per_sm<T, C>(group, head_dim);
  const split_shape split = choose_split(tokens, heads, kv_heads, head_dim, planned_context(max_context, window), sms,
                                         workspace_bytes, min_partition, slots);
  if (context <= 0 || context > max_context)
    return split.partition;
  return detail::split_of(split_plan(split, tokens, kv_heads, group, slots), context, window).partition;
}

template int paged_attention_partition_size<float, float>(int, int, int, int, int, std::size_t, int, int, int);
template int paged_attention_partition_size<float, __nv_fp8_e4m3>(int, int, int, int, int, std::size_t, int, int, int);
template int paged_attention_partition_size<__nv_bfloat16, __nv_bfloat16>(int, int, int, int, int, std::size_t, int,
                                                                          int, int);
template int paged_attention_partition_size<__nv_bfloat16, __nv_fp8_e4m3>(int, int, int, int, int, std::size_t, int,
                                                                          int, int);
template int paged_attention_partition_size<__half, __half>(int, int, int, int, int, std::size_t, int, int, int);
template int paged_attention_partition_size<__half, __nv_fp8_e4m3>(int, int, int, int, int, std::size_t, int, int, int);

template <class T, class C>
cudaError_t paged_attention(const paged_attention_params<T, C>& p, cudaStream_t stream) {
  if (p.tokens <= 0)
    return cudaSuccess;
  if (p.heads <= 0 || p.kv_heads <= 0 || p.heads % p.kv_heads != 0 || p.head_dim <= 0 || p.block_size <= 0 ||
      p.seqs <= 0 || p.q_stride < p.heads * p.head_dim || p.kv_heads > 65535)
    return cudaErrorInvalidValue;
  if (p.workspace == nullptr)
    return launch_simple(p, stream);
  // The split kernel gives each lane 16 bytes of a row (32 of fp32), at most 32 lanes a row.
  constexpr int share = sizeof(C) == 1 ? 16 : 8;
  const auto address = [](const void* ptr) { return reinterpret_cast<std::uintptr_t>(ptr); };
  const long long max_context = static_cast<long long>(p.max_blocks_per_seq) * p.block_size;
  const long long plan_context = planned_context(max_context, p.window);
  if (p.head_dim % share != 0 || p.head_dim / share > 32 || (address(p.k_cache) | address(p.v_cache)) % 16 != 0 ||
      !sizes_valid(p.tokens, p.heads, p.kv_heads, p.head_dim, max_context))
    return launch_simple(p, stream);
  int sms = 0;
  if (auto err = sm_count(sms); err != cudaSuccess)
    return err;
  const int group = p.heads / p.kv_heads;
  const long long slots = static_cast<long long>(sms) * detail::split_blocks_per_sm<T, C>(group, p.head_dim);
  split_shape split;
  if (p.invariant_parts > 0) {
    // The batch-invariant plan: partitions from the token's context (and window) alone, no
    // occupancy weighing (slots 0): detail::token_partition then cuts ceil(span / parts).
    split.parts = std::max(1, p.invariant_parts);
    split.bytes = paged_attention_invariant_workspace_bytes(p.tokens, p.heads, p.head_dim, split.parts);
    if (split.bytes > p.workspace_bytes)
      return cudaErrorInvalidValue;
    const long long per = (plan_context + split.parts - 1) / split.parts;
    split.partition = static_cast<int>(std::max<long long>(
        detail::split_chunk, (per + detail::split_granule - 1) / detail::split_granule * detail::split_granule));
  } else {
    split = launch_split_shape(p.tokens, p.heads, p.kv_heads, p.head_dim, plan_context, sms, p.workspace_bytes,
                               p.min_partition, slots);
  }
  detail::attention_plan plan = split_plan(split, p.tokens, p.kv_heads, group, p.invariant_parts > 0 ? 0 : slots);
  while (plan.lanes * share < p.head_dim)
    plan.lanes *= 2;
  if ((p.block_size & (p.block_size - 1)) == 0) {
    plan.block_shift = 0;
    while ((1 << plan.block_shift) < p.block_size)
      ++plan.block_shift;
  }
  plan.ws_stats = p.workspace;
  plan.ws_acc = p.workspace + 2 * static_cast<std::size_t>(p.tokens) * p.heads * split.parts;
  plan.counters = p.split_counters;
  plan.one_token_sequences = p.min_query_len == 1 && p.max_query_len == 1 && p.tokens == p.seqs;
  bool tiles = false;
  // The tiles copy Q in 16-byte pieces, and take each row's maximum over the scores before
  // scaling them, which only a positive scale allows; other calls take the split-K kernels.
  if constexpr (detail::tensor_core_activations<T>)
    tiles = detail::prefill_tiles_support(p.head_dim) && p.q_stride % 8 == 0 && address(p.q) % 16 == 0 &&
            address(p.out) % 4 == 0 && p.scale * p.k_scale > 0.0f;
  if (p.invariant_parts > 0)
    tiles = false; // a token's result must not depend on the query tile it would share
  if (tiles)
    plan.tile_min_q = detail::tile_min_q_default;
  const bool every_sequence_tiled = tiles && p.min_query_len > plan.tile_min_q;
  if (!every_sequence_tiled)
    if (auto err = detail::launch_split_kv(p, plan, stream); err != cudaSuccess)
      return err;
  if constexpr (detail::tensor_core_activations<T>) {
    // A claimed longest below the claimed shortest says nothing: the tiles run as without it.
    const bool max_known = p.max_query_len > 0 && p.max_query_len >= p.min_query_len;
    const bool some_sequence_tiled = !max_known || p.max_query_len > plan.tile_min_q;
    if (tiles && p.tokens > plan.tile_min_q && some_sequence_tiled)
      return detail::launch_prefill_tiles(p, plan, stream);
  }
  return cudaSuccess;
}

template cudaError_t paged_attention<float, float>(const paged_attention_params<float, float>&, cudaStream_t);
template cudaError_t paged_attention<float, __nv_fp8_e4m3>(const paged_attention_params<float, __nv_fp8_e4m3>&,
                                                           cudaStream_t);
template cudaError_t paged_attention<__nv_bfloat16, __nv_bfloat16>(
    const paged_attention_params<__nv_bfloat16, __nv_bfloat16>&, cudaStream_t);
template cudaError_t paged_attention<__nv_bfloat16, __nv_fp8_e4m3>(
    const paged_attention_params<__nv_bfloat16, __nv_fp8_e4m3>&, cudaStream_t);
template cudaError_t paged_attention<__half, __half>(const paged_attention_params<__half, __half>&, cudaStream_t);
template cudaError_t paged_attention<__half, __nv_fp8_e4m3>(const paged_attention_params<__half, __nv_fp8_e4m3>&,
                                                            cudaStream_t);

} // namespace troupe::kernels::cuda
