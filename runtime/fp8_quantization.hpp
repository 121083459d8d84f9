// FP8 e4m3 weights: rounding fp32 to e4m3fn, model.quantization=fp8 (a BF16/FP16/FP32
// checkpoint's linear layers quantized at load with a scale per output row, as vLLM's
// --quantization fp8 does), and the codes the CUDA runner keeps on the device.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "runtime/model_weights.hpp"

namespace troupe::runtime {

// The largest finite e4m3fn magnitude (S.1111.110).
inline constexpr float fp8_e4m3_max = 448.0f;

// x rounded to the nearest e4m3fn value, ties to even; beyond ±448 saturated to ±448 (what a
// quantizer wants: no infinities in e4m3fn), NaN to the NaN code 0x7f.
std::uint8_t f32_to_fp8_e4m3(float x) noexcept;

// Quantizes a [rows, columns] matrix in place with one scale a row, amax / 448 (1 for a row of
// zeros): each value becomes e4m3(value / scale) * scale, and the scales are returned.
fp8_scales quantize_fp8_rows(std::vector<float>& matrix, std::size_t columns);

// model.quantization=fp8: every linear layer of `weights` (a whole model or a tensor-parallel
// rank's shard) that is not FP8 already, quantized by quantize_fp8_rows. Column counts come from
// the shapes: q/k/v and gate/up read `hidden` columns, o and down write `hidden` rows.
void quantize_linears_fp8(model_weights& weights, std::size_t hidden);

// The e4m3 codes of a [rows, columns] matrix whose values are codes times `scales` (an FP8
// checkpoint's, or quantize_fp8_rows'): value / scale, which is exact for such values.
// Throws std::invalid_argument when the scales do not cover the matrix.
std::vector<std::uint8_t> fp8_codes(std::span<const float> matrix, std::size_t columns, const fp8_scales& scales);

} // namespace troupe::runtime
