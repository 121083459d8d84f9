// Checks and dequantizes the stored tensors of FP8 and AWQ linear layers (the formats are
// described in quantized_linear.hpp and docs/architecture.md).
#include "runtime/quantized_linear.hpp"

#include "runtime/errors.hpp"
#include "runtime/model_weights.hpp"

#include <array>
#include <cstring>
#include <numeric>

namespace troupe::runtime {

namespace {

constexpr std::array<std::string_view, 7> linear_suffixes = {
    ".self_attn.q_proj.weight", ".self_attn.k_proj.weight", ".self_attn.v_proj.weight", ".self_attn.o_proj.weight",
    ".mlp.gate_proj.weight",    ".mlp.up_proj.weight",      ".mlp.down_proj.weight"};

// AutoAWQ packs output columns 8c + [0, 2, 4, 6, 1, 3, 5, 7] into nibbles 0..7 of int32 c:
// column 8c + j sits in nibble awq_nibble[j].
constexpr std::array<int, 8> awq_nibble = {0, 4, 1, 5, 2, 6, 3, 7};

std::string module_of(const planned_tensor& t) {
  return t.name.substr(0, t.name.size() - std::string_view(".weight").size());
}

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

[[noreturn]] void fail(const tensor_store& store, const std::string& tensor, const std::string& what) {
  throw model_error(store.file_of(tensor).string() + ": tensor '" + tensor + "' " + what);
}

// The stored tensor `name`, which quantization_config says must be there.
tensor_view needed(const tensor_store& store, const quantization_config& q, const std::string& name) {
  if (!store.contains(name))
    throw model_error("tensor '" + name + "' is missing (quantization_config " + to_string(q) + " needs it)");
  return store.get(name);
}

void expect_dtype(const tensor_store& store, const tensor_view& v, bool ok, std::string_view accepted) {
  if (!ok)
    fail(store, v.name, "has dtype " + std::string(dtype_name(v.dtype)) + ", expected " + std::string(accepted));
}

void expect_shape(const tensor_store& store, const tensor_view& v, const std::vector<int64_t>& shape,
                  const std::string& what) {
  if (v.shape != shape)
    fail(store, v.name, "has shape " + format_shape(v.shape) + ", expected " + format_shape(shape) + " (" + what + ")");
}

int32_t int32_at(const tensor_view& v, std::size_t index) {
  int32_t x;
  std::memcpy(&x, v.data.data() + 4 * index, 4);
  return x;
}

int nibble(int32_t word, int64_t column) {
  return static_cast<int>((static_cast<uint32_t>(word) >> (4 * awq_nibble[static_cast<std::size_t>(column % 8)])) &
                          0xfu);
}

// The scales of t's block as fp8_scales: one a row for per-tensor and per-channel scales; for
// block-wise ones, groups as wide as the blocks allow where the rank's columns start (a slice
// that starts inside a block of 128 gets groups of gcd(128, its first column, its width)).
fp8_scales fp8_scales_of_block(const quantization_config& q, const std::vector<float>& scale,
                               const planned_tensor& t, std::size_t block_columns) {
  fp8_scales out;
  if (q.scheme != quantization_scheme::fp8_block) {
    out.group = t.columns;
    out.values.resize(t.rows);
    for (std::size_t r = 0; r < t.rows; ++r)
      out.values[r] = q.scheme == quantization_scheme::fp8_per_channel ? scale[t.row_begin + r] : scale[0];
    return out;
  }
  const auto bc = static_cast<std::size_t>(q.block_columns), br = static_cast<std::size_t>(q.block_rows);
  out.group = std::gcd(std::gcd(bc, t.column_begin), t.columns);
  const std::size_t groups = t.columns / out.group;
  out.values.resize(t.rows * groups);
  for (std::size_t r = 0; r < t.rows; ++r)
    for (std::size_t g = 0; g < groups; ++g)
      out.values[r * groups + g] = scale[((t.row_begin + r) / br) * block_columns + (t.column_begin + g * out.group) / bc];
  return out;
}

} // namespace

bool is_quantized_linear(const quantization_config& q, const planned_tensor& t) {
  if (t.kind != planned_tensor::role::matrix || !t.name.starts_with("model.layers."))
    return false;
  for (const std::string_view suffix : linear_suffixes)
    if (t.name.ends_with(suffix))
      return q.quantizes(module_of(t));
  return false;
}

std::vector<std::string> check_quantized_linear(const tensor_store& store, const quantization_config& q,
                                                const planned_tensor& t) {
  const std::string module = module_of(t);
  const int64_t out = t.shape[0], in = t.shape[1];
  const std::string shape_text = format_shape(t.shape);
  std::vector<std::string> names;
  if (q.scheme != quantization_scheme::awq) {
    const tensor_view weight = needed(store, q, module + ".weight");
    expect_dtype(store, weight, weight.dtype == weight_dtype::f8_e4m3,
                 "F8_E4M3 (quantization_config " + to_string(q) + ")");
    expect_shape(store, weight, t.shape, "from config.json");
    const bool block = q.scheme == quantization_scheme::fp8_block;
    const tensor_view scale = needed(store, q, module + (block ? ".weight_scale_inv" : ".weight_scale"));
    expect_dtype(store, scale, is_float_dtype(scale.dtype), "F32, BF16 or F16");
    if (q.scheme == quantization_scheme::fp8_per_tensor) {
      if (scale.element_count() != 1 || scale.shape.size() > 1)
        fail(store, scale.name,
             "has shape " + format_shape(scale.shape) + ", expected [] or [1] (per-tensor scale of " + module + " " +
                 shape_text + ")");
    } else if (q.scheme == quantization_scheme::fp8_per_channel) {
      expect_shape(store, scale, {out, 1}, "per-channel scales of " + module + " " + shape_text);
    } else {
      expect_shape(store, scale, {ceil_div(out, q.block_rows), ceil_div(in, q.block_columns)},
                   "one scale per " + std::to_string(q.block_rows) + "x" + std::to_string(q.block_columns) +
                       " block of " + module + " " + shape_text);
    }
    names = {weight.name, scale.name};
    if (store.contains(module + ".input_scale")) // activation scales: recorded, unused on the CPU
      names.push_back(module + ".input_scale");
    return names;
  }

  // AWQ: 8 output columns per int32, one scale and zero per group of input rows.
  const int64_t group = q.group_size;
  if (out % 8 != 0)
    throw model_error(module + " " + shape_text + ": out_features " + std::to_string(out) +
                      " is not divisible by 8 (AWQ packs 8 output columns per int32); leave it out with "
                      "modules_to_not_convert");
  if (in % group != 0)
    throw model_error(module + " " + shape_text + ": in_features " + std::to_string(in) +
                      " is not divisible by group_size " + std::to_string(group));
  const tensor_view qweight = needed(store, q, module + ".qweight");
  const tensor_view qzeros = needed(store, q, module + ".qzeros");
  const tensor_view scales = needed(store, q, module + ".scales");
  expect_dtype(store, qweight, qweight.dtype == weight_dtype::i32, "I32");
  expect_dtype(store, qzeros, qzeros.dtype == weight_dtype::i32, "I32");
  expect_dtype(store, scales, is_float_dtype(scales.dtype), "F16, BF16 or F32");
  expect_shape(store, qweight, {in, out / 8}, "[in_features, out_features / 8] of " + module + " " + shape_text);
  expect_shape(store, qzeros, {in / group, out / 8},
               "[in_features / group_size, out_features / 8] of " + module + " " + shape_text);
  expect_shape(store, scales, {in / group, out},
               "[in_features / group_size, out_features] of " + module + " " + shape_text);
  const auto first = static_cast<int64_t>(t.column_begin), end = static_cast<int64_t>(t.column_begin + t.columns);
  if (first % group != 0 || end % group != 0)
    throw model_error(store.file_of(qweight.name).string() + ": " + module + " " + shape_text +
                      ": this tensor-parallel rank's input columns [" + std::to_string(first) + ", " +
                      std::to_string(end) + ") do not start and end on AWQ groups of " + std::to_string(group));
  return {qweight.name, qzeros.name, scales.name};
}

void read_quantized_linear(const tensor_store& store, const quantization_config& q, const planned_tensor& t) {
  const std::vector<std::string> names = check_quantized_linear(store, q, t);
  const std::size_t in = t.whole_columns();
  std::vector<float>& out = *t.destination;
  out.assign(t.rows * t.columns, 0.0f);

  if (q.scheme != quantization_scheme::awq) {
    const tensor_view weight = store.get(names[0]);
    const std::vector<float> scale = to_f32(store.get(names[1]));
    const bool block = q.scheme == quantization_scheme::fp8_block;
    const auto block_columns =
        block ? static_cast<std::size_t>(ceil_div(static_cast<int64_t>(in), q.block_columns)) : 0;
    for (std::size_t r = 0; r < t.rows; ++r) {
      const std::size_t i = t.row_begin + r;
      const auto* row = reinterpret_cast<const uint8_t*>(weight.data.data()) + i * in;
      float* dst = out.data() + r * t.columns;
      for (std::size_t c = 0; c < t.columns; ++c) {
        const std::size_t j = t.column_begin + c;
        float s = scale[0];
        if (q.scheme == quantization_scheme::fp8_per_channel)
          s = scale[i];
        else if (block)
          s = scale[(i / static_cast<std::size_t>(q.block_rows)) * block_columns +
                    j / static_cast<std::size_t>(q.block_columns)];
        dst[c] = fp8_e4m3_to_f32(row[j]) * s;
      }
    }
    if (t.fp8 != nullptr)
      *t.fp8 = fp8_scales_of_block(q, scale, t, block_columns);
    return;
  }

  const tensor_view qweight = store.get(names[0]);
  const tensor_view qzeros = store.get(names[1]);
  const std::vector<float> scales = to_f32(store.get(names[2]));
  const auto out_features = static_cast<std::size_t>(t.shape[0]);
  const std::size_t packed = out_features / 8, group = static_cast<std::size_t>(q.group_size);
  // Input row by input row: qweight's rows are contiguous in the mapping.
  for (std::size_t c = 0; c < t.columns; ++c) {
    const std::size_t k = t.column_begin + c, g = k / group;
    for (std::size_t r = 0; r < t.rows; ++r) {
      const std::size_t n = t.row_begin + r;
      const int value = nibble(int32_at(qweight, k * packed + n / 8), static_cast<int64_t>(n));
      const int zero = nibble(int32_at(qzeros, g * packed + n / 8), static_cast<int64_t>(n));
      out[r * t.columns + c] = static_cast<float>(value - zero) * scales[g * out_features + n];
    }
  }
  if (t.int4 == nullptr)
    return;
  // The block's groups, row-major as the values ([rows, columns / group]; the block starts on a group).
  int4_groups& kept = *t.int4;
  const std::size_t groups = t.columns / group, first_group = t.column_begin / group;
  kept.group = group;
  kept.scales.assign(t.rows * groups, 0.0f);
  kept.zeros.assign(t.rows * groups, 0.0f);
  for (std::size_t r = 0; r < t.rows; ++r) {
    const std::size_t n = t.row_begin + r;
    for (std::size_t j = 0; j < groups; ++j) {
      const std::size_t g = first_group + j;
      kept.scales[r * groups + j] = scales[g * out_features + n];
      kept.zeros[r * groups + j] =
          static_cast<float>(nibble(int32_at(qzeros, g * packed + n / 8), static_cast<int64_t>(n)));
    }
  }
}

} // namespace troupe::runtime
