// RAII owners of a CUDA stream and a CUDA event (timing off unless asked for).
#pragma once

#include <cuda_runtime.h>

#include <utility>

#include "kernels/cuda/cuda_check.hpp"

namespace troupe::kernels::cuda {

class cuda_stream {
 public:
  cuda_stream() { check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate"); }
  cuda_stream(cuda_stream&& other) noexcept : stream_(std::exchange(other.stream_, nullptr)) {}
  cuda_stream& operator=(cuda_stream&& other) noexcept {
    if (this != &other) {
      release();
      stream_ = std::exchange(other.stream_, nullptr);
    }
    return *this;
  }
  cuda_stream(const cuda_stream&) = delete;
  cuda_stream& operator=(const cuda_stream&) = delete;
  ~cuda_stream() { release(); }

  cudaStream_t get() const noexcept { return stream_; }
  operator cudaStream_t() const noexcept { return stream_; }
  void synchronize() const { check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"); }

 private:
  void release() noexcept {
    if (stream_ != nullptr)
      cudaStreamDestroy(stream_);
    stream_ = nullptr;
  }
  cudaStream_t stream_ = nullptr;
};

class cuda_event {
 public:
  explicit cuda_event(bool timing = false) {
    check(cudaEventCreateWithFlags(&event_, timing ? cudaEventDefault : cudaEventDisableTiming), "cudaEventCreate");
  }
  cuda_event(cuda_event&& other) noexcept : event_(std::exchange(other.event_, nullptr)) {}
  cuda_event& operator=(cuda_event&& other) noexcept {
    if (this != &other) {
      release();
      event_ = std::exchange(other.event_, nullptr);
    }
    return *this;
  }
  cuda_event(const cuda_event&) = delete;
  cuda_event& operator=(const cuda_event&) = delete;
  ~cuda_event() { release(); }

  cudaEvent_t get() const noexcept { return event_; }
  operator cudaEvent_t() const noexcept { return event_; }
  void record(cudaStream_t stream) { check(cudaEventRecord(event_, stream), "cudaEventRecord"); }
  void synchronize() const { check(cudaEventSynchronize(event_), "cudaEventSynchronize"); }
  // Milliseconds from start to this event (both recorded with timing on).
  float elapsed_since(const cuda_event& start) const {
    float ms = 0;
    check(cudaEventElapsedTime(&ms, start.event_, event_), "cudaEventElapsedTime");
    return ms;
  }

 private:
  void release() noexcept {
    if (event_ != nullptr)
      cudaEventDestroy(event_);
    event_ = nullptr;
  }
  cudaEvent_t event_ = nullptr;
};

} // namespace troupe::kernels::cuda
