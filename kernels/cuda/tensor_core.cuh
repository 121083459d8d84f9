// Tensor-core pieces the attention kernels share: the bf16 and fp16 mma.sync m16n8k16, the split
// of fp32 probabilities into bf16 (or fp16) high and low parts, and the exact widening of e4m3
// to fp16.
// Only .cu files include this.
// Fragment layouts (PTX, g = lane / 4, c = lane % 4): A rows g, g+8 / cols 2c.., 2c+8..;
// B col g / rows 2c.., 2c+8..; C rows g, g+8 / cols 2c, 2c+1. A 32-bit register holds two
// bf16, the lower index in its low half.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace troupe::kernels::cuda::detail {

// c += a · b over one m16n8k16 tile, bf16 in, fp32 accumulate. Not volatile: a pure function of
// its registers, so the compiler may interleave it freely.
__device__ __forceinline__ void mma_bf16(float (&c)[4], const std::uint32_t (&a)[4], std::uint32_t b0,
                                         std::uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// The same over fp16 inputs.
__device__ __forceinline__ void mma_f16(float (&c)[4], const std::uint32_t (&a)[4], std::uint32_t b0,
                                        std::uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Four e4m3 bytes -> two fp16 pairs, exactly (every e4m3 value is an fp16): bytes 0, 1 -> lo,
// bytes 2, 3 -> hi, the lower byte in the lower half. One hardware conversion per pair (sm_89+).
__device__ __forceinline__ void widen_e4m3x4(std::uint32_t x, std::uint32_t& lo, std::uint32_t& hi) {
  asm("{\n .reg .b16 l, h;\n mov.b32 {l, h}, %2;\n cvt.rn.f16x2.e4m3x2 %0, l;\n cvt.rn.f16x2.e4m3x2 %1, h;\n}\n"
      : "=r"(lo), "=r"(hi)
      : "r"(x));
}

__device__ __forceinline__ std::uint32_t bits(__nv_bfloat162 v) {
  return *reinterpret_cast<const std::uint32_t*>(&v);
}
__device__ __forceinline__ std::uint32_t bits(__half2 v) {
  return *reinterpret_cast<const std::uint32_t*>(&v);
}

// (x, y) -> bf16 pairs hi + lo with hi + lo = (x, y) to ~2^-17 relative: P · V in two MMAs keeps
// the probabilities' precision near fp32's.
__device__ __forceinline__ void split_pair(float x, float y, std::uint32_t& hi, std::uint32_t& lo) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(x, y);
  const float2 hf = __bfloat1622float2(h);
  hi = bits(h);
  lo = bits(__floats2bfloat162_rn(x - hf.x, y - hf.y));
}
// The same into fp16 pairs (~2^-22 relative for values in [2^-14, 1]; below, 2^-25 absolute).
__device__ __forceinline__ void split_pair_f16(float x, float y, std::uint32_t& hi, std::uint32_t& lo) {
  const __half2 h = __floats2half2_rn(x, y);
  const float2 hf = __half22float2(h);
  hi = bits(h);
  lo = bits(__floats2half2_rn(x - hf.x, y - hf.y));
}

} // namespace troupe::kernels::cuda::detail
