// Quantized copies of stories260k written by the tests themselves: its fp32 weights quantized
// to FP8 (compressed-tensors per-tensor / per-channel, HF block-wise) or AWQ int4, with the
// reference dequantization computed here, independently of runtime/ (e4m3 by its bit fields
// with std::ldexp, AWQ unpacked by the reverse nibble order).
#pragma once

#include <boost/json.hpp>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "runtime/model_weights.hpp"
#include "runtime/safetensors.hpp"
#include "runtime/shard_shape.hpp"
#include "runtime/weight_plan.hpp"
#include "tests/support/stories_model.hpp"

namespace troupe::testing {

enum class quant_kind { fp8_tensor, fp8_channel, fp8_block, awq };

struct quant_format {
  std::string label;
  quant_kind kind;
  int block_rows = 0, block_columns = 0; // fp8_block
  int group = 0;                         // awq
};

// The value of an e4m3fn code from its fields: (-1)^s * 2^(e - 7) * (1 + m / 8), subnormal
// (e = 0) 2^-6 * m / 8, NaN for S.1111.111.
inline float reference_e4m3(std::uint8_t code) {
  const int s = code >> 7, e = (code >> 3) & 15, m = code & 7;
  if (e == 15 && m == 7)
    return std::numeric_limits<float>::quiet_NaN();
  const double magnitude = e == 0 ? std::ldexp(m, -9) : std::ldexp(8 + m, e - 10);
  return static_cast<float>(s != 0 ? -magnitude : magnitude);
}

// The nearest e4m3 code to v (|v| <= 448).
inline std::uint8_t nearest_e4m3(float v) {
  static const std::vector<float> positive = [] {
    std::vector<float> t;
    for (int c = 0; c < 127; ++c) // codes 0..126 are the non-negative values, increasing
      t.push_back(reference_e4m3(static_cast<std::uint8_t>(c)));
    return t;
  }();
  const float a = std::min(std::fabs(v), 448.0f);
  auto it = std::lower_bound(positive.begin(), positive.end(), a);
  if (it == positive.end())
    --it;
  if (it != positive.begin() && a - *(it - 1) < *it - a)
    --it;
  const auto code = static_cast<std::uint8_t>(it - positive.begin());
  return static_cast<std::uint8_t>(v < 0 ? (code | 0x80) : code);
}

// f16 by its fields, for the AWQ scales the test wrote.
inline float reference_f16(std::uint16_t h) {
  const int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
  const double magnitude = e == 0 ? std::ldexp(m, -24) : std::ldexp(1024 + m, e - 25);
  return static_cast<float>(s != 0 ? -magnitude : magnitude);
}

struct stored_tensor {
  std::string name;
  runtime::weight_dtype dtype;
  std::vector<std::int64_t> shape;
  std::vector<std::byte> bytes;
};

// A quantized checkpoint's reference: the dequantized weights, the largest ratio of a weight's
// quantization error to the bound the format promises for it (<= 1 when it holds), and the
// tensors written (tests break them and write them again).
struct quantized_reference {
  runtime::model_weights weights;
  double worst_error_ratio = 0;
  std::vector<stored_tensor> stored;
};

template <class T>
std::vector<std::byte> bytes_of(const std::vector<T>& values) {
  std::vector<std::byte> out(values.size() * sizeof(T));
  if (!out.empty())
    std::memcpy(out.data(), values.data(), out.size());
  return out;
}

inline void write_tensors(const std::filesystem::path& file, const std::vector<stored_tensor>& tensors) {
  std::vector<runtime::tensor_view> views;
  for (const stored_tensor& t : tensors)
    views.push_back({t.name, t.dtype, t.shape, t.bytes});
  runtime::write_safetensors(file, views);
}

// stories' config.json with `quantization` (null: none) and its tokenizer files, into dir.
inline void write_stories_config(const std::filesystem::path& dir, const boost::json::value& quantization) {
  boost::json::object cfg = read_json(stories_dir() / "config.json").as_object();
  if (!quantization.is_null())
    cfg["quantization_config"] = quantization;
  std::ofstream(dir / "config.json", std::ios::trunc) << boost::json::serialize(cfg);
  for (const char* name :
       {"generation_config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"})
    std::filesystem::copy_file(stories_dir() / name, dir / name, std::filesystem::copy_options::overwrite_existing);
}

inline boost::json::value quantization_json(const quant_format& f) {
  using boost::json::object;
  switch (f.kind) {
    case quant_kind::fp8_tensor:
    case quant_kind::fp8_channel: {
      const char* strategy = f.kind == quant_kind::fp8_tensor ? "tensor" : "channel";
      object weights{{"num_bits", 8},    {"type", "float"},       {"strategy", strategy}, {"symmetric", true},
                     {"dynamic", false}, {"group_size", nullptr}, {"observer", "minmax"}};
      object activations{
          {"num_bits", 8}, {"type", "float"}, {"strategy", "token"}, {"dynamic", true}, {"symmetric", true}};
      return object{{"quant_method", "compressed-tensors"},
                    {"format", "float-quantized"},
                    {"quantization_status", "compressed"},
                    {"kv_cache_scheme", nullptr},
                    {"sparsity_config", object{}},
                    {"ignore", boost::json::array{"lm_head"}},
                    {"config_groups", object{{"group_0", object{{"targets", boost::json::array{"Linear"}},
                                                                {"weights", weights},
                                                                {"input_activations", activations}}}}}};
    }
    case quant_kind::fp8_block:
      return object{{"quant_method", "fp8"},
                    {"fmt", "e4m3"},
                    {"activation_scheme", "dynamic"},
                    {"weight_block_size", boost::json::array{f.block_rows, f.block_columns}}};
    case quant_kind::awq:
      // stories' MLP (intermediate 172) fits no AWQ packing: 172 is not a multiple of 8 or of a group.
      return object{{"quant_method", "awq"}, {"bits", 4},
                    {"group_size", f.group}, {"zero_point", true},
                    {"version", "GEMM"},     {"modules_to_not_convert", boost::json::array{"mlp"}}};
  }
  return nullptr;
}

// Whether the test quantizes planned tensor t in format f (the linear projections; AWQ's MLP
// is left out, as quantization_json says).
inline bool test_quantizes(const quant_format& f, const runtime::planned_tensor& t) {
  if (t.kind != runtime::planned_tensor::role::matrix || !t.name.starts_with("model.layers."))
    return false;
  return f.kind != quant_kind::awq || t.name.find(".mlp.") == std::string::npos;
}

// FP8: codes of w / scale, the reference w = e4m3(code) * scale, and the error bound per weight:
// 2^-4 |w| (3 mantissa bits, rounded to nearest) + 2^-10 scale (half the subnormal spacing).
inline void quantize_fp8(const quant_format& f, const std::string& module, std::int64_t out, std::int64_t in,
                         std::vector<float>& w, std::vector<stored_tensor>& stored, double& worst) {
  const auto rows_per = f.kind == quant_kind::fp8_block ? f.block_rows : (f.kind == quant_kind::fp8_channel ? 1 : out);
  const auto cols_per = f.kind == quant_kind::fp8_block ? f.block_columns : in;
  const std::int64_t block_rows = (out + rows_per - 1) / rows_per, block_cols = (in + cols_per - 1) / cols_per;
  std::vector<float> scale(static_cast<std::size_t>(block_rows * block_cols));
  for (std::int64_t bi = 0; bi < block_rows; ++bi)
    for (std::int64_t bj = 0; bj < block_cols; ++bj) {
      float m = 0;
      for (std::int64_t i = bi * rows_per; i < std::min(out, (bi + 1) * rows_per); ++i)
        for (std::int64_t j = bj * cols_per; j < std::min(in, (bj + 1) * cols_per); ++j)
          m = std::max(m, std::fabs(w[static_cast<std::size_t>(i * in + j)]));
      float s = m > 0 ? m / 448.0f : 1.0f;
      if (f.kind == quant_kind::fp8_channel) // per-channel scales are stored as BF16: use the stored value
        s = std::bit_cast<float>(static_cast<std::uint32_t>(runtime::f32_to_bf16(s)) << 16);
      scale[static_cast<std::size_t>(bi * block_cols + bj)] = s;
    }
  std::vector<std::uint8_t> codes(w.size());
  for (std::int64_t i = 0; i < out; ++i)
    for (std::int64_t j = 0; j < in; ++j) {
      const auto k = static_cast<std::size_t>(i * in + j);
      const float s = scale[static_cast<std::size_t>((i / rows_per) * block_cols + j / cols_per)];
      codes[k] = nearest_e4m3(w[k] / s);
      const float dequantized = reference_e4m3(codes[k]) * s;
      const double bound = (std::ldexp(std::fabs(w[k]), -4) + std::ldexp(s, -10)) * (1 + 1e-5);
      worst = std::max(worst, std::fabs(static_cast<double>(w[k]) - dequantized) / bound);
      w[k] = dequantized;
    }
  stored.push_back({module + ".weight", runtime::weight_dtype::f8_e4m3, {out, in}, bytes_of(codes)});
  if (f.kind == quant_kind::fp8_tensor) {
    stored.push_back({module + ".weight_scale", runtime::weight_dtype::f32, {}, bytes_of(scale)});
    stored.push_back({module + ".input_scale", runtime::weight_dtype::f32, {1}, bytes_of(std::vector<float>{1.0f})});
  } else if (f.kind == quant_kind::fp8_channel) {
    std::vector<std::uint16_t> bf16;
    for (const float s : scale)
      bf16.push_back(runtime::f32_to_bf16(s));
    stored.push_back({module + ".weight_scale", runtime::weight_dtype::bf16, {out, 1}, bytes_of(bf16)});
  } else {
    stored.push_back(
        {module + ".weight_scale_inv", runtime::weight_dtype::f32, {block_rows, block_cols}, bytes_of(scale)});
  }
}

// AWQ: per group of input rows and output column, scale = (max - min) / 14 with 0 in the range,
// rounded up to f16 (so no value needs a level past 15), zero = round(-min / scale), q =
// round(w / scale) + zero; the bound per weight is scale / 2. Packed as AutoAWQ does: nibble i of
// int32 c holds column 8c + [0, 2, 4, 6, 1, 3, 5, 7][i].
inline void quantize_awq(const quant_format& f, const std::string& module, std::int64_t out, std::int64_t in,
                         std::vector<float>& w, std::vector<stored_tensor>& stored, double& worst) {
  constexpr std::array<int, 8> column_in_nibble = {0, 2, 4, 6, 1, 3, 5, 7};
  const std::int64_t g = f.group, groups = in / g, packed = out / 8;
  std::vector<std::uint16_t> scales(static_cast<std::size_t>(groups * out));
  std::vector<int> zeros(scales.size()), q(static_cast<std::size_t>(in * out)); // q: [in, out]
  for (std::int64_t gi = 0; gi < groups; ++gi)
    for (std::int64_t n = 0; n < out; ++n) {
      float lo = 0, hi = 0;
      for (std::int64_t k = gi * g; k < (gi + 1) * g; ++k) {
        lo = std::min(lo, w[static_cast<std::size_t>(n * in + k)]);
        hi = std::max(hi, w[static_cast<std::size_t>(n * in + k)]);
      }
      std::uint16_t h = hi > lo ? runtime::f32_to_f16((hi - lo) / 14.0f) : runtime::f32_to_f16(1.0f);
      if (reference_f16(h) < (hi - lo) / 14.0f)
        ++h;
      const float s = reference_f16(h);
      const int zero = static_cast<int>(std::lround(-lo / s));
      scales[static_cast<std::size_t>(gi * out + n)] = h;
      zeros[static_cast<std::size_t>(gi * out + n)] = zero;
      for (std::int64_t k = gi * g; k < (gi + 1) * g; ++k) {
        float& x = w[static_cast<std::size_t>(n * in + k)];
        const int level = std::clamp(static_cast<int>(std::lround(x / s)) + zero, 0, 15);
        q[static_cast<std::size_t>(k * out + n)] = level;
        const float dequantized = static_cast<float>(level - zero) * s;
        worst = std::max(worst, std::fabs(static_cast<double>(x) - dequantized) / (s * 0.5 * (1 + 1e-5)));
        x = dequantized;
      }
    }
  const auto pack = [&](const std::vector<int>& values, std::int64_t rows) {
    std::vector<std::int32_t> words(static_cast<std::size_t>(rows * packed));
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t c = 0; c < packed; ++c) {
        std::uint32_t word = 0;
        for (int i = 0; i < 8; ++i)
          word |= static_cast<std::uint32_t>(values[static_cast<std::size_t>(r * out + 8 * c + column_in_nibble[i])])
                  << (4 * i);
        words[static_cast<std::size_t>(r * packed + c)] = static_cast<std::int32_t>(word);
      }
    return words;
  };
  stored.push_back({module + ".qweight", runtime::weight_dtype::i32, {in, packed}, bytes_of(pack(q, in))});
  stored.push_back({module + ".qzeros", runtime::weight_dtype::i32, {groups, packed}, bytes_of(pack(zeros, groups))});
  stored.push_back({module + ".scales", runtime::weight_dtype::f16, {groups, out}, bytes_of(scales)});
}

// Writes stories260k quantized in format f into dir (config.json with its quantization_config,
// model.safetensors, the tokenizer files); returns the reference dequantized weights.
inline quantized_reference write_quantized_stories(const std::filesystem::path& dir, const quant_format& f) {
  const runtime::model_config& cfg = stories_model().config;
  quantized_reference ref{stories_model().weights, 0, {}};
  const auto plan = runtime::plan_weights(cfg, runtime::whole_model_shard(cfg), ref.weights);
  std::vector<stored_tensor>& stored = ref.stored;
  for (const runtime::planned_tensor& t : plan) {
    std::vector<float>& w = *t.destination;
    if (test_quantizes(f, t)) {
      const std::string module = t.name.substr(0, t.name.size() - 7); // drop ".weight"
      if (f.kind == quant_kind::awq)
        quantize_awq(f, module, t.shape[0], t.shape[1], w, stored, ref.worst_error_ratio);
      else
        quantize_fp8(f, module, t.shape[0], t.shape[1], w, stored, ref.worst_error_ratio);
    } else {
      stored.push_back({t.name, runtime::weight_dtype::f32, t.shape, bytes_of(w)});
    }
  }
  write_tensors(dir / "model.safetensors", stored);
  write_stories_config(dir, quantization_json(f));
  return ref;
}

// The reference weights as an ordinary fp32 checkpoint (no quantization_config).
inline void write_fp32_stories(const std::filesystem::path& dir, runtime::model_weights weights) {
  const runtime::model_config& cfg = stories_model().config;
  const auto plan = runtime::plan_weights(cfg, runtime::whole_model_shard(cfg), weights);
  std::vector<stored_tensor> stored;
  for (const runtime::planned_tensor& t : plan)
    stored.push_back({t.name, runtime::weight_dtype::f32, t.shape, bytes_of(*t.destination)});
  write_tensors(dir / "model.safetensors", stored);
  write_stories_config(dir, nullptr);
}

} // namespace troupe::testing
