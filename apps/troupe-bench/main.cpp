// troupe-bench: a serving load generator like `vllm bench serve`. Sends a synthetic
// workload to a troupe server over WebSocket or OpenAI SSE and reports TTFT, TPOT,
// ITL, E2E latency, throughput and goodput (apps/troupe-bench/load/ does the work).
#include <boost/json.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <limits>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "apps/troupe-bench/load/bench_report.hpp"
#include "apps/troupe-bench/load/load_runner.hpp"
#include "apps/troupe-bench/load/serving_metrics.hpp"
#include "apps/troupe-bench/load/sweep.hpp"
#include "apps/troupe-bench/load/tokenizer_client.hpp"
#include "apps/troupe-bench/load/workload.hpp"

namespace {

constexpr const char* usage = R"(usage: troupe-bench [options]

Sends --num-prompts requests to a troupe server, each asking for exactly its output
length (ignore_eos), and prints vLLM-style serving metrics. Prompts are made as vLLM's
random dataset makes them: random token ids of the model's vocabulary, sent as their
text; the server's /tokenize and /detokenize build them before the run, so each prompt
is exactly its length in the served tokenizer's tokens and none holds an id the model lacks.
  --url URL               ws://HOST:PORT/v1/stream or http://HOST:PORT
                          (default ws://127.0.0.1:8080/v1/stream)
  --transport ws|sse      WebSocket frames or POST /v1/completions with SSE
                          (default: from the URL's scheme)
  --ws-connections N      ws: 0 = a connection per request (default), N = N shared
                          connections with requests multiplexed over them
  --num-prompts N         (default 64)
  --request-rate R        requests/s, or inf to send all at once (default inf)
  --burstiness B          gamma shape of the arrival gaps; 1 = Poisson (default 1)
  --max-concurrency N     requests in flight at most; 0 = no limit (default 0)
  --sweep-concurrency L   run the workload once at each max concurrency of the list L
                          (e.g. 1,4,16,64: integers >= 1, each once; it replaces
                          --max-concurrency), in turn, with the same prompts, seed and
                          arrivals, then print a table of one row a point: output and
                          total tok/s, req/s, TTFT P50/P99, TPOT P50/P99, ITL P99,
                          goodput (with --goodput) and failed requests
  --sweep-rate L          the same over request rates (e.g. 1,2,4,inf: numbers > 0;
                          it replaces --request-rate); one of the two sweeps at a time
  --sweep-csv FILE        write the sweep's table as CSV (gnuplot: set datafile separator ',')
  --input-len N           prompt tokens after the shared prefix (default 64)
  --output-len N          output tokens, max_tokens (default 128)
  --range-ratio R         lengths uniform in [len*(1-R), len*(1+R)] (default 0)
  --shared-prefix-len N   tokens every prompt starts with (default 0)
  --vocab-limit N         prompt token ids are below N (default: the model's vocabulary
                          size, found from which ids the server's /detokenize accepts)
  --priority-mix MIX      e.g. 0:0.8,1:0.2 (default: no priority sent)
  --temperature T         (default 0)
  --seed S                workload, arrivals and sampling seed (default 0)
  --goodput SLOS          e.g. ttft:200,tpot:50,e2e:5000 (milliseconds)
  --num-warmups N         unmeasured requests sent first, one by one (default 1)
  --io-threads N          client network threads (default 2)
  --result-json FILE      write every metric, per-request data and the options; for a
                          sweep: {"sweep", "table": its rows, "points": each point's report}
  --label TEXT            a name for this run, kept in the summary and the JSON
  --preset FILE           options read from FILE (words; # starts a comment), as if
                          given here; later options override them. Presets are in
                          bench/workloads/: customer-service.preset, and the fixed
                          lengths of published tables, random-128-128.preset (input/output),
                          random-128-2048, random-2048-128, random-1000-1000
Exit status: 0 when the benchmark ran (failed requests are counted, not fatal),
1 when the server cannot be reached or cannot tokenize the prompts, 2 on bad usage.
)";

[[noreturn]] void bad_usage(const std::string& message) {
  std::cerr << "troupe-bench: " << message << "\n\n" << usage;
  std::exit(2);
}

double parse_number(const std::string& option, const std::string& text) {
  if (text == "inf")
    return std::numeric_limits<double>::infinity();
  try {
    std::size_t used = 0;
    double x = std::stod(text, &used);
    if (used == text.size() && !std::isnan(x))
      return x;
  } catch (const std::logic_error&) {
  }
  bad_usage(option + " expects a number, got '" + text + "'");
}

long long parse_integer(const std::string& option, const std::string& text, long long min) {
  try {
    std::size_t used = 0;
    long long x = std::stoll(text, &used);
    if (used == text.size() && x >= min)
      return x;
  } catch (const std::logic_error&) {
  }
  bad_usage(option + " expects an integer >= " + std::to_string(min) + ", got '" + text + "'");
}

// The command line with every `--preset FILE` replaced by the file's options: whitespace-separated
// words, `#` to the end of a line a comment. Options after the preset override it.
std::vector<std::string> expand_presets(int argc, char** argv) {
  std::vector<std::string> out;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    std::string file;
    if (a == "--preset" && i + 1 < argc)
      file = argv[++i];
    else if (a.starts_with("--preset="))
      file = a.substr(9);
    else if (a == "--preset")
      bad_usage("--preset needs a file");
    else {
      out.push_back(a);
      continue;
    }
    std::ifstream in(file);
    if (!in)
      bad_usage("--preset: cannot read '" + file + "'");
    std::string line;
    while (std::getline(in, line)) {
      line = line.substr(0, line.find('#'));
      std::istringstream words(line);
      for (std::string w; words >> w;)
        out.push_back(w);
    }
  }
  return out;
}

} // namespace

int main(int argc, char** argv) {
  using namespace troupe::bench;
  std::string url = "ws://127.0.0.1:8080/v1/stream", priority_mix, goodput, result_file, label;
  std::string sweep_text, sweep_csv;
  std::optional<sweep_kind> sweep;
  std::optional<transport_kind> wanted;
  workload_options workload;
  load_options load;
  int num_warmups = 1;
  token_id vocab_limit = 0;             // 0: ask the server
  std::string command = "troupe-bench"; // kept in the JSON file
  for (int i = 1; i < argc; ++i)
    command += std::string(" ") + argv[i];
  const auto args = expand_presets(argc, argv);
  for (std::size_t i = 0; i < args.size(); ++i) {
    std::string a = args[i];
    if (a == "-h" || a == "--help") {
      std::cout << usage;
      return 0;
    }
    if (!a.starts_with("--"))
      bad_usage("unexpected argument '" + a + "'");
    std::string v;
    if (auto eq = a.find('='); eq != std::string::npos) {
      v = a.substr(eq + 1);
      a = a.substr(0, eq);
    } else if (i + 1 < args.size()) {
      v = args[++i];
    } else {
      bad_usage(a + " needs a value");
    }
    if (a == "--url")
      url = v;
    else if (a == "--transport") {
      if (v != "ws" && v != "sse")
        bad_usage("--transport is ws or sse, got '" + v + "'");
      wanted = v == "ws" ? transport_kind::ws : transport_kind::sse;
    } else if (a == "--ws-connections")
      load.ws_connections = static_cast<int>(parse_integer(a, v, 0));
    else if (a == "--num-prompts")
      workload.num_prompts = static_cast<std::size_t>(parse_integer(a, v, 1));
    else if (a == "--request-rate")
      load.arrivals.request_rate = parse_number(a, v);
    else if (a == "--burstiness")
      load.arrivals.burstiness = parse_number(a, v);
    else if (a == "--max-concurrency")
      load.max_concurrency = static_cast<int>(parse_integer(a, v, 0));
    else if (a == "--input-len")
      workload.input_len = static_cast<int>(parse_integer(a, v, 1));
    else if (a == "--output-len")
      workload.output_len = static_cast<int>(parse_integer(a, v, 1));
    else if (a == "--range-ratio")
      workload.range_ratio = parse_number(a, v);
    else if (a == "--shared-prefix-len")
      workload.shared_prefix_len = static_cast<int>(parse_integer(a, v, 0));
    else if (a == "--vocab-limit") {
      auto n = parse_integer(a, v, 1);
      if (n > std::numeric_limits<token_id>::max())
        bad_usage("--vocab-limit is at most " + std::to_string(std::numeric_limits<token_id>::max()));
      vocab_limit = static_cast<token_id>(n);
    } else if (a == "--priority-mix")
      priority_mix = v;
    else if (a == "--temperature")
      load.sampling.temperature = parse_number(a, v);
    else if (a == "--seed")
      workload.seed = static_cast<std::uint64_t>(parse_integer(a, v, 0));
    else if (a == "--goodput")
      goodput = v;
    else if (a == "--num-warmups")
      num_warmups = static_cast<int>(parse_integer(a, v, 0));
    else if (a == "--io-threads")
      load.io_threads = static_cast<int>(parse_integer(a, v, 1));
    else if (a == "--result-json")
      result_file = v;
    else if (a == "--label")
      label = v;
    else if (a == "--sweep-concurrency" || a == "--sweep-rate") {
      const auto kind = a == "--sweep-rate" ? sweep_kind::rate : sweep_kind::concurrency;
      if (sweep && *sweep != kind)
        bad_usage("--sweep-concurrency and --sweep-rate cannot be given together");
      sweep = kind;
      sweep_text = v;
    } else if (a == "--sweep-csv")
      sweep_csv = v;
    else
      bad_usage("unknown option " + a);
  }

  slo_targets slos;
  std::vector<double> sweep_values;
  try {
    if (sweep)
      sweep_values = parse_sweep_list(sweep_text, *sweep);
    load.server = parse_url(url, wanted);
    workload.priority_mix = parse_priority_mix(priority_mix);
    slos = parse_goodput(goodput);
    validate(workload);
    arrival_schedule check(load.arrivals); // refuses a bad rate or burstiness now, not mid-run
  } catch (const std::invalid_argument& e) {
    bad_usage(e.what());
  }
  if (!sweep_csv.empty() && !sweep)
    bad_usage("--sweep-csv is for a sweep (--sweep-concurrency or --sweep-rate)");
  if (load.ws_connections > 0 && load.server.kind != transport_kind::ws)
    bad_usage("--ws-connections is for the ws transport");
  if (!(load.sampling.temperature >= 0))
    bad_usage("--temperature must be >= 0");
  load.sampling.seed = workload.seed;
  load.arrivals.seed = workload.seed;

  // The prompts, from the served tokenizer (the same host and port serve /tokenize for either transport).
  std::vector<bench_request> requests, warmups;
  try {
    const auto started = std::chrono::steady_clock::now();
    tokenizer_client tokenizer(load.server);
    const bool asked = vocab_limit > 0;
    if (!asked)
      vocab_limit = tokenizer.probe_vocab_size();
    prompt_generator prompts(tokenizer, vocab_limit);
    requests = build_workload(workload, prompts);
    if (num_warmups > 0) {
      // Prompts of their own, so that no measured request finds its whole prompt in the
      // prefix cache because a warm-up sent it before.
      // The shared prefix is the same, as a long-running server would have it cached.
      auto w = workload;
      w.num_prompts = static_cast<std::size_t>(num_warmups);
      w.seed = ~workload.seed;
      w.prefix_seed = workload.seed;
      warmups = build_workload(w, prompts);
    }
    double tokens = 0;
    for (const auto& r : requests)
      tokens += r.prompt_len;
    std::cerr << "troupe-bench: " << requests.size() << " prompts of " << tokens / static_cast<double>(requests.size())
              << " tokens on average, ids below " << vocab_limit
              << (asked ? " (--vocab-limit)" : " (the model's vocabulary, from /detokenize)") << ", built in "
              << std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count() << " s\n";
  } catch (const unreachable_error& e) {
    std::cerr << "troupe-bench: " << e.what() << "\n";
    return 1;
  } catch (const std::runtime_error& e) { // prompt_error, or a server whose /tokenize or /detokenize failed
    std::cerr << "troupe-bench: cannot build the prompts: " << e.what() << "\n";
    return 1;
  }

  boost::json::object options{
      {"url", url},
      {"transport", std::string(to_string(load.server.kind))},
      {"ws_connections", load.ws_connections},
      {"num_prompts", workload.num_prompts},
      {"request_rate", std::isinf(load.arrivals.request_rate) ? boost::json::value("inf")
                                                              : boost::json::value(load.arrivals.request_rate)},
      {"burstiness", load.arrivals.burstiness},
      {"max_concurrency", load.max_concurrency},
      {"input_len", workload.input_len},
      {"output_len", workload.output_len},
      {"range_ratio", workload.range_ratio},
      {"shared_prefix_len", workload.shared_prefix_len},
      {"vocab_limit", vocab_limit},
      {"priority_mix", priority_mix},
      {"temperature", load.sampling.temperature},
      {"seed", workload.seed},
      {"goodput", goodput},
      {"num_warmups", num_warmups},
      {"io_threads", load.io_threads},
      {"label", label},
      {"command", command}};
  if (sweep) {
    options["sweep"] = to_string(*sweep);
    boost::json::array values;
    for (double x : sweep_values)
      values.push_back(std::isinf(x) ? boost::json::value("inf") : boost::json::value(x));
    options["sweep_values"] = std::move(values);
  }

  // One run a point (one point when there is no sweep): the same requests, seed and arrivals
  // each time; the warm-ups go before the first point only.
  if (!sweep)
    sweep_values = {0};
  std::vector<sweep_point> points;
  boost::json::array reports;
  for (std::size_t p = 0; p < sweep_values.size(); ++p) {
    auto point_load = load;
    run_info info{label,
                  std::string(to_string(load.server.kind)),
                  url,
                  load.arrivals.request_rate,
                  load.arrivals.burstiness,
                  load.max_concurrency};
    if (sweep == sweep_kind::concurrency)
      point_load.max_concurrency = info.max_concurrency = static_cast<int>(sweep_values[p]);
    else if (sweep == sweep_kind::rate)
      point_load.arrivals.request_rate = info.request_rate = sweep_values[p];
    if (sweep) {
      std::ostringstream name;
      name << (label.empty() ? "" : label + " ") << to_string(*sweep) << " " << sweep_values[p];
      info.label = name.str();
      std::cerr << "troupe-bench: sweep point " << p + 1 << " of " << sweep_values.size() << ": " << to_string(*sweep)
                << " " << sweep_values[p] << "\n";
    }
    load_outcome outcome;
    try {
      outcome = run_load(point_load, requests,
                         p == 0 ? std::span<const bench_request>(warmups) : std::span<const bench_request>());
    } catch (const unreachable_error& e) {
      std::cerr << "troupe-bench: " << e.what() << "\n";
      return 1;
    }
    if (outcome.warmup_failures > 0)
      std::cerr << "troupe-bench: warning: " << outcome.warmup_failures
                << " warm-up request(s) failed: " << outcome.warmup_error << "\n";

    auto metrics = compute_serving_metrics(outcome.records, outcome.duration_s, slos);
    print_summary(std::cout, info, metrics);
    if (metrics.failed > 0) {
      for (const auto& r : outcome.records)
        if (!r.success) {
          std::cerr << "troupe-bench: " << metrics.failed << " request(s) failed; the first: request " << r.index
                    << ": " << r.error << "\n";
          break;
        }
    }
    if (!result_file.empty()) {
      auto point_options = options;
      point_options["max_concurrency"] = point_load.max_concurrency;
      point_options["request_rate"] = std::isinf(point_load.arrivals.request_rate)
                                          ? boost::json::value("inf")
                                          : boost::json::value(point_load.arrivals.request_rate);
      reports.push_back(result_json(info, metrics, outcome.records, std::move(point_options)));
    }
    points.push_back({sweep_values[p], std::move(metrics)});
  }
  if (sweep) {
    print_sweep_table(std::cout, *sweep, points);
    if (!sweep_csv.empty()) {
      std::ofstream out(sweep_csv);
      write_sweep_csv(out, *sweep, points);
      if (!out) {
        std::cerr << "troupe-bench: cannot write " << sweep_csv << "\n";
        return 2;
      }
    }
  }

  if (!result_file.empty()) {
    boost::json::value result;
    if (sweep)
      result = boost::json::object{{"label", label},
                                   {"sweep", to_string(*sweep)},
                                   {"table", sweep_table_json(*sweep, points)},
                                   {"points", std::move(reports)},
                                   {"options", std::move(options)}};
    else
      result = std::move(reports.at(0));
    std::ofstream out(result_file);
    out << boost::json::serialize(result) << "\n";
    if (!out) {
      std::cerr << "troupe-bench: cannot write " << result_file << "\n";
      return 2;
    }
  }
  return 0;
}
