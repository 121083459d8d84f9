// How a checkpoint's linear layers are quantized (config.json's quantization_config): the three
// schemes troupe reads, FP8 (compressed-tensors), FP8 block-wise (HF "fp8") and AWQ int4 (GEMM
// packing). All are dequantized to fp32 at load (runtime/quantized_linear.hpp).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace boost::json {
class object;
}

namespace troupe::runtime {

enum class quantization_scheme {
  fp8_per_tensor,  // compressed-tensors: X.weight F8_E4M3 [out, in], X.weight_scale [] or [1]
  fp8_per_channel, // compressed-tensors: X.weight_scale [out, 1]
  fp8_block,       // HF fp8: X.weight_scale_inv [ceil(out / bn), ceil(in / bk)]
  awq,             // AutoAWQ GEMM: X.qweight I32 [in, out / 8], X.qzeros I32 and X.scales [in / group, ...]
};

struct quantization_config {
  quantization_scheme scheme = quantization_scheme::fp8_per_tensor;
  int block_rows = 0, block_columns = 0; // fp8_block: weight_block_size [bn, bk]
  int group_size = 0;                    // awq: input rows sharing one scale and zero
  // The input activations' scheme as the file records it ("none", "dynamic per-token",
  // "static per-tensor", ...). Unused: the CPU computes activations in fp32.
  std::string activations = "none";
  // Linear layers stored unquantized. Compressed-tensors' ignore: a module's full name, or
  // "re:<regex>" matched from the name's start; HF's modules_to_not_convert (awq, fp8): a
  // substring of the name.
  std::vector<std::string> ignore;
  std::vector<std::string> not_converted;

  // Whether the linear layer `module` ("model.layers.0.mlp.down_proj") is stored quantized.
  bool quantizes(std::string_view module) const;
};

// "fp8 (compressed-tensors, per-channel)", "awq int4 (group 32)", for the engine's log.
std::string to_string(const quantization_config& q);

// Reads config.json's quantization_config object. Throws model_error "<source>:
// quantization_config.<field> ..." naming the value and what is accepted for any other method,
// bit width, strategy, group size or version, and for any key troupe does not read whose value
// is not null (harmless bookkeeping keys are listed in the .cpp and ignored).
quantization_config parse_quantization_config(const boost::json::object& object, std::string_view source);

} // namespace troupe::runtime
