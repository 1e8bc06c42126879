// attention_choice.cpp: model.attention, measured at start-up on the run's own attention call.
#include "engine/attention_choice.hpp"

#include "model/transformer_shape.hpp"
#include "runtime/error.hpp"
#include "runtime/log.hpp"

#include <ATen/Context.h>
#include <torch/cuda.h>

#include <chrono>
#include <limits>

namespace zf {
namespace {

at::SDPBackend backend_of(const std::string &kernel) {
  if (kernel == "cudnn") return at::SDPBackend::cudnn_attention;
  if (kernel == "flash") return at::SDPBackend::flash_attention;
  if (kernel == "efficient") return at::SDPBackend::efficient_attention;
  ZF_REQUIRE(kernel == "math", "unknown attention kernel '%s' (cudnn, flash, efficient, math)", kernel.c_str());
  return at::SDPBackend::math;
}

// Only `kernel` enabled (none: every kernel enabled).
void enable_only(const std::string &kernel) {
  auto &context = at::globalContext();
  context.setSDPUseCuDNN(kernel.empty() || kernel == "cudnn");
  context.setSDPUseFlash(kernel.empty() || kernel == "flash");
  context.setSDPUseMemEfficient(kernel.empty() || kernel == "efficient");
  context.setSDPUseMath(kernel.empty() || kernel == "math");
}

double time_one(const AttentionCall &call) {
  auto options = torch::TensorOptions().dtype(call.dtype).device(torch::kCUDA);
  torch::Tensor q = torch::randn({call.batch, call.heads, call.length, call.head_dim}, options).requires_grad_();
  torch::Tensor k = torch::randn({call.batch, call.kv_heads, call.length, call.head_dim}, options).requires_grad_();
  torch::Tensor v = torch::randn({call.batch, call.kv_heads, call.length, call.head_dim}, options).requires_grad_();
  torch::Tensor grad = torch::randn({call.batch, call.heads, call.length, call.head_dim}, options);
  auto once = [&] {
    torch::Tensor out = at::scaled_dot_product_attention(q, k, v, std::nullopt, 0.0, /*is_causal=*/true, std::nullopt,
                                                         /*enable_gqa=*/call.kv_heads != call.heads);
    out.backward(grad);
  };
  once();  // the kernel's first launch (and cuDNN's plan) outside the timing
  once();
  torch::cuda::synchronize();
  const int repeats = 5;
  auto started = std::chrono::steady_clock::now();
  for (int i = 0; i < repeats; ++i) once();
  torch::cuda::synchronize();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count() / repeats;
}

}  // namespace

std::vector<KernelTime> time_attention_kernels(const AttentionCall &call, const std::vector<std::string> &kernels) {
  std::vector<KernelTime> times;
  for (const std::string &kernel : kernels) {
    enable_only(kernel);
    KernelTime time{kernel, -1};
    try {
      time.ms = time_one(call);
    } catch (const c10::Error &) {
      // No kernel of this kind takes this call (head size, dtype, GPU): it is left out.
    }
    times.push_back(time);
  }
  enable_only("");
  return times;
}

void put_attention_kernel_first(const std::string &kernel) {
  enable_only("");
  const at::SDPBackend first = backend_of(kernel);
  std::vector<int64_t> order = {int64_t(first)};
  for (at::SDPBackend backend : at::globalContext().sDPPriorityOrder())
    if (backend != first) order.push_back(int64_t(backend));
  at::globalContext().setSDPPriorityOrder(order);
}

void choose_attention_kernel(const RunConfig &config, Runtime &runtime) {
  if (runtime.device != ZF_DEVICE_CUDA || !is_transformer_config(config)) return;
  const std::string choice = config.string("model", "attention");
  const std::string where = config.where("model", "attention").str();
  if (choice == "auto" && at::globalContext().deterministicAlgorithms()) {
    log_info("attention: libtorch's order of kernels (run.deterministic: only deterministic ones take part)");
    return;
  }
  const TransformerOptions options = transformer_options(config);
  AttentionCall call;
  call.batch = config.integer("train", "micro_batch");
  call.length = config.integer("data", "seq_len");
  call.heads = options.shape.heads;
  call.kv_heads = options.shape.kv_heads > 0 ? options.shape.kv_heads : options.shape.heads;
  call.head_dim = options.shape.head_dim();
  call.dtype = options.dtype == "bfloat16" ? torch::kBFloat16 : torch::kFloat32;
  const std::vector<std::string> kernels =
      choice == "auto" ? std::vector<std::string>{"cudnn", "flash", "efficient"} : std::vector<std::string>{choice};
  std::vector<KernelTime> times = time_attention_kernels(call, kernels);
  // Every rank takes the kernel of the least total time (a kernel one rank cannot run counts as endless).
  std::vector<double> totals(times.size());
  for (size_t i = 0; i < times.size(); ++i) totals[i] = times[i].ms < 0 ? 1e30 : times[i].ms;
  runtime.comm->all_reduce(zf_tensor_view{totals.data(), uint64_t(totals.size()), ZF_DTYPE_F64, ZF_DEVICE_CPU, 0, 0},
                           ZF_REDUCE_SUM, nullptr);
  size_t best = 0;
  for (size_t i = 1; i < totals.size(); ++i)
    if (totals[i] < totals[best]) best = i;
  ZF_REQUIRE(totals[best] < 1e29, "%s: model.attention = \"%s\": %s takes no attention of %lld heads of %lld (%lld "
             "key/value heads) in %s on this GPU; \"auto\" picks one that does", where.c_str(), choice.c_str(),
             choice.c_str(), (long long)call.heads, (long long)call.head_dim, (long long)call.kv_heads,
             options.dtype.c_str());
  put_attention_kernel_first(times[best].kernel);
  std::string line;
  for (const KernelTime &t : times)
    line += (line.empty() ? "" : ", ") + t.kernel + (t.ms < 0 ? " (cannot run it)" : format(" %.3f ms", t.ms));
  log_info(format("attention: %s first in SDPA's order (%s); forward + backward of %lld x %lld heads x %lld x %lld "
                  "in %s: %s", times[best].kernel.c_str(), choice == "auto" ? "the fastest, measured" : where.c_str(),
                  (long long)call.batch, (long long)call.heads, (long long)call.length, (long long)call.head_dim,
                  options.dtype.c_str(), line.c_str()));
}

}  // namespace zf
