// A quantized linear layer's stored tensors, checked and dequantized to fp32 at load: FP8 e4m3
// with per-tensor, per-channel or block-wise scales, and AWQ int4 (GEMM packing) with group
// scales and zeros. A tensor-parallel rank dequantizes only the block it keeps.
#pragma once

#include "runtime/quantization_config.hpp"
#include "runtime/safetensors.hpp"
#include "runtime/weight_plan.hpp"

#include <string>
#include <vector>

namespace troupe::runtime {

// Whether `t` (a planned "...proj.weight" matrix of the decoder layers) is stored quantized:
// q/k/v/o and gate/up/down that `q` does not leave out. Embeddings, norms and lm_head never are.
bool is_quantized_linear(const quantization_config& q, const planned_tensor& t);

// The names of the stored tensors that hold `t` (its weight or qweight, scales, zeros, an
// optional input_scale), after checking their dtypes and shapes against t's [out, in] and that
// t's block can be cut from them (AWQ: input columns on group boundaries). Throws model_error
// naming the file, the tensor and the shapes.
std::vector<std::string> check_quantized_linear(const tensor_store& store, const quantization_config& q,
                                                const planned_tensor& t);

// t's block of the dequantized [out, in] matrix into *t.destination (checked first).
//   fp8: w[i][j] = e4m3(weight[i][j]) * scale       (scale per tensor, per row i, or per
//                                                    block [i / bn][j / bk] of weight_scale_inv)
//   awq: w[n][k] = (q[k][n] - zero[k / group][n]) * scales[k / group][n]
void read_quantized_linear(const tensor_store& store, const quantization_config& q, const planned_tensor& t);

} // namespace troupe::runtime
