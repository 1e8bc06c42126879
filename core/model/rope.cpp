// Rotary position embeddings (rope.hpp). Every formula follows transformers' modeling_rope_utils in
// fp32, so that the tables carry the same bits as a Hugging Face model's.
#include "model/rope.hpp"

#include "runtime/error.hpp"

#include <algorithm>
#include <cmath>

namespace zf {
namespace {

torch::Tensor even_channels(int64_t rotated) {  // 0, 2, 4, ... as fp32
  return torch::arange(0, rotated, 2, torch::kLong).to(torch::kFloat32);
}

torch::Tensor llama3(const RopeSpec &spec, torch::Tensor inverse) {
  const double low_wavelength = double(spec.original_max) / spec.low_freq_factor;
  const double high_wavelength = double(spec.original_max) / spec.high_freq_factor;
  torch::Tensor wavelength = 2 * M_PI / inverse;
  // Long wavelengths are divided by the factor, short ones kept, the band between interpolated.
  torch::Tensor scaled = torch::where(wavelength > low_wavelength, inverse / spec.factor, inverse);
  torch::Tensor smooth = (double(spec.original_max) / wavelength - spec.low_freq_factor) /
                         (spec.high_freq_factor - spec.low_freq_factor);
  torch::Tensor smoothed = (1 - smooth) * scaled / spec.factor + smooth * scaled;
  torch::Tensor medium = (wavelength >= high_wavelength).logical_and(wavelength <= low_wavelength);
  return torch::where(medium, smoothed, scaled);
}

double yarn_mscale(double scale, double mscale) { return scale <= 1 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0; }

std::pair<torch::Tensor, double> yarn(const RopeSpec &spec, int64_t rotated, int64_t max_seq) {
  const double base = spec.theta;
  const double factor = spec.factor > 0 ? spec.factor : double(max_seq) / double(spec.original_max);
  double attention = spec.attention_factor;
  if (attention == 0)
    attention = spec.mscale != 0 && spec.mscale_all_dim != 0
                    ? yarn_mscale(factor, spec.mscale) / yarn_mscale(factor, spec.mscale_all_dim)
                    : yarn_mscale(factor, 1);
  auto correction_dim = [&](double rotations) {
    return double(rotated) * std::log(double(spec.original_max) / (rotations * 2 * M_PI)) / (2 * std::log(base));
  };
  double low = correction_dim(spec.beta_fast), high = correction_dim(spec.beta_slow);
  if (spec.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, double(rotated - 1));
  if (low == high) high += 0.001;  // as transformers: no division by zero
  torch::Tensor frequencies = torch::pow(base, even_channels(rotated) / double(rotated));
  torch::Tensor extrapolation = 1.0 / frequencies, interpolation = 1.0 / (factor * frequencies);
  torch::Tensor ramp = ((torch::arange(rotated / 2, torch::kFloat32) - low) / (high - low)).clamp(0, 1);
  torch::Tensor extrapolated = 1 - ramp;
  return {interpolation * (1 - extrapolated) + extrapolation * extrapolated, attention};
}

}  // namespace

std::pair<torch::Tensor, double> rope_inverse_frequencies(const RopeSpec &spec, int64_t rotated, int64_t max_seq) {
  torch::NoGradGuard no_grad;
  if (spec.type == "yarn") return yarn(spec, rotated, max_seq);
  torch::Tensor inverse = 1.0 / torch::pow(spec.theta, even_channels(rotated) / double(rotated));
  if (spec.type == "default") return {inverse, 1.0};
  if (spec.type == "linear") return {inverse / spec.factor, 1.0};
  if (spec.type == "llama3") return {llama3(spec, inverse), 1.0};
  if (spec.type == "proportional") {  // the first pairs at base^(-2i / rotated), the rest not turned (Gemma 4)
    const int64_t turned = int64_t(std::floor(spec.partial * double(rotated) / 2));
    inverse = torch::cat({inverse.narrow(0, 0, turned), torch::zeros({rotated / 2 - turned}, torch::kFloat32)});
    return {inverse / spec.factor, 1.0};
  }
  throw Error(format("internal: RoPE of type \"%s\"", spec.type.c_str()));
}

RopeTables rope_tables(const RopeSpec &spec, int64_t rotated, int64_t max_seq, int64_t length,
                       const torch::Tensor &like) {
  torch::NoGradGuard no_grad;
  auto [inverse, scale] = rope_inverse_frequencies(spec, rotated, max_seq);
  auto fp32 = torch::TensorOptions().dtype(torch::kFloat32).device(like.device());
  torch::Tensor angles = torch::outer(torch::arange(length, fp32), inverse.to(like.device()));
  torch::Tensor cos = angles.cos(), sin = angles.sin();
  if (scale != 1) {
    cos = cos * scale;
    sin = sin * scale;
  }
  cos = cos.to(like.scalar_type());
  sin = sin.to(like.scalar_type());
  return {torch::cat({cos, cos}, -1), torch::cat({-sin, sin}, -1)};
}

RopeTables rope_at(const RopeTables &tables, const torch::Tensor &positions) {
  const torch::Tensor flat = positions.reshape({-1}).to(tables.cos.device());
  auto rows = [&](const torch::Tensor &table) {
    return table.index_select(0, flat).view({positions.size(0), 1, positions.size(1), table.size(-1)});
  };
  return {rows(tables.cos), rows(tables.signed_sin)};
}

torch::Tensor apply_rope(const torch::Tensor &x, const RopeTables &tables) {
  const int64_t rotated = tables.cos.size(-1);
  // rotate_half(t) * sin as one roll: roll(t) * [-sin | sin] has the same bits, in fewer ops (the
  // backward of a 1.5B step was launch-bound on the host: docs/gpu.md).
  if (rotated == x.size(-1)) return x * tables.cos + x.roll(rotated / 2, -1) * tables.signed_sin;
  torch::Tensor part = x.narrow(-1, 0, rotated);
  torch::Tensor turned = part * tables.cos + part.roll(rotated / 2, -1) * tables.signed_sin;
  return torch::cat({turned, x.narrow(-1, rotated, x.size(-1) - rotated)}, -1);
}

}  // namespace zf
