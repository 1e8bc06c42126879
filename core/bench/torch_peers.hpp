// torch_peers.hpp: torch's own CPU AdamW, run in this process through libtorch as the peers of
// the optimizer benchmark and tests: the fused ATen kernel behind torch.optim.AdamW(fused=True)
// (at::_fused_adamw_) and the C++ frontend's torch::optim::AdamW. Both update the caller's
// buffers in place (torch tensors view them) and keep their own moments.
//
// torch's AdamW takes fp32 gradients and writes no low-precision copy, so with bf16/fp16
// gradients or a params_out buffer a peer step also does what a torch user would add: cast the
// gradients to an fp32 buffer first and copy the parameters out after. Those passes are timed.
// Torch headers stay inside torch_peers.cpp (build time).
#pragma once

#include <zf/zf_plugin.h>

#include <cstdint>
#include <memory>
#include <string>

namespace zf::bench {

struct PeerBuffers {
  float *params = nullptr;
  const void *grads = nullptr;
  zf_dtype grad_dtype = ZF_DTYPE_F32;
  void *params_out = nullptr;  // optional
  zf_dtype out_dtype = ZF_DTYPE_BF16;
  uint64_t numel = 0;
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.01;
  float grad_scale = 1.0f;
  bool decoupled = true;  // AdamW; false: Adam with L2 decay (torch.optim.Adam)
};

class TorchPeer {
 public:
  virtual ~TorchPeer() = default;
  virtual std::string name() const = 0;
  // One update with 1-based step counter step (steps must be called 1, 2, 3, ...).
  virtual void step(int64_t step) = 0;
  // Moments after the last step (for tests): exp_avg and exp_avg_sq, numel floats each.
  virtual const float *exp_avg() const = 0;
  virtual const float *exp_avg_sq() const = 0;
};

std::unique_ptr<TorchPeer> make_torch_fused_adamw(const PeerBuffers &buffers);
std::unique_ptr<TorchPeer> make_torch_optim_adamw(const PeerBuffers &buffers);

void set_torch_threads(int threads);  // at::set_num_threads
int torch_threads();

}  // namespace zf::bench
