// The CUDA runner's memory plan, without a device: a KV block is K and V of every layer for
// block-size tokens in the cache dtype, the activation buffers follow the model's widths and the
// step limits, and the KV pool gets whole blocks of what the utilization target leaves.
#include <doctest/doctest.h>

#include "runtime/cuda_memory_plan.hpp"

namespace rt = troupe::runtime;

namespace {
constexpr std::size_t MiB = std::size_t{1} << 20, GiB = std::size_t{1} << 30;

// Llama-3-8B's shapes: 32 layers, GQA 32 / 8 heads of 128, 8k context.
rt::model_config llama3_8b() {
  rt::model_config c;
  c.hidden_size = 4096;
  c.intermediate_size = 14336;
  c.num_hidden_layers = 32;
  c.num_attention_heads = 32;
  c.num_key_value_heads = 8;
  c.head_dim = 128;
  c.vocab_size = 128256;
  c.max_position_embeddings = 8192;
  return c;
}
} // namespace

TEST_CASE("a KV block holds K and V of every layer in the cache dtype") {
  const auto c = llama3_8b();
  // 2 (K, V) * 32 layers * 8 heads * 16 tokens * 128 dims = 1 Mi elements.
  CHECK(rt::kv_block_bytes(c, 16, rt::kv_cache_dtype::bfloat16) == 2 * MiB);
  CHECK(rt::kv_block_bytes(c, 16, rt::kv_cache_dtype::float16) == 2 * MiB);
  CHECK(rt::kv_block_bytes(c, 16, rt::kv_cache_dtype::fp8_e4m3) == 1 * MiB);
  CHECK(rt::kv_block_bytes(c, 16, rt::kv_cache_dtype::float32) == 4 * MiB);
  CHECK(rt::kv_block_bytes(c, 32, rt::kv_cache_dtype::bfloat16) == 4 * MiB);
  CHECK(rt::element_bytes(rt::cuda_dtype::float32) == 4);
  CHECK(rt::element_bytes(rt::cuda_dtype::bfloat16) == 2);
}

TEST_CASE("activation buffers follow the model's widths and the step limits") {
  const auto c = llama3_8b();
  rt::cuda_runner_options o; // bf16, 2048 tokens a step, 256 sequences, block 16
  const rt::activation_buffers a = rt::plan_activations(c, o);
  CHECK(a.rows == 2048);
  CHECK(a.seqs == 256);
  CHECK(a.blocks_per_seq == 512); // 8192 positions / 16
  CHECK(a.hidden == 2048 * 4096 * 2);
  CHECK(a.wide == 2048 * (2 * 14336) * 2); // gate|up is wider than QKV's (32 + 2 * 8) * 128
  CHECK(a.mid == 2048 * 14336 * 2);        // the MLP's activation is wider than attention's output
  CHECK(a.logits == std::size_t{2048} * 128256 * 4);
  // int64 slots, 3 int32 arrays of rows, 257 query starts (padded to 16 bytes), 256 x 512 tables.
  CHECK(a.staging == 2048 * 8 + 3 * 2048 * 4 + 1040 + 256 * 512 * 4);

  o.dtype = rt::cuda_dtype::float32;
  o.max_num_batched_tokens = 8; // fewer tokens than sequences: the staging holds 8 sequences
  o.max_blocks_per_seq = 100;
  const rt::activation_buffers f = rt::plan_activations(c, o);
  CHECK(f.seqs == 8);
  CHECK(f.blocks_per_seq == 100);
  CHECK(f.hidden == 8 * 4096 * 4);
  CHECK(f.logits == 8 * 128256 * 4);
  CHECK(f.staging == 64 + 3 * 32 + 48 + 8 * 100 * 4);

  // QKV wider than gate|up (a narrow MLP): wide takes QKV's width, mid attention's.
  auto narrow = c;
  narrow.intermediate_size = 1024;
  const rt::activation_buffers n = rt::plan_activations(narrow, rt::cuda_runner_options{});
  CHECK(n.wide == 2048 * (48 * 128) * 2);
  CHECK(n.mid == 2048 * (32 * 128) * 2);
}

TEST_CASE("deterministic: the logits hold two scratch rows a sequence more, so no batch leaves the device sampler") {
  const auto c = llama3_8b();
  rt::cuda_runner_options o;
  CHECK(rt::plan_activations(c, o).logits_rows == 2048);
  o.deterministic = true;
  const rt::activation_buffers d = rt::plan_activations(c, o);
  CHECK(d.logits_rows == 2048 + 2 * 256);
  CHECK(d.logits == std::size_t{2048 + 512} * 128256 * 4);
  CHECK(d.hidden == 2048 * 4096 * 2); // nothing else grows
}

TEST_CASE("the KV pool gets whole blocks of what the utilization target leaves") {
  // 100 GiB device with 40 GiB in use: 0.9 leaves 50 GiB, 25,600 blocks of 2 MiB.
  CHECK(rt::kv_blocks_that_fit(100 * GiB, 60 * GiB, 0.9, 2 * MiB, 0) == 25600);
  // A part of a block does not count.
  CHECK(rt::kv_blocks_that_fit(100 * GiB, 60 * GiB + MiB, 0.9, 2 * MiB, 0) == 25600);
  CHECK(rt::kv_blocks_that_fit(100 * GiB, 60 * GiB + 2 * MiB, 0.9, 2 * MiB, 0) == 25601);
  // max_blocks caps the count; a cap above it changes nothing.
  CHECK(rt::kv_blocks_that_fit(100 * GiB, 60 * GiB, 0.9, 2 * MiB, 1000) == 1000);
  CHECK(rt::kv_blocks_that_fit(100 * GiB, 60 * GiB, 0.9, 2 * MiB, 30000) == 25600);
  // Nothing left, or less than one block: no block (the runner refuses to start).
  CHECK(rt::kv_blocks_that_fit(100 * GiB, 5 * GiB, 0.9, 2 * MiB, 0) == 0);
  CHECK(rt::kv_blocks_that_fit(100 * GiB, 10 * GiB + MiB, 0.9, 2 * MiB, 0) == 0);
  // A tiny block on a large device stops at a billion blocks.
  CHECK(rt::kv_blocks_that_fit(100 * GiB, 100 * GiB, 1.0, 16, 0) == 1000000000);
}
