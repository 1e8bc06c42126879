#include "engine/grad_accumulation.hpp"

namespace zf {

torch::Dtype reduced_grad_dtype(const RunConfig &config, torch::Dtype compute) {
  return config.string("train", "grad_accum_dtype") == "float32" ? torch::kFloat32 : compute;
}

Fp32GradAccumulation::Fp32GradAccumulation(torch::Tensor grads, const zf_layout &layout, torch::Tensor sum)
    : grads_(std::move(grads)), sum_(std::move(sum)), layout_(layout), folded_(layout.block_count, false) {}

void Fp32GradAccumulation::micro_step_done(bool first, bool last) {
  torch::NoGradGuard no_grad;
  if (last) {
    for (uint32_t block = 0; block < folded_.size(); ++block) fold_block(block, first);
    folded_.assign(folded_.size(), false);
    return;
  }
  // Widened first (exactly): torch's mixed-dtype add_ measured 6-20x slower on CPU (850k elements:
  // 10.4 ms against 1.8 ms).
  if (first) sum_.copy_(grads_);
  else sum_.add_(grads_.to(torch::kFloat32));
  grads_.zero_();
}

void Fp32GradAccumulation::fold_block(uint32_t block, bool first) {
  if (folded_[block]) return;
  folded_[block] = true;
  torch::NoGradGuard no_grad;
  const zf_block &range = layout_.blocks[block];
  torch::Tensor sum = sum_.narrow(0, int64_t(range.offset), int64_t(range.numel));
  torch::Tensor grads = grads_.narrow(0, int64_t(range.offset), int64_t(range.numel));
  if (first) sum.copy_(grads);
  else sum.add_(grads.to(torch::kFloat32));
  grads.zero_();
}

}  // namespace zf
