// The engine plan, without a device: the config's strings become typed choices once, the KV
// geometry and block counts follow the model and the machine, combinations a machine cannot
// serve are refused naming the key, and tensor-parallel ranks share out the heads.
#include <doctest/doctest.h>

#include <string>

#include "runtime/engine_plan.hpp"
#include "runtime/kv_geometry.hpp"

namespace rt = troupe::runtime;
using troupe::config_error;
using troupe::engine_config;

namespace {

constexpr std::size_t MiB = std::size_t{1} << 20, GiB = std::size_t{1} << 30;

rt::model_config shape(int layers, int heads, int kv_heads, int head_dim, int context) {
  rt::model_config c;
  c.hidden_size = heads * head_dim;
  c.intermediate_size = 4 * c.hidden_size;
  c.num_hidden_layers = layers;
  c.num_attention_heads = heads;
  c.num_key_value_heads = kv_heads;
  c.head_dim = head_dim;
  c.vocab_size = 32000;
  c.max_position_embeddings = context;
  return c;
}

// Llama-3-8B (GQA 32 / 8) and Llama-2-13B (40 / 40).
rt::model_config llama3_8b() {
  return shape(32, 32, 8, 128, 8192);
}
rt::model_config llama2_13b() {
  return shape(40, 40, 40, 128, 4096);
}

rt::machine_info cpu_only() {
  return {.cuda_devices = 0, .device_memory_bytes = 0, .cpu_cores = 8};
}
rt::machine_info one_h200() {
  return {.cuda_devices = 1, .device_memory_bytes = 140 * GiB, .cpu_cores = 16, .built_with_cuda = true};
}

std::string refusal(const engine_config& cfg, const rt::model_config& model, const rt::machine_info& machine) {
  try {
    rt::plan_engine(cfg, model, machine);
  } catch (const config_error& e) {
    return e.what();
  }
  FAIL("plan_engine did not refuse the config");
  return {};
}

} // namespace

TEST_CASE("the CPU plan: float32, device blocks from kv-cache-mib, host blocks from swap-space-gib") {
  engine_config cfg; // the defaults serve the bundled model on the CPU
  const auto model = llama3_8b();
  const auto p = rt::plan_engine(cfg, model, cpu_only());
  CHECK(p.backend == rt::backend_kind::cpu);
  CHECK(p.dtype == rt::cuda_dtype::float32);
  CHECK(p.kv == rt::kv_cache_dtype::float32);
  CHECK(p.max_model_len == 8192);
  CHECK(p.blocks_per_seq == 512);
  CHECK(p.kv_block_bytes == 4 * MiB); // 2 * 32 layers * 8 heads * 16 tokens * 128 * 4 bytes
  CHECK(p.device_blocks == 16);       // 64 MiB
  CHECK(p.host_blocks == 64);         // 0.25 GiB
  CHECK(p.cpu_threads == 8);          // cpu-threads=0: every core
  CHECK(p.step_tokens == cfg.max_num_batched_tokens);
  CHECK(p.scheduling.policy == rt::scheduling_policy::fcfs);
  CHECK(p.scheduling.preemption == rt::preemption_mode::swap);
  CHECK(p.speculation.method == rt::speculative_method::none);
  CHECK(p.speculation.k == 0);
  CHECK(p.cpu_cache().num_blocks == 16);
  CHECK(p.cpu_cache().num_host_blocks == 64);
  CHECK_FALSE(p.faults.any());

  cfg.num_device_blocks = 100;
  cfg.num_host_blocks = 0;
  cfg.cpu_threads = 3;
  cfg.scheduler_policy = "priority";
  cfg.preemption_mode = "recompute";
  cfg.crash_draft = 7;
  const auto q = rt::plan_engine(cfg, model, cpu_only());
  CHECK(q.device_blocks == 100);
  CHECK(q.host_blocks == 0);
  CHECK(q.cpu_threads == 3);
  CHECK(q.scheduling.policy == rt::scheduling_policy::priority);
  CHECK(q.scheduling.preemption == rt::preemption_mode::recompute);
  CHECK(q.faults[rt::fault_point::draft_crash] == 7);
  CHECK(q.faults[rt::fault_point::executor_step] == 0);
}

TEST_CASE("the CUDA plan: auto picks the device, bfloat16, blocks from memory capped at twice every seat") {
  engine_config cfg;
  cfg.device = "auto";
  cfg.max_num_seqs = 12;
  const auto p = rt::plan_engine(cfg, llama2_13b(), one_h200());
  CHECK(p.backend == rt::backend_kind::cuda);
  CHECK(p.dtype == rt::cuda_dtype::bfloat16);
  CHECK(p.kv == rt::kv_cache_dtype::bfloat16);
  CHECK(p.blocks_per_seq == 256);
  CHECK(p.device_blocks == 0); // sized from memory by the runner
  CHECK(p.max_device_blocks == 2 * 12 * 256);
  const auto opt = p.cuda_options();
  CHECK(opt.num_blocks == 0);
  CHECK(opt.max_blocks == 2 * 12 * 256);
  CHECK(opt.max_blocks_per_seq == 256);
  CHECK(opt.max_num_seqs == 12);
  CHECK(opt.max_num_batched_tokens == 2048);
  CHECK(opt.kv_dtype == rt::kv_cache_dtype::bfloat16);
  CHECK(opt.gpu_memory_utilization == 0.9);
  CHECK_FALSE(opt.dummy_weights);
  CHECK_FALSE(opt.deterministic);

  cfg.kv_cache_dtype = "fp8";
  cfg.load_format = "dummy";
  cfg.device_sampling = false;
  cfg.deterministic = true;
  const auto q = rt::plan_engine(cfg, llama2_13b(), one_h200());
  CHECK(q.kv == rt::kv_cache_dtype::fp8_e4m3);
  CHECK(q.kv_block_bytes == 2 * 40 * 40 * 16 * 128); // one byte an element
  CHECK(q.cuda_options().dummy_weights);
  CHECK_FALSE(q.cuda_options().device_sampling);
  CHECK(q.cuda_options().deterministic);

  // With no device, auto means the CPU.
  cfg = engine_config{};
  cfg.device = "auto";
  CHECK(rt::plan_engine(cfg, llama2_13b(), cpu_only()).backend == rt::backend_kind::cpu);
}

TEST_CASE("a verify step's k + 1 tokens per seat size the activations when they exceed the budget") {
  engine_config cfg;
  cfg.speculative_method = "ngram";
  cfg.num_speculative_tokens = 3;
  cfg.max_num_seqs = 1024;
  const auto p = rt::plan_engine(cfg, llama3_8b(), cpu_only());
  CHECK(p.speculation.method == rt::speculative_method::ngram);
  CHECK(p.speculation.k == 3);
  CHECK(p.step_tokens == 4096);
  cfg.max_num_seqs = 64;
  CHECK(rt::plan_engine(cfg, llama3_8b(), cpu_only()).step_tokens == 2048);
}

TEST_CASE("combinations the machine or the model cannot serve are refused naming the key") {
  engine_config cfg;
  cfg.device = "cuda";
  auto m = refusal(cfg, llama3_8b(), cpu_only());
  CHECK(m.find("engine.device") != std::string::npos);
  CHECK(m.find("built without CUDA") != std::string::npos);
  auto no_device = one_h200();
  no_device.cuda_devices = 0;
  CHECK(refusal(cfg, llama3_8b(), no_device).find("no CUDA device is visible") != std::string::npos);

  cfg = engine_config{};
  cfg.dtype = "bfloat16";
  m = refusal(cfg, llama3_8b(), cpu_only());
  CHECK(m.find("model.dtype") != std::string::npos);
  CHECK(m.find("engine.device=cuda") != std::string::npos);

  cfg = engine_config{};
  cfg.load_format = "dummy";
  CHECK(refusal(cfg, llama3_8b(), cpu_only()).find("model.load-format") != std::string::npos);

  cfg = engine_config{};
  cfg.kv_cache_dtype = "fp8";
  CHECK(refusal(cfg, llama3_8b(), cpu_only()).find("engine.kv-cache-dtype") != std::string::npos);

  cfg = engine_config{};
  cfg.device = "cuda";
  cfg.dtype = "bfloat16";
  cfg.kv_cache_dtype = "float16"; // neither the model's dtype nor fp8
  m = refusal(cfg, llama3_8b(), one_h200());
  CHECK(m.find("engine.kv-cache-dtype") != std::string::npos);
  CHECK(m.find("bfloat16, fp8") != std::string::npos);

  cfg = engine_config{};
  cfg.max_model_len = 9000;
  m = refusal(cfg, llama3_8b(), cpu_only());
  CHECK(m.find("engine.max-model-len") != std::string::npos);
  CHECK(m.find("8192") != std::string::npos);

  cfg = engine_config{};
  cfg.speculative_method = "self";
  cfg.draft_layers = 32;
  m = refusal(cfg, llama3_8b(), cpu_only());
  CHECK(m.find("speculative.draft-layers") != std::string::npos);
  CHECK(m.find("1..31") != std::string::npos);

  cfg.draft_layers = 2;
  cfg.device = "cuda";
  cfg.load_format = "dummy";
  CHECK(refusal(cfg, llama3_8b(), one_h200()).find("speculative.method") != std::string::npos);

  // Deterministic decoding and speculation: how many drafts a step verifies depends on the batch.
  for (const char* method : {"ngram", "self", "draft"}) {
    CAPTURE(method);
    cfg = engine_config{};
    cfg.deterministic = true;
    cfg.speculative_method = method;
    cfg.draft_model = "models/draft";
    m = refusal(cfg, llama3_8b(), cpu_only());
    CHECK(m.find("speculative.method") != std::string::npos);
    CHECK(m.find("engine.deterministic=true: none") != std::string::npos);
  }

  cfg = engine_config{};
  cfg.kv_cache_mib = 1;
  cfg.block_size = 256; // a block of 64 MiB does not fit 1 MiB
  CHECK(refusal(cfg, llama3_8b(), cpu_only()).find("engine.kv-cache-mib") != std::string::npos);
}

TEST_CASE("plan_engine validates: a bad value is refused before anything is planned") {
  engine_config cfg;
  cfg.block_size = 24;
  CHECK(refusal(cfg, llama3_8b(), cpu_only()).find("engine.block-size") != std::string::npos);
}

TEST_CASE("the context a cache serves: max-model-len, or what the cache holds when it holds less") {
  engine_config cfg;
  const auto p = rt::plan_engine(cfg, llama3_8b(), cpu_only());
  CHECK(p.context_that_fits(1000) == 8192);
  CHECK(p.context_that_fits(512) == 8192);
  CHECK(p.context_that_fits(100) == 1600);
}

TEST_CASE("a model whose every layer slides is served at any context by a cache that holds its window and a step") {
  engine_config cfg;
  cfg.max_num_batched_tokens = 512;
  auto model = llama3_8b();
  model.sliding_window = 4096;
  model.sliding_layers.assign(static_cast<std::size_t>(model.num_hidden_layers), true);
  const auto p = rt::plan_engine(cfg, model, cpu_only());
  CHECK(p.sliding_window == 4096);
  // 4095 + 512 positions: 288 blocks of 16, and one more where the window starts inside a block.
  CHECK(p.context_that_fits(289) == 8192);
  CHECK(p.context_that_fits(288) == 288 * 16);
  // One full layer keeps every position: the cache caps the context as without a window.
  model.sliding_layers.back() = false;
  const auto mixed = rt::plan_engine(cfg, model, cpu_only());
  CHECK(mixed.sliding_window == 0);
  CHECK(mixed.context_that_fits(290) == 290 * 16);
}

TEST_CASE("one rank holds every head, and more ranks split the query heads and the kv heads they read") {
  const auto m13 = llama2_13b();
  const auto one = rt::head_slices(m13, 1, 16, rt::kv_cache_dtype::bfloat16);
  REQUIRE(one.size() == 1);
  CHECK(one[0].q_heads == 40);
  CHECK(one[0].kv_heads == 40);
  CHECK(one[0].kv_block_bytes == rt::kv_block_bytes(m13, 16, rt::kv_cache_dtype::bfloat16));

  const auto four = rt::head_slices(m13, 4, 16, rt::kv_cache_dtype::bfloat16);
  REQUIRE(four.size() == 4);
  std::size_t bytes = 0;
  for (int r = 0; r < 4; ++r) {
    CHECK(four[r].rank == r);
    CHECK(four[r].q_head_begin == 10 * r);
    CHECK(four[r].q_heads == 10);
    CHECK(four[r].kv_head_begin == 10 * r);
    CHECK(four[r].kv_heads == 10);
    bytes += four[r].kv_block_bytes;
  }
  CHECK(bytes == one[0].kv_block_bytes); // the ranks' parts make one block

  // Llama-3-8B on 16 ranks: 2 query heads each, 8 kv heads, so two ranks share (copies of) each.
  const auto m8 = llama3_8b();
  const auto sixteen = rt::head_slices(m8, 16, 16, rt::kv_cache_dtype::bfloat16);
  REQUIRE(sixteen.size() == 16);
  CHECK(sixteen[1].q_head_begin == 2);
  CHECK(sixteen[1].kv_head_begin == 0); // query heads 2, 3 read kv head 0 (groups of 4)
  CHECK(sixteen[2].kv_head_begin == 1);
  CHECK(sixteen[15].kv_head_begin == 7);
  for (const auto& s : sixteen)
    CHECK(s.kv_heads == 1);

  auto refused = [](const rt::model_config& m, int ranks) {
    try {
      rt::head_slices(m, ranks, 16, rt::kv_cache_dtype::bfloat16);
    } catch (const config_error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  auto m = refused(m8, 3);
  CHECK(m.find("engine.tensor-parallel-size 3") != std::string::npos);
  CHECK(m.find("32 attention heads and 8 key/value heads") != std::string::npos);
  CHECK_FALSE(refused(shape(2, 12, 3, 64, 512), 2).empty()); // 3 kv heads neither split in 2 nor share 2 ranks
  CHECK(refused(shape(2, 12, 3, 64, 512), 3).empty());
}

TEST_CASE("the draft's pool: a tenth of the GPU at most, the target's CPU pool on the CPU") {
  engine_config cfg;
  cfg.device = "cuda";
  cfg.speculative_method = "draft";
  cfg.draft_model = "drafts/small";
  cfg.draft_load_format = "dummy";
  cfg.max_num_seqs = 12;
  const auto target = llama2_13b();
  const auto plan = rt::plan_engine(cfg, target, one_h200());
  auto draft = shape(4, 16, 16, 64, 4096);
  const auto d = rt::plan_draft(plan, target, draft, one_h200());
  // Every seat at the longest context plus k: 12 * ceil((4096 + 3) / 16) = 12 * 257 blocks.
  CHECK(d.blocks == 12 * 257);
  CHECK(d.cuda.num_blocks == d.blocks);
  CHECK(d.cuda.max_blocks_per_seq == 257);
  CHECK(d.cuda.dummy_weights);
  CHECK_FALSE(d.cuda.device_sampling);
  CHECK(d.step_tokens == 2048);
  // A machine with little memory caps the pool at a tenth of it.
  auto small = one_h200();
  small.device_memory_bytes = 5 * GiB; // a tenth: 512 MiB = 2048 blocks of 256 KiB
  CHECK(rt::plan_draft(plan, target, draft, small).blocks == 2048);

  draft.vocab_size = 32001;
  try {
    rt::plan_draft(plan, target, draft, one_h200());
    FAIL("a draft with another vocabulary was accepted");
  } catch (const config_error& e) {
    CHECK(std::string(e.what()).find("drafts/small") != std::string::npos);
    CHECK(std::string(e.what()).find("32001") != std::string::npos);
  }

  cfg = engine_config{};
  cfg.speculative_method = "self";
  const auto cpu_plan = rt::plan_engine(cfg, target, cpu_only());
  const auto self_draft = shape(2, 40, 40, 128, 4096);
  // 64 MiB of fp32 blocks of 2 * 2 layers * 40 heads * 16 * 128 * 4 bytes = 1.25 MiB: 51 of them.
  CHECK(rt::plan_draft(cpu_plan, target, self_draft, cpu_only()).blocks == 51);
}

TEST_CASE(
    "tensor-parallel-size above 1: planned on both backends, refused where the model does not share out") {
  engine_config cfg;
  cfg.tensor_parallel_size = 4;
  const auto p = rt::plan_engine(cfg, llama3_8b(), cpu_only());
  REQUIRE(p.ranks.size() == 4);
  CHECK(p.ranks[3].q_head_begin == 24);
  CHECK(p.ranks[3].intermediate_begin == 3 * 4096);
  CHECK(p.kv_block_bytes == 4 * p.ranks[0].kv_block_bytes); // the blocks count every rank's heads

  cfg.device = "cuda";
  auto m = refusal(cfg, llama3_8b(), one_h200());
  CHECK(m.find("engine.tensor-parallel-size") != std::string::npos);
  CHECK(m.find("4 ranks need 4 GPUs, 1 visible") != std::string::npos);
  auto four = one_h200();
  four.cuda_devices = 4;
  const auto on_four = rt::plan_engine(cfg, llama3_8b(), four);
  CHECK(on_four.devices == std::vector<int>{0, 1, 2, 3});
  CHECK(on_four.ranks.size() == 4);

  cfg.device = "cpu";
  cfg.tensor_parallel_size = 3;
  CHECK(refusal(cfg, llama3_8b(), cpu_only()).find("32 attention heads and 8 key/value heads") != std::string::npos);
}

TEST_CASE("engine.tensor-parallel-devices: each rank's GPU, checked against the GPUs present, cuda only") {
  engine_config cfg;
  cfg.device = "cuda";
  cfg.tensor_parallel_size = 2;
  cfg.tensor_parallel_devices = "0,0";
  // Two ranks on one GPU need a fixed pool: sized from memory one after another they would not fit.
  CHECK(refusal(cfg, llama3_8b(), one_h200()).find("need engine.num-device-blocks") != std::string::npos);
  cfg.num_device_blocks = 100;
  const auto shared = rt::plan_engine(cfg, llama3_8b(), one_h200());
  CHECK(shared.devices == std::vector<int>{0, 0});
  CHECK(shared.cuda_options().device == 0);
  cfg.tensor_parallel_devices = "0,1";
  CHECK(refusal(cfg, llama3_8b(), one_h200()).find("GPU 1 does not exist, 1 visible") != std::string::npos);
  cfg.tensor_parallel_devices = "0,x";
  CHECK(refusal(cfg, llama3_8b(), one_h200()).find("GPU numbers separated by commas") != std::string::npos);
  cfg.tensor_parallel_devices = "0";
  CHECK(refusal(cfg, llama3_8b(), one_h200()).find("names 1 GPUs for engine.tensor-parallel-size=2") !=
        std::string::npos);
  cfg.tensor_parallel_devices = "";
  cfg.tensor_parallel_size = 16;
  auto many = one_h200();
  many.cuda_devices = 16;
  CHECK(refusal(cfg, llama3_8b(), many).find("1..8") != std::string::npos);
  cfg.device = "cpu";
  cfg.tensor_parallel_size = 2;
  cfg.tensor_parallel_devices = "0,1";
  CHECK(refusal(cfg, llama3_8b(), cpu_only()).find("engine.tensor-parallel-devices") != std::string::npos);
}

TEST_CASE("model.quantization=fp8: FP8 linear layers on either backend, an FP8 checkpoint is FP8 without it, an AWQ "
          "checkpoint refuses it") {
  engine_config cfg;
  cfg.quantization = "fp8";
  const auto cpu = rt::plan_engine(cfg, llama3_8b(), cpu_only());
  CHECK(cpu.quantize_fp8);
  CHECK(cpu.fp8_weights);
  cfg.device = "cuda";
  const auto cuda = rt::plan_engine(cfg, llama3_8b(), one_h200());
  CHECK(cuda.cuda_options().fp8_weights);

  engine_config plain;
  plain.device = "cuda";
  CHECK_FALSE(rt::plan_engine(plain, llama3_8b(), one_h200()).cuda_options().fp8_weights);
  auto fp8_checkpoint = llama3_8b();
  fp8_checkpoint.quantization = rt::quantization_config{.scheme = rt::quantization_scheme::fp8_block};
  const auto from_checkpoint = rt::plan_engine(plain, fp8_checkpoint, one_h200());
  CHECK_FALSE(from_checkpoint.quantize_fp8); // its values are FP8 already
  CHECK(from_checkpoint.cuda_options().fp8_weights);

  auto awq = llama3_8b();
  awq.quantization = rt::quantization_config{.scheme = rt::quantization_scheme::awq};
  CHECK_FALSE(rt::plan_engine(plain, awq, one_h200()).fp8_weights);
  CHECK(rt::plan_engine(plain, awq, one_h200()).cuda_options().int4_weights); // AWQ stays INT4 on the GPU
  CHECK_FALSE(rt::plan_engine(plain, llama3_8b(), one_h200()).cuda_options().int4_weights);
  CHECK_FALSE(from_checkpoint.cuda_options().int4_weights);
  const std::string message = refusal(cfg, awq, one_h200());
  CHECK(message.find("model.quantization") != std::string::npos);
  CHECK(message.find("awq") != std::string::npos);

  // A mixture of experts: its experts have no FP8 form yet, on either backend.
  auto mixtral = llama3_8b();
  mixtral.model_type = "mixtral";
  mixtral.intermediate_size = 0;
  mixtral.moe = rt::moe_config{.num_experts = 8, .experts_per_token = 2, .expert_intermediate_size = 14336};
  CHECK_FALSE(rt::plan_engine(plain, mixtral, one_h200()).quantize_fp8);
  for (const bool on_gpu : {false, true}) {
    engine_config moe_fp8;
    moe_fp8.quantization = "fp8";
    if (on_gpu)
      moe_fp8.device = "cuda";
    const std::string moe_message = refusal(moe_fp8, mixtral, on_gpu ? one_h200() : cpu_only());
    CHECK(moe_message.find("model.quantization") != std::string::npos);
    CHECK(moe_message.find("mixture-of-experts model (mixtral)") != std::string::npos);
  }
}
