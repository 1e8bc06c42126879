// attention_choice.hpp: which of libtorch's attention kernels a GPU run's causal attention takes
// (model.attention). "auto" times each kernel that can run the model's attention, forward and
// backward at the run's micro-batch, sequence, heads and dtype, and puts the fastest first in SDPA's
// order; the times and the choice are logged. The sliding-window and packed-document cases keep
// FlashAttention's own entry (model/attention.hpp): only it takes a window or cu_seqlens without a
// mask in memory.
#pragma once

#include "config/config.hpp"
#include "runtime/runtime.hpp"

#include <torch/torch.h>

#include <string>
#include <vector>

namespace zf {

// The attention of one layer as the run calls it.
struct AttentionCall {
  int64_t batch = 1, heads = 1, kv_heads = 1, length = 1, head_dim = 64;
  torch::Dtype dtype = torch::kBFloat16;
};

// One kernel's forward + backward time in ms (negative: it cannot run this call).
struct KernelTime {
  std::string kernel;  // cudnn, flash, efficient, math
  double ms = -1;
};

// Times `kernels` on the current CUDA device, each alone in SDPA's enabled set.
std::vector<KernelTime> time_attention_kernels(const AttentionCall &call, const std::vector<std::string> &kernels);

// Puts `kernel` first in SDPA's order, every kernel still enabled (a call it cannot run falls to the next).
void put_attention_kernel_first(const std::string &kernel);

// A GPU run with a transformer: applies model.attention (every rank the same kernel: the least
// total time over the ranks) and logs the times and the choice. A CPU run: nothing.
void choose_attention_kernel(const RunConfig &config, Runtime &runtime);

}  // namespace zf
