// adamw_ref: plain scalar AdamW (and Adam with L2 decay), one element at a time, in the order of
// operations torch.optim.AdamW uses. It is the numerical reference that faster optimizers are
// tested against, not a fast path.
#include <zf/zf_plugin.hpp>

#include <cmath>

namespace {

struct AdamwRef {
  const zf_host *host;
  bool decoupled;  // AdamW (true) or Adam with L2 weight decay (false)
  float *exp_avg = nullptr;
  float *exp_avg_sq = nullptr;
  uint64_t numel = 0;
};

AdamwRef &self_of(zf_object *object) { return *reinterpret_cast<AdamwRef *>(object); }

zf_status create(const zf_host *host, const zf_config *config, zf_object **out, zf_error *error) {
  return zf::guard(error, [&] {
    zf::Config cfg(host, config);
    *out = reinterpret_cast<zf_object *>(new AdamwRef{host, cfg.boolean("adam_w_mode")});
  });
}

void destroy(zf_object *object) {
  AdamwRef &self = self_of(object);
  self.host->mem_free(self.host, self.exp_avg);
  self.host->mem_free(self.host, self.exp_avg_sq);
  delete &self;
}

zf_status init_state(zf_object *object, uint64_t numel, zf_error *error) {
  AdamwRef &self = self_of(object);
  if (self.exp_avg) return zf::fail(error, ZF_ERROR_INVALID_ARGUMENT, "init_state called twice");
  self.exp_avg = static_cast<float *>(self.host->mem_alloc(self.host, ZF_TIER_HOST, numel * 4, "exp_avg", error));
  if (!self.exp_avg) return ZF_ERROR_OUT_OF_MEMORY;
  self.exp_avg_sq = static_cast<float *>(self.host->mem_alloc(self.host, ZF_TIER_HOST, numel * 4, "exp_avg_sq", error));
  if (!self.exp_avg_sq) return ZF_ERROR_OUT_OF_MEMORY;
  for (uint64_t i = 0; i < numel; ++i) self.exp_avg[i] = self.exp_avg_sq[i] = 0.0f;
  self.numel = numel;
  return ZF_OK;
}

void store(const zf_tensor_view &out, uint64_t i, float value) {
  auto *data = static_cast<uint16_t *>(out.data);
  data[i] = out.dtype == ZF_DTYPE_BF16 ? zf::float_to_bf16(value) : zf::float_to_f16(value);
}

zf_status step(zf_object *object, const zf_optimizer_step_args *args, zf_error *error) {
  AdamwRef &self = self_of(object);
  if (args->params.dtype != ZF_DTYPE_F32 || args->params.device != ZF_DEVICE_CPU)
    return zf::fail(error, ZF_ERROR_UNSUPPORTED, "needs fp32 master parameters on the CPU");
  if (args->params.numel > self.numel || args->grads.numel != args->params.numel)
    return zf::fail(error, ZF_ERROR_INVALID_ARGUMENT, "views of %llu params / %llu grads for state of %llu",
                    (unsigned long long)args->params.numel, (unsigned long long)args->grads.numel,
                    (unsigned long long)self.numel);
  if (args->step < 1) return zf::fail(error, ZF_ERROR_INVALID_ARGUMENT, "step must start at 1");
  bool low_out = args->params_out.data != nullptr;
  auto *p = static_cast<float *>(args->params.data);
  for (uint32_t r = 0; r < args->range_count; ++r) {
    const zf_optimizer_range &range = args->ranges[r];
    if (range.group >= args->group_count || range.end > args->params.numel || range.begin > range.end)
      return zf::fail(error, ZF_ERROR_INVALID_ARGUMENT, "range %u is out of bounds", r);
    const zf_optimizer_group &g = args->groups[range.group];
    const float bias_correction1 = float(1.0 - std::pow(double(g.beta1), double(args->step)));
    const float bias_correction2 = float(1.0 - std::pow(double(g.beta2), double(args->step)));
    const float step_size = g.lr / bias_correction1;
    const float bias_correction2_sqrt = std::sqrt(bias_correction2);
    for (uint64_t i = range.begin; i < range.end; ++i) {
      float grad = zf::load_float(args->grads, i) * args->grad_scale;
      float param = p[i];
      if (self.decoupled) param *= 1.0f - g.lr * g.weight_decay;
      else grad += g.weight_decay * param;
      float m = self.exp_avg[i] + (1.0f - g.beta1) * (grad - self.exp_avg[i]);
      float v = self.exp_avg_sq[i] * g.beta2 + (1.0f - g.beta2) * grad * grad;
      float denom = std::sqrt(v) / bias_correction2_sqrt + g.eps;
      param -= step_size * (m / denom);
      self.exp_avg[i] = m;
      self.exp_avg_sq[i] = v;
      p[i] = param;
      if (low_out) store(args->params_out, i, param);
    }
  }
  return ZF_OK;
}

zf_status state_tensor(zf_object *object, uint32_t index, const char **name, zf_tensor_view *view, zf_error *) {
  AdamwRef &self = self_of(object);
  if (index > 1) return ZF_DECLINED;
  *name = index == 0 ? "exp_avg" : "exp_avg_sq";
  *view = zf_tensor_view{index == 0 ? self.exp_avg : self.exp_avg_sq, self.numel, ZF_DTYPE_F32, ZF_DEVICE_CPU, 0, 0};
  return ZF_OK;
}

const zf_param_decl params[] = {
    zf::param_bool("adam_w_mode", "true", "decoupled weight decay (AdamW); false = Adam with L2 decay"),
};

// ABI 1.9: fp32 m and v an element.
zf_status estimate_memory(const zf_memory_shape *shape, zf_memory_estimate *estimate, zf_error *) {
  estimate->state = 8 * zf::shape_numel(*shape);
  return ZF_OK;
}

// Synchronous only (no submit/wait): the host calls step.
const zf_optimizer_api api = {.struct_size = sizeof(zf_optimizer_api),
                              .create = create,
                              .destroy = destroy,
                              .init_state = init_state,
                              .step = step,
                              .state_tensor = state_tensor,
                              .estimate_memory = estimate_memory};

const zf_descriptor descriptor = {
    sizeof(zf_descriptor), ZF_ABI_VERSION, "adamw_ref", ZF_KIND_OPTIMIZER,
    sizeof params / sizeof params[0], params, "0.1.0",
    "scalar reference AdamW/Adam (fp32 master and moments), the numerical reference",
    ZF_CAP_CPU | ZF_CAP_LOW_PRECISION_OUT, &api,
};

}  // namespace

ZF_PLUGIN_DEFINE(descriptor)
