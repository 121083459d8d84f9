// Helpers of the GPU kernel tests: dtype conversions on the host, random data,
// device upload/download in any element type, and a closeness check that fails
// on NaN (outputs are poisoned with 0xff bytes, a NaN in every float type, before a run).
#pragma once

#include <doctest/doctest.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/cuda/device_buffer.hpp"

namespace troupe::testing::gpu {

using kernels::cuda::device_buffer;

// Host-side conversions (CUDA's host implementations: round to nearest even; fp8 saturates).
template <class T>
T encode(float x) {
  if constexpr (std::is_same_v<T, float>)
    return x;
  else if constexpr (std::is_same_v<T, __nv_bfloat16>)
    return __float2bfloat16_rn(x);
  else if constexpr (std::is_same_v<T, __half>)
    return __float2half_rn(x);
  else
    return T(x);
}
template <class T>
float decode(T x) {
  if constexpr (std::is_same_v<T, float>)
    return x;
  else if constexpr (std::is_same_v<T, __nv_bfloat16>)
    return __bfloat162float(x);
  else if constexpr (std::is_same_v<T, __half>)
    return __half2float(x);
  else
    return static_cast<float>(x);
}
template <class T>
const char* dtype_name() {
  if constexpr (std::is_same_v<T, float>)
    return "float32";
  else if constexpr (std::is_same_v<T, __nv_bfloat16>)
    return "bfloat16";
  else if constexpr (std::is_same_v<T, __half>)
    return "float16";
  else
    return "fp8_e4m3";
}

// The unit roundoff of a storage type: one rounding to nearest moves a value by at most this
// much of itself (bf16 keeps 8 significant bits, fp16 11, fp32 24; fp8 e4m3 4).
template <class T>
constexpr float unit_roundoff() {
  if constexpr (std::is_same_v<T, float>)
    return 0x1p-24f;
  else if constexpr (std::is_same_v<T, __nv_bfloat16>)
    return 0x1p-8f;
  else if constexpr (std::is_same_v<T, __half>)
    return 0x1p-11f;
  else
    return 0x1p-4f;
}

// Values as stored in T with a scale (stored = value / scale), and what they read back as.
template <class T>
std::vector<T> encode_all(std::span<const float> v, float scale = 1.0f) {
  std::vector<T> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i)
    out[i] = encode<T>(v[i] / scale);
  return out;
}
template <class T>
std::vector<float> decode_all(std::span<const T> v, float scale = 1.0f) {
  std::vector<float> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i)
    out[i] = decode(v[i]) * scale;
  return out;
}
// v rounded through T in place: the CPU reference then sees exactly what the GPU reads.
template <class T>
void round_through(std::vector<float>& v, float scale = 1.0f) {
  auto stored = encode_all<T>(v, scale);
  v = decode_all<T>(stored, scale);
}

inline std::vector<float> random_values(std::size_t n, std::mt19937& rng, float stddev = 1.0f) {
  std::normal_distribution<float> normal(0.0f, stddev);
  std::vector<float> v(n);
  for (auto& x : v)
    x = normal(rng);
  return v;
}

template <class T>
device_buffer<T> to_device(std::span<const float> host, float scale = 1.0f) {
  device_buffer<T> d(host.size());
  auto stored = encode_all<T>(host, scale);
  d.upload(stored);
  return d;
}
template <class T>
device_buffer<T> to_device_raw(const std::vector<T>& host) {
  device_buffer<T> d(host.size());
  d.upload(host);
  return d;
}
template <class T>
std::vector<float> from_device(const device_buffer<T>& d, float scale = 1.0f) {
  std::vector<T> stored(d.size());
  d.download(stored);
  return decode_all<T>(stored, scale);
}
template <class T>
device_buffer<T> poisoned(std::size_t n) {
  device_buffer<T> d(n);
  d.fill_bytes(0xff);
  return d;
}

// A kernel test's types: inputs (x, w, the bias) of E, output of Out (TEST_CASE_TEMPLATE's parameter).
template <class E, class O>
struct io {
  using in = E;
  using out = O;
};
using bf16_to_bf16 = io<__nv_bfloat16, __nv_bfloat16>;
using bf16_to_float = io<__nv_bfloat16, float>;
using half_to_half = io<__half, __half>;
using half_to_float = io<__half, float>;

// A device buffer's elements as stored (no conversion), to compare bit for bit.
template <class T>
std::vector<T> download_raw(const device_buffer<T>& d) {
  std::vector<T> host(d.size());
  d.download(host);
  return host;
}

inline void sync_or_fail() {
  const cudaError_t err = cudaDeviceSynchronize();
  REQUIRE_MESSAGE(err == cudaSuccess, cudaGetErrorString(err));
}

// |got - expected| <= atol + rtol * |expected| (+ extra[i], where given: an allowance of element i's
// own) everywhere. Where expected is NaN (an element the kernel must not write), got must still be
// NaN; anywhere else a NaN is a failure.
struct tolerance {
  float atol = 0.0f, rtol = 0.0f;
};

inline void check_close(std::span<const float> got, std::span<const float> expected, tolerance tol,
                        const std::string& what, std::span<const float> extra = {}) {
  REQUIRE(got.size() == expected.size());
  REQUIRE((extra.empty() || extra.size() == expected.size()));
  std::size_t bad = 0, first_bad = 0, nans = 0;
  double worst = 0.0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(expected[i])) {
      if (!std::isnan(got[i]) && bad++ == 0)
        first_bad = i;
      continue;
    }
    if (std::isnan(got[i])) {
      if (nans++ == 0 && bad == 0)
        first_bad = i;
      ++bad;
      continue;
    }
    const double err = std::abs(static_cast<double>(got[i]) - expected[i]);
    const double allowed =
        tol.atol + tol.rtol * std::abs(static_cast<double>(expected[i])) + (extra.empty() ? 0.0 : extra[i]);
    worst = std::max(worst, err / (allowed + 1e-30));
    if (err > allowed && bad++ == 0)
      first_bad = i;
  }
  INFO(what << ": " << bad << " of " << got.size() << " elements off (" << nans << " NaN); first at " << first_bad
            << ": got " << got[first_bad] << ", expected " << expected[first_bad]
            << "; worst error / tolerance = " << worst);
  CHECK(bad == 0);
}

// A linear layer's reference, y[m, n] = x[m, k] · w[n, k]ᵀ in double, for the GEMV and the cuBLASLt tests.
struct linear_reference {
  std::vector<float> y;
  double largest_abs_sum = 0.0; // max over outputs of sum_k |x w|
};
inline linear_reference linear_layer_reference(const std::vector<float>& x, const std::vector<float>& w, int m, int n,
                                               int k) {
  linear_reference r;
  r.y.resize(static_cast<std::size_t>(m) * n);
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      double sum = 0.0, abs_sum = 0.0;
      for (int c = 0; c < k; ++c) {
        const double p = static_cast<double>(x[std::size_t(i) * k + c]) * w[std::size_t(j) * k + c];
        sum += p;
        abs_sum += std::abs(p);
      }
      r.y[std::size_t(i) * n + j] = static_cast<float>(sum);
      r.largest_abs_sum = std::max(r.largest_abs_sum, abs_sum);
    }
  return r;
}
// Random inputs of an m x n x k linear layer, as stored in T (x ~ N(0, 1), w ~ N(0, 0.05^2), seeded
// by the shape), and their reference.
struct linear_case {
  std::vector<float> x, w;
  linear_reference ref;
};
template <class T>
linear_case random_linear_case(int m, int n, int k) {
  std::mt19937 rng(m * 7919 + n * 31 + k);
  linear_case c{random_values(std::size_t(m) * k, rng, 1.0f), random_values(std::size_t(n) * k, rng, 0.05f), {}};
  round_through<T>(c.x);
  round_through<T>(c.w);
  c.ref = linear_layer_reference(c.x, c.w, m, n, k);
  return c;
}
// Its tolerance for an output stored as Out: |d| <= u |y| (one rounding to Out, its unit roundoff: 2^-8
// for bf16, 2^-11 for fp16; 1e-6 |y| for fp32) + 1e-5 * largest_abs_sum (fp32 accumulation in an
// order of the kernel's own).
template <class Out>
tolerance linear_tolerance(const linear_reference& r) {
  const float rtol = std::is_same_v<Out, float> ? 1e-6f : unit_roundoff<Out>();
  return {static_cast<float>(1e-5 * r.largest_abs_sum), rtol};
}

} // namespace troupe::testing::gpu
