// The whole engine on engine.device=cuda, through the actors: float32 greedy output is
// the CPU engine's token for token (golden prompts, batched), and stays so when a tiny
// KV pool forces preemption by swap through the pinned host tier; CUDA graphs on and off
// agree; dummy weights serve; structured-output bans are applied on the device; a sliding-window model
// gives the CPU's tokens far past its window with its blocks given back, graphs on and off.
#include <doctest/doctest.h>

#include <boost/json.hpp>

#include <functional>
#include <regex>

#include "tests/support/engine_harness.hpp"
#include "tests/support/quantized_checkpoint.hpp"
#include "tests/support/sliding_stories.hpp"
#include "tests/support/temp_dir.hpp"

using namespace troupe;
using namespace troupe::testing;

namespace {

engine_config on(const char* device, const char* dtype) {
  auto c = stories_engine_config();
  c.device = device;
  c.dtype = dtype;
  return c;
}

std::vector<request_spec> golden_specs(int tokens) {
  std::vector<request_spec> specs;
  auto golden = read_json(stories_dir() / "golden_greedy.json");
  for (const auto& c : golden.at("cases").as_array())
    specs.push_back(greedy_spec(std::string(c.at("prompt").as_string()), tokens));
  return specs;
}

std::vector<std::vector<token_id>> outputs(const engine_config& cfg, const std::vector<request_spec>& specs) {
  engine_fixture fx(cfg);
  auto out = fx.run(specs);
  std::vector<std::vector<token_id>> ids;
  for (const auto& o : out) {
    CHECK_MESSAGE(o.finished, o.error.message);
    ids.push_back(o.token_ids);
  }
  auto stats = fx.settled_stats();
  CHECK(stats.device_blocks_free == stats.device_blocks_total);
  return ids;
}

} // namespace

TEST_CASE("device=cuda float32 gives the CPU's greedy tokens for every golden prompt, batched") {
  auto specs = golden_specs(64);
  auto cpu = outputs(on("cpu", "float32"), specs);
  auto cuda = outputs(on("cuda", "float32"), specs);
  REQUIRE(cpu.size() == cuda.size());
  for (std::size_t i = 0; i < cpu.size(); ++i) {
    CAPTURE(i);
    CHECK(cpu[i].size() == 64);
    CHECK(cuda[i] == cpu[i]);
  }
}

TEST_CASE("device=cuda bfloat16 (and dtype auto) serves the golden prompts to the end") {
  for (const char* dtype : {"bfloat16", "auto"}) {
    CAPTURE(dtype);
    auto out = outputs(on("cuda", dtype), golden_specs(32));
    for (const auto& ids : out)
      CHECK(ids.size() == 32);
  }
}

TEST_CASE("device=cuda float16 serves the golden prompts to the end, and refuses a bfloat16 cache naming the key") {
  for (const char* kv : {"auto", "float16", "fp8"}) {
    CAPTURE(kv);
    auto cfg = on("cuda", "float16");
    cfg.kv_cache_dtype = kv;
    for (const auto& ids : outputs(cfg, golden_specs(32)))
      CHECK(ids.size() == 32);
  }
  auto bad = on("cuda", "float16");
  bad.kv_cache_dtype = "bfloat16";
  caf::actor_system_config sys_cfg;
  caf::actor_system sys{sys_cfg};
  try {
    spawn_engine(sys, bad);
    FAIL("spawn_engine accepted a bfloat16 cache under float16 weights");
  } catch (const config_error& e) {
    const std::string what = e.what();
    CHECK(what.find("engine.kv-cache-dtype") != std::string::npos);
    CHECK(what.find("'bfloat16'") != std::string::npos);
    CHECK(what.find("auto, float16, fp8") != std::string::npos);
  }
}

TEST_CASE("device=cuda with an fp8 KV cache serves the golden prompts to the end") {
  auto cfg = on("cuda", "bfloat16");
  cfg.kv_cache_dtype = "fp8";
  for (const auto& ids : outputs(cfg, golden_specs(32)))
    CHECK(ids.size() == 32);
}

TEST_CASE("device=cuda: preemption by swap keeps the output identical to an undisturbed run and to the CPU") {
  auto cfg = on("cuda", "float32");
  cfg.num_device_blocks = 20; // two 250-token sequences need 32 blocks of 16
  cfg.preemption_mode = "swap";
  auto a = greedy_spec("Once upon a time", 250);
  auto b = greedy_spec("The little dog", 250);
  std::vector<request_outcome> out;
  engine_stats stats;
  {
    engine_fixture fx(cfg);
    out = fx.run({a, b});
    stats = fx.settled_stats();
  }
  REQUIRE(out[0].finished);
  REQUIRE(out[1].finished);
  CHECK(stats.preemptions_swap >= 1);
  CHECK(stats.swap_out_bytes > 0);
  // Every byte swapped out came back: copied, or still on the device (prefix-cached blocks).
  CHECK(stats.swap_in_bytes + stats.swap_in_reused_bytes == stats.swap_out_bytes);
  CHECK(stats.device_blocks_free == stats.device_blocks_total);
  CHECK(stats.host_blocks_free == stats.host_blocks_total);

  auto roomy = cfg;
  roomy.num_device_blocks = 0; // sized from GPU memory
  auto solo_a = outputs(roomy, {a});
  auto solo_b = outputs(roomy, {b});
  CHECK(out[0].token_ids == solo_a[0]);
  CHECK(out[1].token_ids == solo_b[0]);
  auto cpu = outputs(on("cpu", "float32"), {a, b});
  CHECK(out[0].token_ids == cpu[0]);
  CHECK(out[1].token_ids == cpu[1]);
}

TEST_CASE("device=auto serves on a GPU machine, and the CPU backend refuses bfloat16 naming the key") {
  auto cfg = on("auto", "auto");
  for (const auto& ids : outputs(cfg, golden_specs(8)))
    CHECK(ids.size() == 8);
  caf::actor_system_config sys_cfg;
  caf::actor_system sys{sys_cfg};
  auto bad = on("cpu", "bfloat16");
  try {
    spawn_engine(sys, bad);
    FAIL("spawn_engine accepted bfloat16 on the CPU");
  } catch (const config_error& e) {
    CHECK(std::string(e.what()).find("model.dtype") != std::string::npos);
  }
}

TEST_CASE("device=cuda: engine.cuda-graphs=false gives the greedy tokens of graph replay, batched") {
  auto specs = golden_specs(48);
  auto graphs = outputs(on("cuda", "float32"), specs); // engine.cuda-graphs defaults to true
  auto cfg = on("cuda", "float32");
  cfg.cuda_graphs = false;
  auto plain = outputs(cfg, specs);
  REQUIRE(graphs.size() == plain.size());
  for (std::size_t i = 0; i < graphs.size(); ++i) {
    CAPTURE(i);
    CHECK(graphs[i] == plain[i]);
  }
}

TEST_CASE("device=cuda: model.load-format=dummy serves from config.json alone (weights made on the GPU)") {
  auto cfg = on("cuda", "bfloat16");
  cfg.load_format = "dummy";
  for (const auto& ids : outputs(cfg, golden_specs(16)))
    CHECK(ids.size() == 16);
}

namespace {

// Each request served alone, one after another on one engine: every step's rows, and so each
// linear layer's path (GEMV or dequantized), are the same from run to run.
std::vector<std::vector<token_id>> outputs_one_at_a_time(const engine_config& cfg,
                                                         const std::vector<request_spec>& specs) {
  engine_fixture fx(cfg);
  std::vector<std::vector<token_id>> ids;
  for (const auto& spec : specs)
    for (const auto& o : fx.run({spec})) {
      CHECK_MESSAGE(o.finished, o.error.message);
      ids.push_back(o.token_ids);
    }
  return ids;
}

// A quantized model through the engine: float32 activations on the GPU (each layer dequantized
// for cuBLASLt) give the CPU engine's tokens over the same values; bfloat16 (the quantized GEMV in
// decode steps and short prefills) gives the same tokens with CUDA graphs on and off, each request
// served alone. Not claimed: a request alone and in a batch agree in bfloat16 (a step past the
// GEMV's rows takes the dequantized path, whose bf16 weights round what the GEMV keeps in fp32; the
// 5 golden prompts' prefills batch differently from run to run as they arrive). `set` points a
// config at the model.
void check_quantized_engine(const std::function<void(engine_config&)>& set) {
  auto specs = golden_specs(48);
  auto cpu_cfg = on("cpu", "float32");
  auto cuda_cfg = on("cuda", "float32");
  set(cpu_cfg);
  set(cuda_cfg);
  const auto cpu = outputs(cpu_cfg, specs);
  const auto cuda = outputs(cuda_cfg, specs);
  REQUIRE(cpu.size() == cuda.size());
  for (std::size_t i = 0; i < cpu.size(); ++i) {
    CAPTURE(i);
    CHECK(cpu[i].size() == 48);
    CHECK(cuda[i] == cpu[i]);
  }
  auto bf16 = on("cuda", "bfloat16");
  set(bf16);
  const auto graphs = outputs_one_at_a_time(bf16, specs);
  bf16.cuda_graphs = false;
  const auto plain = outputs_one_at_a_time(bf16, specs);
  CHECK(graphs == plain);
}

} // namespace

// model.quantization=fp8: the bundled model rounded to FP8 at load, on either backend.
TEST_CASE("device=cuda, model.quantization=fp8: the CPU's FP8 tokens in float32, graphs on and off agree in bfloat16") {
  check_quantized_engine([](engine_config& c) { c.quantization = "fp8"; });
}

// An AWQ checkpoint (attention layers INT4 in groups of 32, the MLP left fp32), kept INT4 by the
// CUDA runner.
TEST_CASE("device=cuda, an AWQ checkpoint kept INT4: the CPU's tokens in float32, graphs on and off agree in bfloat16") {
  temp_dir awq("troupe_awq_cuda");
  write_quantized_stories(awq.path, {"awq group 32", quant_kind::awq, 0, 0, 32});
  check_quantized_engine([&](engine_config& c) { c.model_path = awq.path.string(); });
}

TEST_CASE("device=cuda: structured output is applied on the device, float32 greedy constrained tokens are the CPU's") {
  // The constraint's bans ride the rows' logit edits into the GPU's penalty kernel (tens of
  // thousands of ids a row in a big vocabulary; here most of stories260k's 512).
  const std::string pattern = "(Mr|Mrs|Dr)\\. [A-Z][a-z]{1,8} (is|was) [1-9][0-9]?\\.";
  const std::string schema = R"({"type":"object","properties":{"name":{"type":"string","maxLength":8},)"
                             R"("age":{"type":"integer","minimum":1,"maximum":99}},"required":["name","age"],)"
                             R"("additionalProperties":false})";
  std::vector<request_spec> specs;
  for (std::uint64_t seed = 0; seed < 6; ++seed) {
    for (int kind = 0; kind < 2; ++kind) {
      auto spec = greedy_spec("Once upon a time, a girl said", 64, /*ignore_eos=*/false);
      spec.params.temperature = seed == 0 ? 0.0f : 1.0f;
      spec.params.seed = seed;
      spec.params.constraint = kind == 0 ? output_constraint{output_constraint::kind::regex, pattern, {}}
                                         : output_constraint{output_constraint::kind::json_schema, schema, {}};
      specs.push_back(spec);
    }
  }
  auto texts = [&](const engine_config& cfg) {
    engine_fixture fx(cfg);
    auto out = fx.run(specs);
    std::vector<std::string> t;
    for (std::size_t i = 0; i < out.size(); ++i) {
      const auto& o = out[i];
      REQUIRE_MESSAGE(o.finished, o.error.message);
      t.push_back(o.text);
      if (o.final.reason != "stop")
        continue;
      if (i % 2 == 0) { // the regex
        CHECK_MESSAGE(std::regex_match(o.text, std::regex(pattern)), o.text);
      } else {
        boost::system::error_code ec;
        const auto v = boost::json::parse(o.text, ec);
        CHECK_MESSAGE((!ec && v.is_object() && v.as_object().size() == 2), o.text);
      }
    }
    return t;
  };
  const auto cpu = texts(on("cpu", "float32"));
  const auto gpu = texts(on("cuda", "float32"));
  CHECK(gpu[0] == cpu[0]); // greedy regex
  CHECK(gpu[1] == cpu[1]); // greedy schema
  texts(on("cuda", "bfloat16"));
}

TEST_CASE("device=cuda: a sliding-window model (every layer 32 positions) gives the CPU's float32 tokens past "
          "its window in a pool smaller than its sequences, graphs on and off") {
  sliding_stories model(32);
  auto sliding = [&](const char* device) {
    auto c = on(device, "float32");
    c.model_path = model.dir.path.string();
    c.block_size = 16;
    c.num_device_blocks = 24;        // 384 positions; three 460-position sequences fit only by giving blocks back
    c.max_num_batched_tokens = 128; // a sequence holds at most 31 + 128 positions
    return c;
  };
  const auto specs = golden_specs(400);
  const auto cpu = outputs(sliding("cpu"), specs);
  const auto graphs = outputs(sliding("cuda"), specs);
  auto eager_cfg = sliding("cuda");
  eager_cfg.cuda_graphs = false;
  const auto eager = outputs(eager_cfg, specs);
  for (std::size_t i = 0; i < cpu.size(); ++i) {
    CAPTURE(i);
    CHECK(cpu[i].size() == 400);
    CHECK(graphs[i] == cpu[i]);
    CHECK(eager[i] == cpu[i]);
  }
  // bfloat16 serves the same prompts to the end.
  auto bf16 = sliding("cuda");
  bf16.dtype = "bfloat16";
  for (const auto& o : outputs(bf16, specs))
    CHECK(o.size() == 400);
}
