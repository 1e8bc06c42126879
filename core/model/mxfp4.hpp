// mxfp4.hpp: the MXFP4 weights of gpt-oss's published checkpoints (quantization_config quant_method
// "mxfp4"), dequantised when they load: each expert matrix is stored as `NAME_blocks` (uint8
// [..., rows, groups, 16], two 4-bit E2M1 values a byte, the low nibble first) and `NAME_scales` (uint8
// [..., rows, groups], one power-of-two exponent + 127 per group of 32 values). The values are
// E2M1 x 2^(scale - 127), exact in fp32 and in bf16.
#pragma once

#include <torch/torch.h>

namespace zf {

// blocks [..., rows, groups, 16] and scales [..., rows, groups] (uint8) -> [..., groups x 32, rows] in
// fp32: the matrix transposed, as gpt-oss's fused expert tensors hold it ([E, in, out]).
torch::Tensor dequantize_mxfp4(const torch::Tensor &blocks, const torch::Tensor &scales);

}  // namespace zf
