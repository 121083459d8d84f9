// Kernel micro-benchmarks of the CUDA backend: paged attention (decode and a
// prefill chunk), RMSNorm, SiLU-and-mul and RoPE + KV write at Llama shapes, bf16.
// Each case: median of CUDA-event times after a warm-up, with inputs rotated over
// copies larger than L2 (60 MiB on H200); bytes that must move / time, as a
// fraction of the 4.3 TB/s copy ceiling of GPU.md. Prints a markdown table
// (also to --out FILE).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/cuda_stream.hpp"
#include "kernels/cuda/device_buffer.hpp"
#include "kernels/cuda/paged_attention.hpp"
#include "kernels/cuda/rms_norm.hpp"
#include "kernels/cuda/rope_write_kv.hpp"
#include "kernels/cuda/silu_and_mul.hpp"

namespace {

namespace kcu = troupe::kernels::cuda;
using bf16 = __nv_bfloat16;
constexpr double ceiling_bytes_per_s = 4.3e12;
constexpr std::size_t rotate_bytes = 256ull << 20; // > 4x L2

// Random bf16 values in [-1, 1): speed must not depend on them, but zeros could take shortcuts.
kcu::device_buffer<bf16> random_bf16(std::size_t n, unsigned seed) {
  std::vector<bf16> host(n);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (auto& x : host)
    x = __float2bfloat16_rn(u(rng));
  kcu::device_buffer<bf16> d(n);
  d.upload(host);
  return d;
}

struct row {
  std::string name;
  double us, bytes;
};

// Median microseconds of launch(i) over reps, i rotating through `copies` input sets.
double time_us(const std::function<cudaError_t(int)>& launch, int copies, cudaStream_t stream, int reps = 50) {
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
  return times[times.size() / 2];
}

int copies_for(std::size_t bytes) {
  return static_cast<int>(std::clamp<std::size_t>(rotate_bytes / std::max<std::size_t>(bytes, 1), 1, 64));
}

// Decode (one query token per sequence) or one prefill chunk per sequence, over contexts of `context` tokens.
row bench_attention(const char* label, int batch, int q_len, int context, int heads, int kv_heads, int hd, int bs,
                    cudaStream_t stream) {
  const int blocks_per_seq = (context + bs - 1) / bs;
  const int num_blocks = batch * blocks_per_seq;
  const std::size_t pool = static_cast<std::size_t>(num_blocks) * kv_heads * bs * hd;
  auto k = random_bf16(pool, 1), v = random_bf16(pool, 2);
  const int tokens = batch * q_len, q_stride = (heads + 2 * kv_heads) * hd;
  auto q = random_bf16(static_cast<std::size_t>(tokens) * q_stride, 3);
  kcu::device_buffer<bf16> out(static_cast<std::size_t>(tokens) * heads * hd);
  std::vector<std::int32_t> table(num_blocks), qs(batch + 1), pos(tokens);
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), std::mt19937(4));
  for (int b = 0; b <= batch; ++b)
    qs[b] = b * q_len;
  for (int t = 0; t < tokens; ++t)
    pos[t] = context - q_len + t % q_len;
  kcu::device_buffer<std::int32_t> d_table(table.size()), d_qs(qs.size()), d_pos(pos.size());
  d_table.upload(table);
  d_qs.upload(qs);
  d_pos.upload(pos);
  kcu::paged_attention_params<bf16, bf16> p;
  p.q = q.data();
  p.q_stride = q_stride;
  p.out = out.data();
  p.k_cache = k.data();
  p.v_cache = v.data();
  p.positions = d_pos.data();
  p.query_start = d_qs.data();
  p.block_tables = d_table.data();
  p.tokens = tokens;
  p.seqs = batch;
  p.max_blocks_per_seq = blocks_per_seq;
  p.heads = heads;
  p.kv_heads = kv_heads;
  p.head_dim = hd;
  p.block_size = bs;
  p.scale = 0.088f;
  // The KV cache is larger than L2 at these shapes: no rotation needed.
  const double bytes = 2.0 * batch * context * kv_heads * hd * sizeof(bf16) + 2.0 * tokens * heads * hd * sizeof(bf16);
  const double us = time_us([&](int) { return kcu::paged_attention(p, stream); }, 1, stream, 20);
  char name[160];
  std::snprintf(name, sizeof name, "paged_attention %s: batch %d x %d q, ctx %d, %d/%d heads, hd %d, bs %d", label,
                batch, q_len, context, heads, kv_heads, hd, bs);
  return {name, us, bytes};
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

} // namespace

int main(int argc, char** argv) {
  std::string out_path;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::string(argv[i]) == "--out")
      out_path = argv[i + 1];
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::puts("no CUDA device");
    return 77;
  }
  try {
    kcu::cuda_stream stream;
    std::vector<row> rows;
    // Llama-2-13B (40 heads, MHA, hd 128) and Llama-3-8B (32/8 heads) shapes.
    rows.push_back(bench_attention("decode 13B", 12, 1, 1536, 40, 40, 128, 16, stream));
    rows.push_back(bench_attention("decode 13B", 64, 1, 2048, 40, 40, 128, 16, stream));
    rows.push_back(bench_attention("decode 8B", 64, 1, 2048, 32, 8, 128, 16, stream));
    rows.push_back(bench_attention("decode 8B bs128", 64, 1, 2048, 32, 8, 128, 128, stream));
    rows.push_back(bench_attention("prefill 8B", 2, 512, 1024, 32, 8, 128, 16, stream));
    rows.push_back(bench_add_rms_norm(12, 5120, stream));
    rows.push_back(bench_add_rms_norm(4096, 5120, stream));
    rows.push_back(bench_silu(12, 13824, stream));
    rows.push_back(bench_silu(4096, 13824, stream));
    rows.push_back(bench_rope(12, 40, 40, 128, 16, stream));
    rows.push_back(bench_rope(4096, 32, 8, 128, 16, stream));

    std::string table = "| kernel | median us | GB/s | of 4.3 TB/s |\n|---|---:|---:|---:|\n";
    for (const auto& r : rows) {
      char line[320];
      const double rate = r.bytes / (r.us * 1e-6);
      std::snprintf(line, sizeof line, "| %s | %.1f | %.0f | %.1f%% |\n", r.name.c_str(), r.us, rate / 1e9,
                    100.0 * rate / ceiling_bytes_per_s);
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
