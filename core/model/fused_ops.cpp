#include "model/fused_ops.hpp"

#include "runtime/error.hpp"

#if ZF_WITH_CUDA
#include <c10/cuda/CUDAStream.h>
#endif

#include <optional>

namespace zf {
namespace {

// libtorch's ops, as transformers composes them. ATen's rms_norm without a weight is the same ops as
// Hugging Face's on the CPU (the same bits) and one fused kernel each way on a GPU.
torch::Tensor composed_rms_norm(const torch::Tensor &x, const torch::Tensor &weight, NormWeight mode, double eps) {
  switch (mode) {
    case NormWeight::cast_then_scale:
      return weight * at::rms_norm(x, {x.size(-1)}, std::nullopt, eps);
    case NormWeight::scale_then_cast:
      return (weight.to(torch::kFloat32) * at::rms_norm(x.to(torch::kFloat32), {x.size(-1)}, std::nullopt, eps))
          .to(x.scalar_type());
    case NormWeight::one_plus:
      return (at::rms_norm(x.to(torch::kFloat32), {x.size(-1)}, std::nullopt, eps) * (1.0 + weight.to(torch::kFloat32)))
          .to(x.scalar_type());
  }
  return x;
}

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

bool same_kind(const torch::Tensor &x, const torch::Tensor &other) {
  return other.defined() && other.device() == x.device() && other.scalar_type() == x.scalar_type();
}
const void *data(const torch::Tensor &t) { return t.defined() ? t.const_data_ptr() : nullptr; }
// The launch's Place set to x's.
template <class Launch> Launch placed(const torch::Tensor &x) {
  Launch a;
  static_cast<kernels::Place &>(a) = kernel_place(x);
  return a;
}

// The RMSNorm of x (of residual + branch when there is a branch): saves the normalised rows and
// their rstd; returns {y} or {y, sum}. The branch is an optional, not an undefined tensor: autograd
// records every tensor argument's device, and an undefined tensor has none.
struct FusedRmsNorm : torch::autograd::Function<FusedRmsNorm> {
  static variable_list forward(AutogradContext *ctx, const torch::Tensor &x, const std::optional<torch::Tensor> &branch,
                               const torch::Tensor &weight, int64_t mode, double eps) {
    const torch::Tensor input = x.contiguous(), addend = branch ? branch->contiguous() : torch::Tensor();
    const int64_t cols = input.size(-1), rows = cols > 0 ? input.numel() / cols : 0;
    torch::Tensor y = torch::empty_like(input), sum = addend.defined() ? torch::empty_like(input) : torch::Tensor();
    torch::Tensor rstd = torch::empty({rows}, input.options().dtype(torch::kFloat32));
    auto a = placed<kernels::NormLaunch>(input);
    a.x = data(input), a.branch = data(addend), a.sum = sum.defined() ? sum.data_ptr() : nullptr;
    a.weight = data(weight), a.y = y.data_ptr(), a.rstd = rstd.data_ptr<float>();
    a.rows = rows, a.cols = cols, a.mode = kernels::NormMode(mode), a.eps = float(eps);
    a.bf16 = input.scalar_type() == torch::kBFloat16;
    check_kernel(kernels::rms_norm_forward(a), "RMSNorm");
    ctx->saved_data["mode"] = mode;
    ctx->saved_data["added"] = addend.defined();
    if (sum.defined()) {
      ctx->save_for_backward({sum, weight, rstd});
      return {y, sum};
    }
    ctx->save_for_backward({input, weight, rstd});
    return {y};
  }

  static variable_list backward(AutogradContext *ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const torch::Tensor &h = saved[0], &weight = saved[1], &rstd = saved[2];
    const bool added = ctx->saved_data["added"].toBool();
    const int64_t cols = h.size(-1), rows = cols > 0 ? h.numel() / cols : 0;
    torch::Tensor dy = grads[0].defined() ? grads[0].contiguous() : torch::zeros_like(h);
    torch::Tensor dsum = added && grads[1].defined() ? grads[1].contiguous() : torch::Tensor();
    torch::Tensor dx = torch::empty_like(h);
    // needs_input_grad counts the tensor inputs given: without a branch the weight is the second.
    const bool weight_grad = ctx->needs_input_grad(added ? 2 : 1);
    const int64_t parts = kernels::weight_gradient_parts(rows);
    torch::Tensor dweight_parts = weight_grad ? torch::empty({parts, cols}, rstd.options()) : torch::Tensor();
    auto a = placed<kernels::NormBackwardLaunch>(h);
    a.dy = data(dy), a.dsum = data(dsum), a.h = data(h), a.weight = data(weight), a.rstd = rstd.const_data_ptr<float>();
    a.dx = dx.data_ptr(), a.dweight_parts = weight_grad ? dweight_parts.data_ptr<float>() : nullptr, a.parts = parts;
    a.rows = rows, a.cols = cols, a.mode = kernels::NormMode(ctx->saved_data["mode"].toInt());
    a.bf16 = h.scalar_type() == torch::kBFloat16;
    check_kernel(kernels::rms_norm_backward(a), "RMSNorm backward");
    torch::Tensor dweight = weight_grad ? dweight_parts.sum(0).to(weight.scalar_type()) : torch::Tensor();
    return {dx, added ? dx : torch::Tensor(), dweight, {}, {}};
  }
};

// A view whose rows of `cols` elements sit `stride` apart (the halves of one projection): its row
// stride, or 0 when its layout is not that.
int64_t row_stride(const torch::Tensor &t) {
  const int64_t dims = t.dim();
  if (dims == 0 || t.stride(dims - 1) != 1) return 0;
  if (dims == 1) return t.size(0);
  for (int64_t d = 0; d + 2 < dims; ++d)
    if (t.size(d) > 1 && t.stride(d) != t.stride(d + 1) * t.size(d + 1)) return 0;
  return t.stride(dims - 2);
}

struct FusedGlu : torch::autograd::Function<FusedGlu> {
  static torch::Tensor forward(AutogradContext *ctx, const torch::Tensor &gate, const torch::Tensor &up, bool gelu) {
    const torch::Tensor g = row_stride(gate) ? gate : gate.contiguous(), u = row_stride(up) ? up : up.contiguous();
    torch::Tensor out = torch::empty(g.sizes(), g.options());
    kernels::GluLaunch a = launch(g, u, gelu);
    a.out = out.data_ptr();
    check_kernel(kernels::glu_forward(a), "gated activation");
    ctx->save_for_backward({g, u});
    ctx->saved_data["gelu"] = gelu;
    return out;
  }

  static variable_list backward(AutogradContext *ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    torch::Tensor dout = grads[0].contiguous();
    torch::Tensor dgate = torch::empty(saved[0].sizes(), dout.options()), dup = torch::empty_like(dgate);
    kernels::GluLaunch a = launch(saved[0], saved[1], ctx->saved_data["gelu"].toBool());
    a.dout = data(dout), a.dgate = dgate.data_ptr(), a.dup = dup.data_ptr();
    check_kernel(kernels::glu_backward(a), "gated activation backward");
    return {dgate, dup, {}};
  }

  static kernels::GluLaunch launch(const torch::Tensor &g, const torch::Tensor &u, bool gelu) {
    auto a = placed<kernels::GluLaunch>(g);
    a.gate = data(g), a.up = data(u), a.gate_row_stride = row_stride(g), a.up_row_stride = row_stride(u);
    a.cols = g.size(-1), a.rows = a.cols > 0 ? g.numel() / a.cols : 0;
    a.gelu = gelu, a.bf16 = g.scalar_type() == torch::kBFloat16;
    return a;
  }
};

struct FusedRope : torch::autograd::Function<FusedRope> {
  static torch::Tensor forward(AutogradContext *ctx, const torch::Tensor &x, const torch::Tensor &cos,
                               const torch::Tensor &signed_sin) {
    ctx->save_for_backward({cos, signed_sin});
    return turn(x.stride(3) == 1 ? x : x.contiguous(), cos, signed_sin, 1.f);
  }

  static variable_list backward(AutogradContext *ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const torch::Tensor &dy = grads[0];
    return {turn(dy.stride(3) == 1 ? dy : dy.contiguous(), saved[0], saved[1], -1.f), {}, {}};
  }

  // out = x * cos + partner(x) * sign * signed_sin, in x's layout.
  static torch::Tensor turn(const torch::Tensor &x, const torch::Tensor &cos, const torch::Tensor &sin, float sign) {
    torch::Tensor out = torch::empty_like(x);
    auto a = placed<kernels::RopeLaunch>(x);
    a.x = data(x), a.out = out.data_ptr(), a.cos = data(cos), a.signed_sin = data(sin);
    a.batch = x.size(0), a.heads = x.size(1), a.length = x.size(2), a.head_dim = x.size(3), a.rotated = cos.size(1);
    for (int d = 0; d < 3; ++d) a.x_strides[d] = x.stride(d), a.out_strides[d] = out.stride(d);
    a.sign = sign, a.bf16 = x.scalar_type() == torch::kBFloat16;
    check_kernel(kernels::rope(a), "RoPE");
    return out;
  }
};
}  // namespace

bool fused_kernels_built() {
#if ZF_WITH_CUDA
  return true;
#else
  return false;
#endif
}

bool kernels_take(const torch::Tensor &x, FusedKernels fused) {
  const bool dtype = x.scalar_type() == torch::kBFloat16 || x.scalar_type() == torch::kFloat32;
  if (!dtype || fused == FusedKernels::off) return false;
  if (x.is_cuda()) return fused_kernels_built();
  return x.is_cpu() && fused == FusedKernels::always;
}

kernels::Place kernel_place(const torch::Tensor &x) {
  kernels::Place place;
#if ZF_WITH_CUDA
  if (x.is_cuda()) place.gpu = true, place.stream = c10::cuda::getCurrentCUDAStream(x.device().index()).stream();
#else
  (void)x;
#endif
  return place;
}

void check_kernel(const char *error, const char *what) {
  ZF_REQUIRE(error == nullptr, "zfcore's fused %s kernel failed: %s (model.fused = false runs libtorch's ops)", what,
             error);
}

torch::Tensor rms_norm(const torch::Tensor &x, const torch::Tensor &weight, NormWeight mode, double eps, FusedKernels fused) {
  if (kernels_take(x, fused) && same_kind(x, weight) && weight.is_contiguous() && weight.numel() == x.size(-1))
    return FusedRmsNorm::apply(x, std::optional<torch::Tensor>(), weight, int64_t(mode), eps)[0];
  return composed_rms_norm(x, weight, mode, eps);
}

std::pair<torch::Tensor, torch::Tensor> add_rms_norm(const torch::Tensor &residual, const torch::Tensor &branch,
                                                     const torch::Tensor &weight, NormWeight mode, double eps,
                                                     FusedKernels fused) {
  if (kernels_take(residual, fused) && same_kind(residual, branch) && same_kind(residual, weight) &&
      residual.sizes() == branch.sizes() && weight.is_contiguous() && weight.numel() == residual.size(-1)) {
    variable_list out = FusedRmsNorm::apply(residual, std::optional<torch::Tensor>(branch), weight, int64_t(mode), eps);
    return {out[1], out[0]};
  }
  torch::Tensor sum = residual + branch;
  return {sum, rms_norm(sum, weight, mode, eps, fused)};
}

torch::Tensor gated_activation(const torch::Tensor &gate, const torch::Tensor &up, bool gelu, FusedKernels fused) {
  if (kernels_take(gate, fused) && same_kind(gate, up) && gate.sizes() == up.sizes() && gate.dim() >= 1)
    return FusedGlu::apply(gate, up, gelu);
  return (gelu ? torch::gelu(gate, "tanh") : torch::silu(gate)) * up;
}

torch::Tensor rotate(const torch::Tensor &x, const RopeTables &tables, FusedKernels fused) {
  const torch::Tensor &cos = tables.cos, &sin = tables.signed_sin;
  if (kernels_take(x, fused) && x.dim() == 4 && same_kind(x, cos) && same_kind(x, sin) && cos.dim() == 2 &&
      cos.size(0) == x.size(2) && cos.size(1) <= x.size(3) && cos.size(1) % 2 == 0 && cos.is_contiguous() &&
      sin.sizes() == cos.sizes() && sin.is_contiguous())
    return FusedRope::apply(x, cos, sin);
  return apply_rope(x, tables);
}

}  // namespace zf
