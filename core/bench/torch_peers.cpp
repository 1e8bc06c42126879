#include "bench/torch_peers.hpp"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>

namespace zf::bench {
namespace {

at::ScalarType scalar_type(zf_dtype dtype) {
  switch (dtype) {
    case ZF_DTYPE_BF16: return at::kBFloat16;
    case ZF_DTYPE_F16: return at::kHalf;
    default: return at::kFloat;
  }
}

// What both peers share: tensors over the caller's buffers, the fp32 gradient a torch user
// needs when gradients arrive in 16 bits, and the params_out copy.
class PeerBase : public TorchPeer {
 public:
  explicit PeerBase(const PeerBuffers &b) : buffers_(b) {
    const int64_t n = int64_t(b.numel);
    params_ = at::from_blob(b.params, {n}, at::kFloat);
    grads_in_ = at::from_blob(const_cast<void *>(b.grads), {n}, scalar_type(b.grad_dtype));
    grads32_ = b.grad_dtype == ZF_DTYPE_F32 && b.grad_scale == 1.0f ? grads_in_
                                                                    : at::empty({n}, at::kFloat);
    if (b.params_out) out_ = at::from_blob(b.params_out, {n}, scalar_type(b.out_dtype));
  }

 protected:
  // Before the update: fp32 gradients, scaled (torch has no grad_scale argument in AdamW).
  void prepare_grads() {
    if (grads32_.data_ptr() == grads_in_.data_ptr()) return;
    grads32_.copy_(grads_in_);
    if (buffers_.grad_scale != 1.0f) grads32_.mul_(buffers_.grad_scale);
  }
  void write_out() {
    if (out_.defined()) out_.copy_(params_);
  }
  PeerBuffers buffers_;
  at::Tensor params_, grads_in_, grads32_, out_;
};

class FusedAdamw : public PeerBase {
 public:
  explicit FusedAdamw(const PeerBuffers &b) : PeerBase(b) {
    exp_avg_ = at::zeros({int64_t(b.numel)}, at::kFloat);
    exp_avg_sq_ = at::zeros({int64_t(b.numel)}, at::kFloat);
    step_ = at::zeros({}, at::kFloat);
  }
  std::string name() const override {
    return buffers_.decoupled ? "torch fused AdamW (at::_fused_adamw_)"
                              : "torch fused Adam (at::_fused_adam_)";
  }
  void step(int64_t step) override {
    at::NoGradGuard no_grad;
    prepare_grads();
    step_.fill_(double(step));  // torch.optim increments the step tensor before the kernel
    const PeerBuffers &b = buffers_;
    if (b.decoupled)
      at::_fused_adamw_({params_}, {grads32_}, {exp_avg_}, {exp_avg_sq_}, {}, {step_}, b.lr,
                        b.beta1, b.beta2, b.weight_decay, b.eps, false, false);
    else
      at::_fused_adam_({params_}, {grads32_}, {exp_avg_}, {exp_avg_sq_}, {}, {step_}, b.lr, b.beta1,
                       b.beta2, b.weight_decay, b.eps, false, false);
    write_out();
  }
  const float *exp_avg() const override { return exp_avg_.data_ptr<float>(); }
  const float *exp_avg_sq() const override { return exp_avg_sq_.data_ptr<float>(); }

 private:
  at::Tensor exp_avg_, exp_avg_sq_, step_;
};

class OptimAdamw : public PeerBase {
 public:
  explicit OptimAdamw(const PeerBuffers &b) : PeerBase(b) {
    params_.mutable_grad() = grads32_;
    if (b.decoupled) {
      optimizer_ = std::make_unique<torch::optim::AdamW>(std::vector<at::Tensor>{params_},
                                                         torch::optim::AdamWOptions(b.lr)
                                                             .betas({b.beta1, b.beta2})
                                                             .eps(b.eps)
                                                             .weight_decay(b.weight_decay));
    } else {
      optimizer_ = std::make_unique<torch::optim::Adam>(std::vector<at::Tensor>{params_},
                                                        torch::optim::AdamOptions(b.lr)
                                                            .betas({b.beta1, b.beta2})
                                                            .eps(b.eps)
                                                            .weight_decay(b.weight_decay));
    }
  }
  std::string name() const override {
    return buffers_.decoupled ? "torch::optim::AdamW" : "torch::optim::Adam";
  }
  // The frontend keeps its own step counter; steps must come 1, 2, 3, ...
  void step(int64_t) override {
    at::NoGradGuard no_grad;
    prepare_grads();
    optimizer_->step();
    write_out();
  }
  const float *exp_avg() const override { return moment("exp_avg"); }
  const float *exp_avg_sq() const override { return moment("exp_avg_sq"); }

 private:
  const float *moment(const char *which) const {
    const auto &state = optimizer_->state();
    auto it = state.find(params_.unsafeGetTensorImpl());
    if (it == state.end()) return nullptr;
    if (buffers_.decoupled) {
      auto &s = static_cast<torch::optim::AdamWParamState &>(*it->second);
      return (std::string(which) == "exp_avg" ? s.exp_avg() : s.exp_avg_sq()).data_ptr<float>();
    }
    auto &s = static_cast<torch::optim::AdamParamState &>(*it->second);
    return (std::string(which) == "exp_avg" ? s.exp_avg() : s.exp_avg_sq()).data_ptr<float>();
  }
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
};

}  // namespace

std::unique_ptr<TorchPeer> make_torch_fused_adamw(const PeerBuffers &buffers) {
  return std::make_unique<FusedAdamw>(buffers);
}

std::unique_ptr<TorchPeer> make_torch_optim_adamw(const PeerBuffers &buffers) {
  return std::make_unique<OptimAdamw>(buffers);
}

void set_torch_threads(int threads) { at::set_num_threads(threads); }
int torch_threads() { return at::get_num_threads(); }

}  // namespace zf::bench
