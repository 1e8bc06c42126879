#include "model/mxfp4.hpp"

#include "runtime/error.hpp"

namespace zf {

torch::Tensor dequantize_mxfp4(const torch::Tensor &blocks, const torch::Tensor &scales) {
  ZF_REQUIRE(blocks.scalar_type() == torch::kUInt8 && scales.scalar_type() == torch::kUInt8 && blocks.dim() >= 3 &&
                 blocks.size(-1) == 16 && blocks.sizes().slice(0, blocks.dim() - 1) == scales.sizes(),
             "MXFP4 weights: blocks %s and scales %s must be uint8 [..., rows, groups, 16] and [..., rows, groups]",
             c10::str(blocks.sizes()).c_str(), c10::str(scales.sizes()).c_str());
  torch::NoGradGuard no_grad;
  // E2M1: a sign bit, two exponent bits, one mantissa bit.
  static const float kValues[16] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f,
                                    -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};
  const torch::Tensor table = torch::from_blob(const_cast<float *>(kValues), {16}, torch::kFloat32).to(blocks.device());
  const torch::Tensor low = table.index({blocks.bitwise_and(0x0F).to(torch::kLong)});
  const torch::Tensor high = table.index({blocks.bitwise_right_shift(4).to(torch::kLong)});
  std::vector<int64_t> grouped = scales.sizes().vec();  // [..., rows, groups, 32]: low, high, low, high, ...
  grouped.push_back(32);
  torch::Tensor values = torch::stack({low, high}, -1).reshape(grouped);
  const torch::Tensor exponent = (scales.to(torch::kInt32) - 127).unsqueeze(-1);
  values = torch::ldexp(values, exponent).to(torch::kFloat32);
  std::vector<int64_t> matrix = scales.sizes().vec();  // [..., rows, groups x 32]
  matrix.back() *= 32;
  return values.reshape(matrix).transpose(-1, -2).contiguous();
}

}  // namespace zf
