#include "model/fused_loss.hpp"

#include "model/fused_ops.hpp"
#include "model/model.hpp"

#include <algorithm>

namespace zf {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// A product of low-precision operands with a float32 result: on a GPU cuBLAS writes its float32
// accumulator (the slices' sum then rounds once); elsewhere the product rounds to the operands' dtype.
torch::Tensor mm_float(const torch::Tensor &a, const torch::Tensor &b) {
  if (a.is_cuda() && a.scalar_type() != torch::kFloat32) return at::mm(a, b, at::kFloat);
  return at::mm(a, b).to(torch::kFloat32);
}

// The launch of the chunk's softmax kernel (fused_kernels.hpp), which reads the logits once
// (forward) or reads them and writes their gradient in their place (backward).
kernels::LossLaunch loss_launch(torch::Tensor &logits, const torch::Tensor &targets, int64_t first, double divisor,
                                double softcap) {
  kernels::LossLaunch a;
  static_cast<kernels::Place &>(a) = kernel_place(logits);
  a.logits = logits.data_ptr(), a.targets = targets.const_data_ptr<int64_t>(), a.first = first;
  a.rows = logits.size(0), a.cols = logits.size(1), a.divisor = float(divisor), a.softcap = float(softcap);
  a.bf16 = logits.scalar_type() == torch::kBFloat16;
  return a;
}

struct FusedLinearCrossEntropy : torch::autograd::Function<FusedLinearCrossEntropy> {
  static torch::Tensor forward(AutogradContext *ctx, const torch::Tensor &x, const torch::Tensor &weight,
                               const torch::Tensor &targets, double divisor, double softcap, int64_t chunk_bytes,
                               bool kernels) {
    const LogitsTransform transform{divisor, softcap};
    const int64_t rows = x.size(0);
    const auto fp32 = x.options().dtype(torch::kFloat32);
    torch::Tensor counted = targets.ne(kIgnoreIndex);
    torch::Tensor lse = torch::empty({rows}, fp32);  // each row's log-sum-exp: all the backward needs
    torch::Tensor total = torch::zeros({}, fp32), zero = torch::zeros({}, fp32);
    const int64_t step = loss_chunk_rows(weight.size(0), rows, chunk_bytes);
    for (int64_t r0 = 0; r0 < rows; r0 += step) {
      const int64_t n = std::min(step, rows - r0);
      if (kernels) {
        torch::Tensor raw = torch::linear(x.narrow(0, r0, n), weight).contiguous(), row_loss = torch::empty({n}, fp32);
        kernels::LossLaunch a = loss_launch(raw, targets.narrow(0, r0, n), 0, divisor, softcap);
        a.lse = lse.narrow(0, r0, n).data_ptr<float>(), a.loss = row_loss.data_ptr<float>();
        check_kernel(kernels::loss_forward(a), "loss");
        total.add_(row_loss.sum());
        continue;
      }
      torch::Tensor z = output_logits(x.narrow(0, r0, n), weight, transform).to(torch::kFloat32);
      torch::Tensor row_lse = torch::logsumexp(z, 1);
      lse.narrow(0, r0, n).copy_(row_lse);
      torch::Tensor picked = z.gather(1, targets.narrow(0, r0, n).clamp_min(0).unsqueeze(1)).squeeze(1);
      total.add_(torch::where(counted.narrow(0, r0, n), row_lse - picked, zero).sum());
    }
    // Dividing by at least one keeps a micro-batch without counted positions at loss 0, not NaN.
    torch::Tensor count = counted.sum().clamp_min(1).to(torch::kFloat32);
    ctx->save_for_backward({x, weight, targets, lse, count});
    ctx->saved_data["divisor"] = divisor;
    ctx->saved_data["softcap"] = softcap;
    ctx->saved_data["chunk_bytes"] = chunk_bytes;
    ctx->saved_data["kernels"] = kernels;
    return total / count;
  }

  static variable_list backward(AutogradContext *ctx, variable_list grad_outputs) {
    const variable_list saved = ctx->get_saved_variables();
    const torch::Tensor &x = saved[0], &weight = saved[1], &targets = saved[2], &lse = saved[3];
    const double divisor = ctx->saved_data["divisor"].toDouble(), softcap = ctx->saved_data["softcap"].toDouble();
    const bool need_x = ctx->needs_input_grad(0), need_weight = ctx->needs_input_grad(1);
    const bool kernels = ctx->saved_data["kernels"].toBool();
    const int64_t rows = x.size(0), vocab = weight.size(0);
    // d loss / d logit = (softmax - one_hot(target)) * grad / count on counted rows, 0 elsewhere.
    torch::Tensor row_scale = torch::where(targets.ne(kIgnoreIndex), grad_outputs[0].to(torch::kFloat32) / saved[4],
                                           torch::zeros({}, lse.options()));
    torch::Tensor grad_x = need_x ? torch::zeros({rows, x.size(1)}, lse.options()) : torch::Tensor();
    torch::Tensor grad_weight = need_weight ? torch::empty_like(weight) : torch::Tensor();
    const int64_t step = loss_chunk_rows(rows, vocab, ctx->saved_data["chunk_bytes"].toInt());
    for (int64_t v0 = 0; v0 < vocab; v0 += step) {
      const int64_t n = std::min(step, vocab - v0);
      torch::Tensor slice = weight.narrow(0, v0, n);
      torch::Tensor raw = torch::linear(x, slice).contiguous();  // [rows, n] in the compute dtype
      const torch::Tensor grad = kernels ? logits_grad_kernel(raw, targets, v0, lse, row_scale, divisor, softcap)
                                                 : logits_grad(raw, targets, v0, lse, row_scale, divisor, softcap);
      if (need_x) grad_x.add_(mm_float(grad, slice));
      if (need_weight) grad_weight.narrow(0, v0, n).copy_(at::mm(grad.t(), x));
    }
    return {need_x ? grad_x.to(x.scalar_type()) : torch::Tensor(), grad_weight, {}, {}, {}, {}, {}};
  }

  // The gradient of a slice of raw logits (vocabulary entries v0, v0 + 1, ...) in their dtype:
  // (softmax - one_hot(target)) * row_scale, through the family's transform.
  static torch::Tensor logits_grad(const torch::Tensor &raw, const torch::Tensor &targets, int64_t v0,
                                   const torch::Tensor &lse, const torch::Tensor &row_scale, double divisor,
                                   double softcap) {
    const int64_t n = raw.size(1);
    torch::Tensor grad = output_logits_transform(raw, divisor, softcap).to(torch::kFloat32);
    grad = (grad - lse.unsqueeze(1)).exp_();  // this slice of each row's softmax
    torch::Tensor local = targets - v0;
    torch::Tensor inside = local.ge(0).logical_and(local.lt(n));
    grad.scatter_add_(1, local.clamp(0, n - 1).unsqueeze(1), inside.to(torch::kFloat32).neg().unsqueeze(1));
    grad.mul_(row_scale.unsqueeze(1));
    if (softcap > 0) {  // d(c tanh(u / c)) / du = 1 - tanh(u / c)^2, u = raw / divisor
      torch::Tensor t = torch::tanh(raw.to(torch::kFloat32) / divisor / softcap);
      grad.mul_(1 - t * t);
    }
    if (divisor != 1) grad.div_(divisor);
    return grad.to(raw.scalar_type());
  }

  // The same in one kernel, written over raw.
  static torch::Tensor logits_grad_kernel(torch::Tensor &raw, const torch::Tensor &targets, int64_t v0,
                                          const torch::Tensor &lse, const torch::Tensor &row_scale, double divisor,
                                          double softcap) {
    kernels::LossLaunch a = loss_launch(raw, targets, v0, divisor, softcap);
    a.lse = const_cast<float *>(lse.const_data_ptr<float>()), a.row_scale = row_scale.const_data_ptr<float>();
    check_kernel(kernels::loss_backward(a), "loss backward");
    return raw;
  }

  static torch::Tensor output_logits_transform(const torch::Tensor &raw, double divisor, double softcap) {
    torch::Tensor logits = raw;
    if (divisor != 1) logits = logits / divisor;
    if (softcap > 0) logits = torch::tanh(logits / softcap) * softcap;
    return logits;
  }
};

}  // namespace

torch::Tensor output_logits(const torch::Tensor &x, const torch::Tensor &weight, LogitsTransform transform) {
  return FusedLinearCrossEntropy::output_logits_transform(torch::linear(x, weight), transform.divisor,
                                                          transform.softcap);
}

torch::Tensor fused_linear_cross_entropy(const torch::Tensor &x, const torch::Tensor &weight,
                                         const torch::Tensor &targets, LogitsTransform transform, int64_t chunk_bytes,
                                         FusedKernels fused) {
  return FusedLinearCrossEntropy::apply(x, weight, targets.contiguous(), transform.divisor, transform.softcap,
                                        chunk_bytes, kernels_take(x, fused));
}

}  // namespace zf
