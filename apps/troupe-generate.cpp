// troupe-generate: streams a completion of one prompt from a model folder to
// stdout, on the CPU backend, without actors. Logs and the final speed line go
// to stderr so stdout carries only the generated text.
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <thread>

#include "runtime/cpu/cpu_model_runner.hpp"
#include "runtime/errors.hpp"
#include "runtime/generation_config.hpp"
#include "runtime/local_generator.hpp"
#include "runtime/model_config.hpp"
#include "runtime/model_weights.hpp"
#include "runtime/safetensors.hpp"
#include "runtime/tokenizer.hpp"

namespace {

constexpr std::string_view usage = R"(usage: troupe-generate --model DIR [--prompt TEXT] [options]

Streams the model's continuation of TEXT to stdout (CPU backend, fp32).
  --model DIR          Hugging Face model folder (config.json, model.safetensors, tokenizer.json)
  --prompt TEXT        prompt (default "Once upon a time")
  --max-tokens N       tokens to generate at most (default 256)
  --temperature T      0 = greedy (default 1.0)
  --top-p P            nucleus sampling mass (default 0.9)
  --top-k K            keep the K most likely tokens (default 0 = off)
  --min-p M            drop tokens below M x the top probability (default 0)
  --repetition-penalty R, --frequency-penalty F, --presence-penalty P
  --seed S             seed of the sampler (default: random)
  --stop STR           stop string (repeatable); not printed
  --stop-token-id ID   extra stop token id (repeatable)
  --ignore-eos         do not stop on the model's stop token ids
  --threads N          CPU threads (default: all cores)
  --block-size N       KV-cache block size, 1..256 (default 16)
  -h, --help           this text
)";

struct options {
  std::string model, prompt = "Once upon a time";
  troupe::runtime::sampling_params params;
  std::size_t threads = 0;
  int block_size = 16;
  bool seeded = false;
};

[[noreturn]] void bad_usage(const std::string& message) {
  std::cerr << "troupe-generate: " << message << "\n\n" << usage;
  std::exit(2);
}

template <class T>
T parse_number(std::string_view flag, const std::string& text) {
  try {
    std::size_t used = 0;
    T value;
    if constexpr (std::is_floating_point_v<T>)
      value = static_cast<T>(std::stod(text, &used));
    else
      value = static_cast<T>(std::stoll(text, &used));
    if (used != text.size())
      throw std::invalid_argument("trailing characters");
    return value;
  } catch (const std::exception&) {
    bad_usage(std::string(flag) + " expects a number, got '" + text + "'");
  }
}

options parse_args(int argc, char** argv) {
  options o;
  o.params.max_tokens = 256;
  o.params.top_p = 0.9f;
  for (int i = 1; i < argc; ++i) {
    std::string_view flag = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc)
        bad_usage(std::string(flag) + " needs a value");
      return argv[++i];
    };
    if (flag == "-h" || flag == "--help") {
      std::cout << usage;
      std::exit(0);
    } else if (flag == "--model") {
      o.model = value();
    } else if (flag == "--prompt") {
      o.prompt = value();
    } else if (flag == "--max-tokens") {
      o.params.max_tokens = parse_number<int>(flag, value());
    } else if (flag == "--temperature") {
      o.params.temperature = parse_number<float>(flag, value());
    } else if (flag == "--top-p") {
      o.params.top_p = parse_number<float>(flag, value());
    } else if (flag == "--top-k") {
      o.params.top_k = parse_number<int>(flag, value());
    } else if (flag == "--min-p") {
      o.params.min_p = parse_number<float>(flag, value());
    } else if (flag == "--repetition-penalty") {
      o.params.repetition_penalty = parse_number<float>(flag, value());
    } else if (flag == "--frequency-penalty") {
      o.params.frequency_penalty = parse_number<float>(flag, value());
    } else if (flag == "--presence-penalty") {
      o.params.presence_penalty = parse_number<float>(flag, value());
    } else if (flag == "--seed") {
      o.params.seed = parse_number<std::uint64_t>(flag, value());
    } else if (flag == "--stop") {
      o.params.stop.push_back(value());
    } else if (flag == "--stop-token-id") {
      o.params.stop_token_ids.push_back(parse_number<int>(flag, value()));
    } else if (flag == "--ignore-eos") {
      o.params.ignore_eos = true;
    } else if (flag == "--threads") {
      o.threads = parse_number<std::size_t>(flag, value());
    } else if (flag == "--block-size") {
      o.block_size = parse_number<int>(flag, value());
    } else {
      bad_usage("unknown option " + std::string(flag));
    }
  }
  if (o.model.empty())
    bad_usage("--model is required");
  if (o.block_size < 1 || o.block_size > 256)
    bad_usage("--block-size must be in 1..256");
  return o;
}

int run(const options& o) {
  using clock = std::chrono::steady_clock;
  namespace rt = troupe::runtime;
  auto log = spdlog::stderr_color_mt("generate");
  auto t0 = clock::now();
  auto config = rt::load_model_config(o.model);
  auto store = rt::tensor_store::open(o.model);
  auto weights = rt::load_model_weights(store, config);
  auto tok = rt::tokenizer::load(o.model);
  auto stop_ids = rt::default_stop_token_ids(rt::load_generation_config(o.model), config);

  auto params = o.params;
  params.validate();
  if (!params.seed)
    params.seed = std::random_device{}();
  auto prompt_ids = tok.encode(o.prompt, true);
  int capacity = std::min<int>(static_cast<int>(prompt_ids.size()) + params.max_tokens, config.max_position_embeddings);
  int blocks = (capacity + o.block_size - 1) / o.block_size;
  std::size_t threads = o.threads ? o.threads : std::max(1u, std::thread::hardware_concurrency());
  rt::cpu_model_runner runner(config, std::move(weights), {blocks, o.block_size}, threads);
  log->info("loaded {} ({} layers, hidden {}, vocab {}) in {:.0f} ms; {} prompt tokens; {} threads; seed {}",
            o.model, config.num_hidden_layers, config.hidden_size, config.vocab_size,
            std::chrono::duration<double, std::milli>(clock::now() - t0).count(), prompt_ids.size(), threads,
            *params.seed);

  rt::local_generator gen(runner, tok, stop_ids, {});
  auto start = clock::now();
  std::optional<clock::time_point> first_text;
  auto results = gen.run({{prompt_ids, params, *params.seed}}, [&](std::size_t, std::string_view text) {
    if (!first_text)
      first_text = clock::now();
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
  });
  double seconds = std::chrono::duration<double>(clock::now() - start).count();
  std::fputc('\n', stdout);
  std::fflush(stdout);
  const auto& r = results.front();
  std::fprintf(stderr, "[%zu prompt + %zu generated tokens, finish_reason=%s] %.1f tokens/s (%.3f s, %zu threads)\n",
               prompt_ids.size(), r.output_ids.size(), std::string(rt::to_string(r.reason)).c_str(),
               static_cast<double>(r.output_ids.size()) / seconds, seconds, threads);
  return 0;
}

} // namespace

int main(int argc, char** argv) {
  auto opts = parse_args(argc, argv);
  try {
    return run(opts);
  } catch (const troupe::runtime::model_error& e) {
    std::cerr << "troupe-generate: cannot load the model: " << e.what() << "\n";
  } catch (const troupe::runtime::invalid_argument_error& e) {
    std::cerr << "troupe-generate: " << e.what() << "\n";
  } catch (const std::exception& e) {
    std::cerr << "troupe-generate: error: " << e.what() << "\n";
  }
  return 1;
}
