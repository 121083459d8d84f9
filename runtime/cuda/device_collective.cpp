// The CUDA ranks' collectives: peer loads (kernels/cuda/peer_collective.hpp) for ranks that share
// a device and for small messages, NCCL for large messages between devices.
#include "runtime/cuda/device_collective.hpp"

#include <nccl.h>

#include <algorithm>
#include <cstdlib>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <set>

#include "kernels/cuda/cuda_check.hpp"
#include "kernels/cuda/device_buffer.hpp"

namespace troupe::runtime {

namespace kc = kernels::cuda;

namespace {

void check_nccl(ncclResult_t r, const char* what) {
  if (r != ncclSuccess)
    throw std::runtime_error(std::string(what) + ": " + ncclGetErrorString(r));
}

ncclDataType_t nccl_type(kc::reduce_type t) {
  return t == kc::reduce_type::f32 ? ncclFloat32 : t == kc::reduce_type::bf16 ? ncclBfloat16 : ncclFloat16;
}

std::size_t element_bytes(kc::reduce_type t) {
  return t == kc::reduce_type::f32 ? 4 : 2;
}

cudaError_t as_cuda(ncclResult_t r) {
  return r == ncclSuccess ? cudaSuccess : cudaErrorUnknown;
}

// Mapped host memory: written by the host, read by a waiting kernel, or the other way round.
class mapped_ints {
 public:
  explicit mapped_ints(std::size_t n) : n_(n) {
    kc::check(cudaHostAlloc(reinterpret_cast<void**>(&host_), n * sizeof(int), cudaHostAllocMapped | cudaHostAllocPortable),
              "cudaHostAlloc (collective flags)");
    std::fill_n(host_, n, 0);
  }
  ~mapped_ints() { cudaFreeHost(host_); }
  mapped_ints(const mapped_ints&) = delete;
  mapped_ints& operator=(const mapped_ints&) = delete;
  volatile int* host() const { return host_; }
  int* device() const { // with unified addressing the host pointer is the device's too
    int* d = nullptr;
    kc::check(cudaHostGetDevicePointer(reinterpret_cast<void**>(&d), host_, 0), "cudaHostGetDevicePointer");
    return d;
  }
  void clear() { std::fill_n(host_, n_, 0); }

 private:
  int* host_ = nullptr;
  std::size_t n_;
};

// Memory of one rank for the peer path, on the rank's device.
struct peer_memory {
  kc::device_buffer<std::byte> stage[2];
  kc::device_buffer<std::uint64_t> arrivals; // [max_peer_ranks]
  kc::device_buffer<std::uint64_t> barriers; // [1]
};

// What the ranks share: the host-side meeting point, the abort flag, and the NCCL communicators.
struct group_state {
  std::vector<int> devices;
  kc::column_split vocab;
  device_group_options options;
  std::vector<peer_memory> peers; // one per rank, empty when the peer path is off
  mapped_ints abort_flag{1};
  mapped_ints gave_up; // one per rank
  std::vector<ncclComm_t> comms;  // one per rank, empty without NCCL
  bool nccl_aborted = false;

  std::mutex mutex;
  std::condition_variable met;
  std::size_t generation = 0;
  int arrived = 0, smallest = 0, agreed = 0;

  explicit group_state(std::size_t ranks) : gave_up(ranks) {}
  ~group_state() {
    for (auto c : comms)
      if (c != nullptr)
        ncclCommDestroy(c);
  }

  void make_comms() {
    comms.assign(devices.size(), nullptr);
    check_nccl(ncclCommInitAll(comms.data(), static_cast<int>(devices.size()), devices.data()), "ncclCommInitAll");
    nccl_aborted = false;
  }
};

void abort_group(group_state& g) {
  g.abort_flag.host()[0] = 1;
  std::lock_guard lock(g.mutex);
  g.arrived = 0;
  if (!g.comms.empty() && !g.nccl_aborted) {
    for (auto c : g.comms)
      ncclCommAbort(c); // unblocks a rank inside an NCCL call; reset() builds new communicators
    std::fill(g.comms.begin(), g.comms.end(), nullptr);
    g.nccl_aborted = true;
  }
  g.met.notify_all();
}

class group_rank final : public device_collective {
 public:
  group_rank(std::shared_ptr<group_state> group, int rank) : group_(std::move(group)), rank_(rank) {
    const auto ranks = static_cast<int>(group_->devices.size());
    view_.rank = rank;
    view_.ranks = ranks;
    if (!group_->peers.empty()) {
      for (int s = 0; s < ranks; ++s) {
        auto& p = group_->peers[static_cast<std::size_t>(s)];
        view_.stage[s][0] = p.stage[0].data();
        view_.stage[s][1] = p.stage[1].data();
        view_.arrivals[s] = p.arrivals.data();
      }
      view_.stage_bytes = group_->options.stage_bytes;
      view_.barriers = group_->peers[static_cast<std::size_t>(rank)].barriers.data();
    }
    view_.abort = group_->abort_flag.device();
    view_.gave_up = group_->gave_up.device() + rank;
    view_.timeout_ns = static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(group_->options.timeout).count());
    if (!group_->peers.empty() && !group_->comms.empty()) // both: small messages go by peer loads
      peer_max_ = group_->options.peer_max_bytes;
    else if (!group_->peers.empty())
      peer_max_ = SIZE_MAX;
  }

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(group_->devices.size()); }
  int device() const override { return group_->devices[static_cast<std::size_t>(rank_)]; }

  cudaError_t all_reduce_sum(void* data, std::size_t count, kc::reduce_type type, cudaStream_t stream) override {
    const std::size_t bytes = count * element_bytes(type);
    if (bytes <= peer_max_)
      return kc::peer_all_reduce_sum(view_, data, count, type, stream);
    return as_cuda(ncclAllReduce(data, data, count, nccl_type(type), ncclSum, comm(), stream));
  }

  cudaError_t all_gather_vocab(const float* local, int rows, float* whole, cudaStream_t stream) override {
    const auto& split = group_->vocab;
    const std::size_t bytes = static_cast<std::size_t>(rows) * split.width[rank_] * sizeof(float);
    int columns = 0;
    for (int s = 0; s < split.ranks; ++s)
      columns += split.width[s];
    if (bytes <= peer_max_)
      return kc::peer_all_gather_columns(view_, local, rows, split, whole, columns, stream);
    // NCCL: every rank's slice broadcast into segments, then placed as columns.
    const std::size_t need = static_cast<std::size_t>(rows) * columns;
    if (segments_.size() < need)
      return cudaErrorInvalidValue; // sized at start for the largest step
    if (auto r = ncclGroupStart(); r != ncclSuccess)
      return as_cuda(r);
    std::size_t offset = 0;
    for (int s = 0; s < split.ranks; ++s) {
      const std::size_t n = static_cast<std::size_t>(rows) * split.width[s];
      ncclBroadcast(local, segments_.data() + offset, n, ncclFloat32, s, comm(), stream);
      offset += n;
    }
    if (auto r = ncclGroupEnd(); r != ncclSuccess)
      return as_cuda(r);
    return kc::scatter_column_segments(segments_.data(), rows, split, whole, columns, stream);
  }

  int agree_min(int value) override {
    auto& g = *group_;
    std::unique_lock lock(g.mutex);
    g.smallest = g.arrived == 0 ? value : std::min(g.smallest, value);
    if (++g.arrived == size()) {
      g.arrived = 0;
      g.agreed = g.smallest;
      ++g.generation;
      g.met.notify_all();
      return g.agreed;
    }
    const std::size_t mine = g.generation;
    g.met.wait(lock, [&] { return g.generation != mine || g.abort_flag.host()[0] != 0; });
    if (g.generation == mine)
      throw device_collective_failed("tensor-parallel rank " + std::to_string(rank_) +
                                     ": the group was aborted while its ranks agreed on a size");
    return g.agreed;
  }

  void abort() override { abort_group(*group_); }
  std::function<void()> abort_handle() const override {
    return [group = group_] { abort_group(*group); };
  }

  void reset() override {
    auto& g = *group_;
    std::lock_guard lock(g.mutex);
    for (std::size_t s = 0; s < g.peers.size(); ++s) {
      kc::check(cudaSetDevice(g.devices[s]), "cudaSetDevice (collective reset)");
      kc::check(cudaDeviceSynchronize(), "cudaDeviceSynchronize (collective reset)");
      kc::check(cudaMemset(g.peers[s].arrivals.data(), 0, g.peers[s].arrivals.bytes()), "cudaMemset (arrivals)");
      kc::check(cudaMemset(g.peers[s].barriers.data(), 0, g.peers[s].barriers.bytes()), "cudaMemset (barriers)");
      // The ranks' streams do not wait for the legacy stream: a barrier queued before the zeros
      // land would have its arrival wiped, or meet stale counts.
      kc::check(cudaDeviceSynchronize(), "cudaDeviceSynchronize (collective reset)");
    }
    if (g.nccl_aborted)
      g.make_comms();
    g.gave_up.clear();
    g.abort_flag.clear();
    kc::check(cudaSetDevice(device()), "cudaSetDevice");
  }

  bool failed() const override {
    if (group_->gave_up.host()[rank_] != 0 || group_->abort_flag.host()[0] != 0)
      return true;
    if (group_->comms.empty())
      return group_->nccl_aborted;
    ncclResult_t async = ncclSuccess;
    return ncclCommGetAsyncError(group_->comms[static_cast<std::size_t>(rank_)], &async) != ncclSuccess ||
           async != ncclSuccess;
  }

  void allocate_segments(std::size_t floats) { segments_ = kc::device_buffer<float>(floats); }

 private:
  ncclComm_t comm() const { return group_->comms[static_cast<std::size_t>(rank_)]; }

  std::shared_ptr<group_state> group_;
  int rank_;
  kc::peer_group_view view_;
  std::size_t peer_max_ = 0; // bytes up to which a call takes the peer path
  kc::device_buffer<float> segments_;
};

[[noreturn]] void refuse(const std::string& what) {
  throw std::invalid_argument("tensor parallelism: " + what);
}

} // namespace

std::vector<std::unique_ptr<device_collective>> make_device_group(const std::vector<int>& devices,
                                                                  const std::vector<shard_shape>& shards,
                                                                  const device_group_options& options) {
  const int ranks = static_cast<int>(devices.size());
  if (ranks < 1 || ranks > kc::max_peer_ranks)
    refuse("a group has 1.." + std::to_string(kc::max_peer_ranks) + " ranks, got " + std::to_string(ranks));
  if (static_cast<int>(shards.size()) != ranks)
    refuse(std::to_string(shards.size()) + " shards for " + std::to_string(ranks) + " ranks");
  int count = 0;
  kc::check(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
  for (int d : devices)
    if (d < 0 || d >= count)
      refuse(std::to_string(ranks) + " ranks need device " + std::to_string(d) + ", but " + std::to_string(count) +
             " GPU" + (count == 1 ? " is" : "s are") + " visible");
  const std::set<int> distinct(devices.begin(), devices.end());
  const bool shared_device = static_cast<int>(distinct.size()) < ranks;

  // Peer loads need every pair of distinct devices to reach each other.
  bool peers_reach = true;
  std::string unreachable;
  for (int a : distinct)
    for (int b : distinct)
      if (a != b) {
        int can = 0;
        kc::check(cudaDeviceCanAccessPeer(&can, a, b), "cudaDeviceCanAccessPeer");
        if (!can) {
          peers_reach = false;
          unreachable = "GPU " + std::to_string(a) + " cannot reach GPU " + std::to_string(b) + " (no peer access)";
        }
      }
  // A kernel loaded lazily (CUDA's default since 12.2) on first launch may wait for its device to
  // go idle, and on a GPU the ranks share it would wait for a barrier that waits for it. Streams
  // that share a hardware queue (8 by default) run their kernels in queue order: one rank's
  // spinning barrier may stand before the kernel of another rank that it waits for.
  const char* loading = std::getenv("CUDA_MODULE_LOADING");
  const char* connections = std::getenv("CUDA_DEVICE_MAX_CONNECTIONS");
  if (shared_device && (loading == nullptr || std::string(loading) != "EAGER" || connections == nullptr ||
                        std::string(connections) != "32"))
    refuse("ranks that share a GPU need CUDA_MODULE_LOADING=EAGER and CUDA_DEVICE_MAX_CONNECTIONS=32 in the "
           "environment before CUDA starts (a lazily loaded kernel, or one queued behind another rank's barrier, "
           "waits while that barrier waits for it)");
  if (shared_device && !peers_reach)
    refuse(unreachable + ", and ranks that share a device can only meet through peer loads");

  auto group = std::make_shared<group_state>(static_cast<std::size_t>(ranks));
  group->devices = devices;
  group->options = options;
  group->vocab.ranks = ranks;
  for (int s = 0; s < ranks; ++s) {
    group->vocab.begin[s] = shards[static_cast<std::size_t>(s)].vocab_begin;
    group->vocab.width[s] = shards[static_cast<std::size_t>(s)].vocab;
  }
  if (peers_reach) {
    for (int a : distinct)
      for (int b : distinct)
        if (a != b) {
          kc::check(cudaSetDevice(a), "cudaSetDevice");
          if (cudaError_t e = cudaDeviceEnablePeerAccess(b, 0); e == cudaErrorPeerAccessAlreadyEnabled)
            cudaGetLastError();
          else
            kc::check(e, "cudaDeviceEnablePeerAccess");
        }
    group->peers.resize(static_cast<std::size_t>(ranks));
    for (int s = 0; s < ranks; ++s) {
      kc::check(cudaSetDevice(devices[static_cast<std::size_t>(s)]), "cudaSetDevice");
      auto& p = group->peers[static_cast<std::size_t>(s)];
      p.stage[0] = kc::device_buffer<std::byte>(std::max<std::size_t>(options.stage_bytes, 16));
      p.stage[1] = kc::device_buffer<std::byte>(std::max<std::size_t>(options.stage_bytes, 16));
      p.arrivals = kc::device_buffer<std::uint64_t>(kc::max_peer_ranks);
      p.barriers = kc::device_buffer<std::uint64_t>(1);
      p.arrivals.fill_bytes(0);
      p.barriers.fill_bytes(0);
    }
  }
  // NCCL between distinct devices, for the messages peer loads do not take (all of them when
  // the devices cannot reach each other). Two ranks on one device never use it.
  if (!shared_device && ranks > 1 && (!peers_reach || options.peer_max_bytes < options.stage_bytes))
    group->make_comms();

  std::vector<std::unique_ptr<device_collective>> out;
  for (int s = 0; s < ranks; ++s) {
    auto r = std::make_unique<group_rank>(group, s);
    if (!group->comms.empty()) {
      kc::check(cudaSetDevice(devices[static_cast<std::size_t>(s)]), "cudaSetDevice");
      // The gathered logits' segments: at most the stage's worth of slice per rank.
      r->allocate_segments(ranks * (std::max<std::size_t>(options.stage_bytes, 16) / sizeof(float)));
    }
    out.push_back(std::move(r));
  }
  kc::check(cudaSetDevice(devices.front()), "cudaSetDevice");
  return out;
}

bool set_shared_device_environment() {
  return ::setenv("CUDA_MODULE_LOADING", "EAGER", 1) == 0 && ::setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 1) == 0;
}

} // namespace troupe::runtime
