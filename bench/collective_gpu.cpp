// The tensor-parallel all-reduce's time per call at the message sizes a step sends: one
// all-reduce after o_proj and one after down_proj of [rows, hidden] bf16 activations, so a
// decode step of the 13B shape (hidden 5120, 40 layers) makes 80 calls of 10 KiB a row.
// Each rank (a thread, on the GPU --devices names for it) captures --calls back-to-back calls
// in a CUDA graph, as the step's graph holds them; a run replays every rank's graph at once
// (the ranks meet on the host first), and rank 0's CUDA-event time / calls is one sample.
// Prints the median over --runs with its min-max (also to --out FILE).
// Ranks that share a GPU (the default, --devices 0,0) meet through peer loads, each call a
// stage, a flag barrier and a read of every rank's stage (set_shared_device_environment). Distinct GPUs take NCCL above peer_max_bytes.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/cuda_stream.hpp"
#include "runtime/cuda/device_collective.hpp"
#include "runtime/shard_shape.hpp"

namespace {

namespace kc = troupe::kernels::cuda;
namespace rt = troupe::runtime;

struct sample_stats {
  double median = 0, low = 0, high = 0;
};

sample_stats stats_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return {v[v.size() / 2], v.front(), v.back()};
}

// Shards of a model wide enough for any rank count up to 8 (the collectives read only the vocab slices).
std::vector<rt::shard_shape> shards_for(int ranks) {
  rt::model_config cfg;
  cfg.hidden_size = 5120;
  cfg.num_attention_heads = 40;
  cfg.num_key_value_heads = 40;
  cfg.head_dim = 128;
  cfg.intermediate_size = 13824;
  cfg.vocab_size = 32000;
  return rt::shard_shapes(cfg, ranks);
}

// Per-call microseconds of `calls` all-reduces of `count` bf16 elements, one sample per run.
std::vector<double> time_all_reduce(const std::vector<int>& devices, std::size_t count, int calls, int runs) {
  const int ranks = static_cast<int>(devices.size());
  rt::device_group_options o;
  o.stage_bytes = count * sizeof(__nv_bfloat16);
  auto group = rt::make_device_group(devices, shards_for(ranks), o);
  std::vector<double> samples;
  std::vector<std::thread> threads;
  std::vector<std::string> errors(static_cast<std::size_t>(ranks));
  for (int r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      try {
        auto& me = *group[static_cast<std::size_t>(r)];
        kc::check(cudaSetDevice(devices[static_cast<std::size_t>(r)]), "cudaSetDevice");
        kc::cuda_stream stream;
        __nv_bfloat16* data = nullptr;
        kc::check(cudaMalloc(&data, count * sizeof(__nv_bfloat16)), "cudaMalloc");
        kc::check(cudaMemset(data, 0, count * sizeof(__nv_bfloat16)), "cudaMemset");
        cudaGraph_t graph = nullptr;
        cudaGraphExec_t exec = nullptr;
        kc::check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "begin capture");
        for (int c = 0; c < calls; ++c)
          kc::check(me.all_reduce_sum(data, count, kc::reduce_type::bf16, stream), "all_reduce_sum");
        kc::check(cudaStreamEndCapture(stream, &graph), "end capture");
        kc::check(cudaGraphInstantiate(&exec, graph, 0), "instantiate");
        cudaEvent_t start = nullptr, stop = nullptr;
        kc::check(cudaEventCreate(&start), "cudaEventCreate");
        kc::check(cudaEventCreate(&stop), "cudaEventCreate");
        for (int run = -1; run < runs; ++run) { // run -1 warms up
          me.agree_min(0); // every rank set up and idle before any queues a barrier
          kc::check(cudaEventRecord(start, stream), "record");
          kc::check(cudaGraphLaunch(exec, stream), "graph launch");
          kc::check(cudaEventRecord(stop, stream), "record");
          stream.synchronize();
          if (me.failed())
            throw std::runtime_error("a collective gave up");
          float ms = 0;
          kc::check(cudaEventElapsedTime(&ms, start, stop), "elapsed");
          if (r == 0 && run >= 0)
            samples.push_back(1000.0 * ms / calls);
        }
        me.agree_min(0);
        cudaEventDestroy(start);
        cudaEventDestroy(stop);
        cudaGraphExecDestroy(exec);
        cudaGraphDestroy(graph);
        cudaFree(data);
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(r)] = e.what();
        group[static_cast<std::size_t>(r)]->abort();
      }
    });
  for (auto& t : threads)
    t.join();
  for (const auto& e : errors)
    if (!e.empty())
      throw std::runtime_error(e);
  return samples;
}

std::vector<int> parse_devices(const std::string& text) {
  std::vector<int> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ','))
    out.push_back(std::stoi(item));
  return out;
}

} // namespace

int main(int argc, char** argv) {
  rt::set_shared_device_environment(); // before CUDA starts: ranks sharing a GPU need it
  std::string out_path, device_list = "0,0";
  int runs = 7, calls = 200;
  for (int i = 1; i + 1 < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--out")
      out_path = argv[++i];
    else if (a == "--devices")
      device_list = argv[++i];
    else if (a == "--runs")
      runs = std::stoi(argv[++i]);
    else if (a == "--calls")
      calls = std::stoi(argv[++i]);
  }
  int visible = 0;
  if (cudaGetDeviceCount(&visible) != cudaSuccess || visible == 0) {
    std::fprintf(stderr, "bench_collective_gpu: no CUDA device\n");
    return 77;
  }
  const auto devices = parse_devices(device_list);
  std::ostringstream md;
  md << "bench_collective_gpu --devices " << device_list << " --runs " << runs << " --calls " << calls << "\n\n"
     << "| ranks | GPUs | bf16 elements | KiB | what it is (13B shape, hidden 5120) | us per call, median | min-max | runs |\n"
     << "|---:|---|---:|---:|---|---:|---:|---:|\n";
  struct message {
    std::size_t rows;
    const char* what;
  };
  const message messages[] = {{1, "decode, batch 1"},     {12, "decode, batch 12"},  {64, "decode, batch 64"},
                              {256, "decode, batch 256"}, {1000, "prefill, 1,000"}, {4096, "prefill, 4,096"}};
  for (const auto& m : messages) {
    const std::size_t count = m.rows * 5120;
    const auto s = stats_of(time_all_reduce(devices, count, m.rows >= 1000 ? 20 : calls, runs));
    char line[256];
    std::snprintf(line, sizeof line, "| %zu | %s | %zu | %.0f | %s | %.2f | %.2f-%.2f | %d |\n", devices.size(),
                  device_list.c_str(), count, count * 2 / 1024.0, m.what, s.median, s.low, s.high, runs);
    md << line;
    std::fputs(line, stdout);
    std::fflush(stdout);
  }
  if (!out_path.empty())
    std::ofstream(out_path) << md.str();
  return 0;
}
