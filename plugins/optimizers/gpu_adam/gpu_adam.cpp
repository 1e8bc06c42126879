// gpu_adam: AdamW (or Adam with L2 decay) on the GPU in one fused kernel per step over the
// flat buffers: fp32 master and moments on the device, gradients in the working precision, and
// the bf16/fp16 working parameters written in the same pass (ZF_CAP_LOW_PRECISION_OUT). The
// numbers follow adamw_ref; tests/gpu compares the two. Declines in a run without a GPU.
#include "adam_kernel.hpp"

#include <zf/zf_plugin.hpp>

#include <cuda_runtime.h>

#include <cmath>
#include <cstring>
#include <vector>

namespace {

struct GpuAdam {
  const zf_host *host = nullptr;
  bool decoupled = true;
  float *exp_avg = nullptr;
  float *exp_avg_sq = nullptr;
  bool owns_state = false;  // init_state allocated the moments; bind_state: the host owns them
  uint64_t numel = 0;
  // The range table on the device, rebuilt when the ranges change (the first step, normally).
  std::vector<zf_optimizer_range> ranges;
  gpu_adam::Range *device_ranges = nullptr;
  uint64_t *device_first_tile = nullptr;
  uint64_t tile_count = 0;
};

GpuAdam &self_of(zf_object *object) { return *reinterpret_cast<GpuAdam *>(object); }

gpu_adam::Precision precision_of(zf_dtype dtype) {
  switch (dtype) {
    case ZF_DTYPE_F32: return gpu_adam::Precision::f32;
    case ZF_DTYPE_BF16: return gpu_adam::Precision::bf16;
    case ZF_DTYPE_F16: return gpu_adam::Precision::f16;
    default: return gpu_adam::Precision::none;
  }
}

zf_status create(const zf_host *host, const zf_config *config, zf_object **out, zf_error *error) {
  if (host->device != ZF_DEVICE_CUDA)
    return zf::fail(error, ZF_DECLINED, "this run computes on the CPU (run.device = \"cpu\")");
  return zf::guard(error, [&] {
    zf::Config cfg(host, config);
    auto *self = new GpuAdam();
    self->host = host;
    self->decoupled = cfg.boolean("adam_w_mode");
    *out = reinterpret_cast<zf_object *>(self);
  });
}

void destroy(zf_object *object) {
  GpuAdam &self = self_of(object);
  if (self.owns_state)
    for (void *pointer : {(void *)self.exp_avg, (void *)self.exp_avg_sq}) self.host->mem_free(self.host, pointer);
  for (void *pointer : {(void *)self.device_ranges, (void *)self.device_first_tile})
    self.host->mem_free(self.host, pointer);
  delete &self;
}

void *device_alloc(GpuAdam &self, uint64_t bytes, const char *tag, zf_error *error) {
  return self.host->mem_alloc(self.host, ZF_TIER_DEVICE, bytes, tag, error);
}

zf_status zero_moments(GpuAdam &self, uint64_t numel, zf_error *error) {
  auto stream = static_cast<cudaStream_t>(self.host->compute_stream);
  cudaError_t status = cudaMemsetAsync(self.exp_avg, 0, numel * 4, stream);
  if (status == cudaSuccess) status = cudaMemsetAsync(self.exp_avg_sq, 0, numel * 4, stream);
  if (status != cudaSuccess) return zf::fail(error, ZF_ERROR, "zeroing the moments: %s", cudaGetErrorString(status));
  self.numel = numel;
  return ZF_OK;
}

zf_status init_state(zf_object *object, uint64_t numel, zf_error *error) {
  GpuAdam &self = self_of(object);
  if (self.exp_avg) return zf::fail(error, ZF_ERROR_INVALID_ARGUMENT, "init_state called twice");
  self.owns_state = true;
  self.exp_avg = static_cast<float *>(device_alloc(self, numel * 4, "exp_avg", error));
  if (!self.exp_avg) return ZF_ERROR_OUT_OF_MEMORY;
  self.exp_avg_sq = static_cast<float *>(device_alloc(self, numel * 4, "exp_avg_sq", error));
  if (!self.exp_avg_sq) return ZF_ERROR_OUT_OF_MEMORY;
  return zero_moments(self, numel, error);
}

const char *const kStateNames[2] = {"exp_avg", "exp_avg_sq"};

// ABI 1.9: fp32 m and v an element.
zf_status estimate_memory(const zf_memory_shape *shape, zf_memory_estimate *estimate, zf_error *) {
  estimate->state = 8 * zf::shape_numel(*shape);
  return ZF_OK;
}

zf_status state_spec(zf_object *, uint32_t index, const char **name, zf_dtype *dtype, zf_error *) {
  if (index > 1) return ZF_DECLINED;
  *name = kStateNames[index];
  *dtype = ZF_DTYPE_F32;
  return ZF_OK;
}

// Host-owned moments: device views of numel fp32 elements each.
zf_status bind_state(zf_object *object, uint64_t numel, const zf_tensor_view *state, uint32_t count,
                     zf_error *error) {
  GpuAdam &self = self_of(object);
  // ABI 1.4: bound again (ZenFlow, at each selection), the new views replace the old ones.
  if (self.owns_state) return zf::fail(error, ZF_ERROR_INVALID_ARGUMENT, "bind_state after init_state");
  if (count != 2) return zf::fail(error, ZF_ERROR_INVALID_ARGUMENT, "bind_state got %u views; gpu_adam keeps 2", count);
  for (uint32_t i = 0; i < 2; ++i)
    if (state[i].numel != numel || state[i].dtype != ZF_DTYPE_F32 || state[i].device != ZF_DEVICE_CUDA)
      return zf::fail(error, ZF_ERROR_INVALID_ARGUMENT, "state view '%s' must be %llu fp32 elements on the GPU",
                      kStateNames[i], (unsigned long long)numel);
  self.exp_avg = static_cast<float *>(state[0].data);
  self.exp_avg_sq = static_cast<float *>(state[1].data);
  return zero_moments(self, numel, error);
}

// Uploads the range table and its tile prefix when the ranges differ from the last step's.
// Waits for the copy on the step's stream only (the host vectors are freed afterwards).
zf_status upload_ranges(GpuAdam &self, const zf_optimizer_step_args *args, zf_error *error) {
  const uint32_t count = args->range_count;
  if (self.device_ranges && count == self.ranges.size() &&
      std::memcmp(self.ranges.data(), args->ranges, count * sizeof(zf_optimizer_range)) == 0)
    return ZF_OK;
  std::vector<gpu_adam::Range> ranges(count);
  std::vector<uint64_t> first_tile(count + 1, 0);
  for (uint32_t r = 0; r < count; ++r) {
    const zf_optimizer_range &range = args->ranges[r];
    if (range.group >= args->group_count || range.end > args->params.numel || range.begin > range.end)
      return zf::fail(error, ZF_ERROR_INVALID_ARGUMENT, "range %u is out of bounds", r);
    ranges[r] = gpu_adam::Range{range.begin, range.end, range.group, 0};
    first_tile[r + 1] = first_tile[r] + (range.end - range.begin + gpu_adam::kTile - 1) / gpu_adam::kTile;
  }
  self.host->mem_free(self.host, self.device_ranges);
  self.host->mem_free(self.host, self.device_first_tile);
  self.device_ranges = nullptr;
  self.device_first_tile = nullptr;
  self.device_ranges = static_cast<gpu_adam::Range *>(device_alloc(self, (count + 1) * sizeof(gpu_adam::Range), "ranges", error));
  if (!self.device_ranges) return ZF_ERROR_OUT_OF_MEMORY;
  self.device_first_tile = static_cast<uint64_t *>(device_alloc(self, (count + 1) * sizeof(uint64_t), "tiles", error));
  if (!self.device_first_tile) return ZF_ERROR_OUT_OF_MEMORY;
  auto stream = static_cast<cudaStream_t>(args->stream);
  cudaError_t status = cudaMemcpyAsync(self.device_ranges, ranges.data(), count * sizeof(gpu_adam::Range),
                                       cudaMemcpyHostToDevice, stream);
  if (status == cudaSuccess)
    status = cudaMemcpyAsync(self.device_first_tile, first_tile.data(), (count + 1) * sizeof(uint64_t),
                             cudaMemcpyHostToDevice, stream);
  if (status == cudaSuccess) status = cudaStreamSynchronize(stream);
  if (status != cudaSuccess) return zf::fail(error, ZF_ERROR, "uploading the ranges: %s", cudaGetErrorString(status));
  self.ranges.assign(args->ranges, args->ranges + count);
  self.tile_count = first_tile[count];
  return ZF_OK;
}

zf_status step(zf_object *object, const zf_optimizer_step_args *args, zf_error *error) {
  GpuAdam &self = self_of(object);
  if (args->params.dtype != ZF_DTYPE_F32 || args->params.device != ZF_DEVICE_CUDA)
    return zf::fail(error, ZF_ERROR_UNSUPPORTED, "needs fp32 master parameters on the GPU");
  if (args->grads.device != ZF_DEVICE_CUDA || precision_of(args->grads.dtype) == gpu_adam::Precision::none)
    return zf::fail(error, ZF_ERROR_UNSUPPORTED, "needs fp32, bf16 or fp16 gradients on the GPU");
  if (args->params.numel > self.numel || args->grads.numel != args->params.numel)
    return zf::fail(error, ZF_ERROR_INVALID_ARGUMENT, "views of %llu params / %llu grads for state of %llu",
                    (unsigned long long)args->params.numel, (unsigned long long)args->grads.numel,
                    (unsigned long long)self.numel);
  if (args->step < 1) return zf::fail(error, ZF_ERROR_INVALID_ARGUMENT, "step must start at 1");
  if (args->group_count > gpu_adam::kMaxGroups)
    return zf::fail(error, ZF_ERROR_UNSUPPORTED, "%u parameter groups; at most %u", args->group_count,
                    gpu_adam::kMaxGroups);
  gpu_adam::Launch launch{};
  if (args->params_out.data) {
    launch.out_precision = precision_of(args->params_out.dtype);
    if (args->params_out.device != ZF_DEVICE_CUDA || args->params_out.numel != args->params.numel ||
        (launch.out_precision != gpu_adam::Precision::bf16 && launch.out_precision != gpu_adam::Precision::f16))
      return zf::fail(error, ZF_ERROR_INVALID_ARGUMENT, "params_out must be a bf16 or fp16 GPU view as long as params");
    launch.params_out = args->params_out.data;
  }
  if (args->range_count == 0) return ZF_OK;
  zf_status status = upload_ranges(self, args, error);
  if (status != ZF_OK) return status;
  for (uint32_t i = 0; i < args->group_count; ++i) {
    const zf_optimizer_group &g = args->groups[i];
    double bias_correction1 = 1.0 - std::pow(double(g.beta1), double(args->step));
    double bias_correction2 = 1.0 - std::pow(double(g.beta2), double(args->step));
    launch.groups[i] = gpu_adam::Group{g.lr, g.beta1, g.beta2, g.eps, g.weight_decay,
                                       g.lr / float(bias_correction1), std::sqrt(float(bias_correction2))};
  }
  launch.params = static_cast<float *>(args->params.data);
  launch.grads = args->grads.data;
  launch.grad_precision = precision_of(args->grads.dtype);
  launch.exp_avg = self.exp_avg;
  launch.exp_avg_sq = self.exp_avg_sq;
  launch.ranges = self.device_ranges;
  launch.first_tile = self.device_first_tile;
  launch.range_count = uint32_t(self.ranges.size());
  launch.tile_count = self.tile_count;
  launch.grad_scale = args->grad_scale;
  launch.decoupled = self.decoupled;
  launch.stream = args->stream;
  if (const char *failure = gpu_adam::launch_adam(launch))
    return zf::fail(error, ZF_ERROR, "kernel launch: %s", failure);
  return ZF_OK;
}

zf_status state_tensor(zf_object *object, uint32_t index, const char **name, zf_tensor_view *view, zf_error *) {
  GpuAdam &self = self_of(object);
  if (index > 1) return ZF_DECLINED;
  *name = index == 0 ? "exp_avg" : "exp_avg_sq";
  *view = zf_tensor_view{index == 0 ? self.exp_avg : self.exp_avg_sq, self.numel, ZF_DTYPE_F32, ZF_DEVICE_CUDA,
                         self.host->device_index, 0};
  return ZF_OK;
}

const zf_param_decl params[] = {
    zf::param_bool("adam_w_mode", "true", "decoupled weight decay (AdamW); false = Adam with L2 decay"),
};

// No submit/wait: step only enqueues the kernel, which is stream-ordered already.
const zf_optimizer_api api = {.struct_size = sizeof(zf_optimizer_api),
                              .create = create,
                              .destroy = destroy,
                              .init_state = init_state,
                              .step = step,
                              .state_tensor = state_tensor,
                              .state_spec = state_spec,
                              .bind_state = bind_state,
                              .estimate_memory = estimate_memory};

const zf_descriptor descriptor = {
    sizeof(zf_descriptor), ZF_ABI_VERSION, "gpu_adam", ZF_KIND_OPTIMIZER,
    sizeof params / sizeof params[0], params, "0.1.0",
    "fused AdamW/Adam on the GPU (fp32 master and moments, bf16/fp16 params written in the same pass)",
    ZF_CAP_CUDA | ZF_CAP_LOW_PRECISION_OUT, &api,
};

}  // namespace

ZF_PLUGIN_DEFINE(descriptor)
