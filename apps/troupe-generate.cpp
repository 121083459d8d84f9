// troupe-generate: streams a completion of one prompt to stdout through the
// engine's actors (the same path as the server). Logs and the final speed line
// go to stderr so stdout carries only the generated text.
#include <caf/all.hpp>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "troupe/engine.hpp"
#include "troupe/engine_system_config.hpp"

namespace {

constexpr std::string_view usage = R"(usage: troupe-generate [--model DIR] [--prompt TEXT] [options] [engine options]

Streams the model's continuation of TEXT to stdout through the engine (CPU backend, fp32).
  --model DIR          Hugging Face model folder (config.json, model.safetensors, tokenizer.json);
                       sets model.path (default models/stories260k, relative to the current directory)
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
  --threads N          CPU threads, sets engine.cpu-threads (default 0: all cores)
  --block-size N       KV-cache block size, sets engine.block-size: a power of two in 1..256 (default 16)
  -h, --help           this text

Engine options (CAF style, '=' required; the command line beats the file):
  --config-file=FILE   read [model], [engine], [speculative] and [debug] from an INI file
                       (e.g. configs/stories260k-cpu.ini); no file is read without it
  --model.KEY=VALUE, --engine.KEY=VALUE, --speculative.KEY=VALUE, --debug.KEY=VALUE
                       e.g. --engine.max-num-seqs=8 --engine.enable-prefix-caching=false
                       ([debug]: fault injection, for tests only)
  --long-help          every option with its description (CAF's help)
Unknown keys, wrong types and invalid values are refused at start (exit 1).
)";

struct options {
  std::string prompt = "Once upon a time";
  troupe::sampling_params params;
  std::vector<std::string> engine_args;  // for engine_system_config::load
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

// The generate flags (space-separated values) are handled here; --model,
// --threads and --block-size become engine overrides; engine options in CAF
// style pass through to the engine's config; anything else is bad usage.
options parse_args(int argc, char** argv) {
  options o;
  o.params.max_tokens = 256;
  o.params.top_p = 0.9f;
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc)
        bad_usage(flag + " needs a value");
      return argv[++i];
    };
    if (flag == "-h" || flag == "--help") {
      std::cout << usage;
      std::exit(0);
    } else if (flag == "--model") {
      o.engine_args.push_back("--model.path=" + value());
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
      o.engine_args.push_back("--engine.cpu-threads=" + std::to_string(parse_number<int>(flag, value())));
    } else if (flag == "--block-size") {
      o.engine_args.push_back("--engine.block-size=" + std::to_string(parse_number<int>(flag, value())));
    } else if (flag.rfind("--config-file", 0) == 0 || flag == "--long-help" || flag == "--dump-config" ||
               (flag.rfind("--", 0) == 0 && flag.find('.') != std::string::npos)) {
      // CAF's options: --config-file=FILE, --category.key=value (ours are checked strictly).
      o.engine_args.push_back(flag);
    } else {
      bad_usage("unknown option " + flag);
    }
  }
  return o;
}

// Sends the one request and prints its deltas as they arrive; returns the exit code.
int run(const options& o) {
  using clock = std::chrono::steady_clock;
  auto log = spdlog::stderr_color_mt("generate");  // stderr: stdout carries only the text

  troupe::engine_system_config cfg;
  if (!cfg.load(o.engine_args))
    return 0;  // CAF printed help or the config
  auto params = o.params;
  params.validate();
  if (!params.seed)
    params.seed = std::random_device{}();
  const int threads = cfg.engine.cpu_threads > 0 ? cfg.engine.cpu_threads
                                                 : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));

  caf::actor_system sys{cfg};
  auto t0 = clock::now();
  auto engine = troupe::spawn_engine(sys, cfg.engine);
  log->info("engine ready in {:.0f} ms; seed {}",
            std::chrono::duration<double, std::milli>(clock::now() - t0).count(), *params.seed);

  int rc = 1;
  {
    caf::scoped_actor self{sys};
    self->monitor(engine);  // the engine going down must not leave us waiting
    troupe::request_spec spec;
    spec.prompt = o.prompt;
    spec.params = params;
    auto start = clock::now();
    bool done = false;
    self->request(engine, caf::infinite, troupe::generate_atom::value, spec,
                  caf::actor_cast<troupe::sink_actor>(self))
        .receive([](troupe::request_id) {},
                 [&](caf::error& e) {
                   std::cerr << "troupe-generate: generate failed: " << sys.render(e) << "\n";
                   done = true;
                 });
    while (!done) {
      self->receive(
          [](troupe::delta& d) {
            std::fwrite(d.text.data(), 1, d.text.size(), stdout);
            std::fflush(stdout);
          },
          [&](troupe::finished& f) {
            double seconds = std::chrono::duration<double>(clock::now() - start).count();
            std::fputc('\n', stdout);
            std::fflush(stdout);
            std::fprintf(stderr,
                         "[%d prompt + %d generated tokens, finish_reason=%s] %.1f tokens/s (%.3f s, %d threads)\n",
                         f.usage.prompt_tokens, f.usage.completion_tokens, f.reason.c_str(),
                         f.usage.completion_tokens / seconds, seconds, threads);
            rc = 0;
            done = true;
          },
          [&](troupe::failed& f) {
            std::fflush(stdout);
            std::cerr << "troupe-generate: request failed (" << f.code << "): " << f.message << "\n";
            done = true;
          },
          [&](caf::down_msg& dm) {
            std::cerr << "troupe-generate: the engine stopped: " << sys.render(dm.reason) << "\n";
            done = true;
          });
    }
  }
  caf::anon_send_exit(engine, caf::exit_reason::user_shutdown);
  return rc;
}

} // namespace

int main(int argc, char** argv) {
  auto opts = parse_args(argc, argv);
  try {
    return run(opts);
  } catch (const troupe::config_error& e) {
    std::cerr << "troupe-generate: invalid configuration: " << e.what() << "\n";
  } catch (const troupe::model_error& e) {
    std::cerr << "troupe-generate: cannot load the model: " << e.what() << "\n";
  } catch (const troupe::invalid_argument_error& e) {
    std::cerr << "troupe-generate: " << e.what() << "\n";
  } catch (const std::exception& e) {
    std::cerr << "troupe-generate: error: " << e.what() << "\n";
  }
  return 1;
}
