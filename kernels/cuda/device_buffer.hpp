// RAII owners of CUDA memory: a typed device array and a pinned host array.
// Allocation failures throw cuda_error; moves transfer ownership; nothing is copied implicitly.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <span>
#include <utility>

#include "kernels/cuda/cuda_check.hpp"

namespace troupe::kernels::cuda {

template <class T>
class device_buffer {
 public:
  device_buffer() = default;
  explicit device_buffer(std::size_t count) : count_(count) {
    if (count > 0)
      check(cudaMalloc(reinterpret_cast<void**>(&data_), count * sizeof(T)), "cudaMalloc");
  }
  device_buffer(device_buffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), count_(std::exchange(other.count_, 0)) {}
  device_buffer& operator=(device_buffer&& other) noexcept {
    if (this != &other) {
      release();
      data_ = std::exchange(other.data_, nullptr);
      count_ = std::exchange(other.count_, 0);
    }
    return *this;
  }
  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;
  ~device_buffer() { release(); }

  T* data() const noexcept { return data_; }
  std::size_t size() const noexcept { return count_; }
  std::size_t bytes() const noexcept { return count_ * sizeof(T); }

  // Synchronous helpers for set-up and tests (the hot path uses cudaMemcpyAsync on its stream).
  // cudaMemcpy from pageable memory and cudaMemset may return before the device is written, and
  // our streams are non-blocking (they do not wait for the legacy stream), so each helper waits
  // for the legacy stream: a kernel queued after it sees the bytes.
  void upload(std::span<const T> host) {
    check(cudaMemcpy(data_, host.data(), host.size_bytes(), cudaMemcpyHostToDevice), "cudaMemcpy (upload)");
    check(cudaStreamSynchronize(cudaStreamLegacy), "cudaStreamSynchronize (upload)");
  }
  void download(std::span<T> host) const {
    check(cudaMemcpy(host.data(), data_, host.size_bytes(), cudaMemcpyDeviceToHost), "cudaMemcpy (download)");
  }
  // Every byte set to `byte` (0xff poisons floats and bf16 with NaN).
  void fill_bytes(int byte) {
    check(cudaMemset(data_, byte, bytes()), "cudaMemset");
    check(cudaStreamSynchronize(cudaStreamLegacy), "cudaStreamSynchronize (fill)");
  }

 private:
  void release() noexcept {
    if (data_ != nullptr)
      cudaFree(data_); // a failure here means the context is gone; nothing left to free
    data_ = nullptr;
  }
  T* data_ = nullptr;
  std::size_t count_ = 0;
};

// Page-locked host memory: the host side of asynchronous copies (swap space, logits).
template <class T>
class pinned_buffer {
 public:
  pinned_buffer() = default;
  explicit pinned_buffer(std::size_t count) : count_(count) {
    if (count > 0)
      check(cudaMallocHost(reinterpret_cast<void**>(&data_), count * sizeof(T)), "cudaMallocHost");
  }
  pinned_buffer(pinned_buffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), count_(std::exchange(other.count_, 0)) {}
  pinned_buffer& operator=(pinned_buffer&& other) noexcept {
    if (this != &other) {
      release();
      data_ = std::exchange(other.data_, nullptr);
      count_ = std::exchange(other.count_, 0);
    }
    return *this;
  }
  pinned_buffer(const pinned_buffer&) = delete;
  pinned_buffer& operator=(const pinned_buffer&) = delete;
  ~pinned_buffer() { release(); }

  T* data() const noexcept { return data_; }
  std::size_t size() const noexcept { return count_; }
  std::size_t bytes() const noexcept { return count_ * sizeof(T); }
  std::span<T> span() const noexcept { return {data_, count_}; }

 private:
  void release() noexcept {
    if (data_ != nullptr)
      cudaFreeHost(data_);
    data_ = nullptr;
  }
  T* data_ = nullptr;
  std::size_t count_ = 0;
};

} // namespace troupe::kernels::cuda
