// zero0: plain data parallelism. Every rank holds all parameters, gradients and optimizer state;
// after the last micro-step the gradients are summed over ranks (all-reduce, in buckets), and
// every rank applies the same update.
#include <zf/zf_plugin.hpp>

#include <algorithm>

namespace {

struct Zero0 {
  const zf_host *host;
  uint64_t bucket_elements;  // 0 = one collective over the whole buffer
};

zf_status create(const zf_host *host, const zf_config *config, zf_object **out, zf_error *error) {
  return zf::guard(error, [&] {
    zf::Config cfg(host, config);
    double bucket_mb = cfg.real("bucket_mb");
    auto *self = new Zero0{host, uint64_t(bucket_mb * 1024 * 1024 / 4)};
    *out = reinterpret_cast<zf_object *>(self);
  });
}

void destroy(zf_object *object) { delete reinterpret_cast<Zero0 *>(object); }

zf_status plan(zf_object *, const zf_layout *layout, zf_stage_plan *plan, zf_error *) {
  plan->shard_begin = 0;
  plan->shard_end = layout->numel;
  plan->padded_numel = 0;
  return ZF_OK;
}

zf_status reduce_gradients(zf_object *object, const zf_step_buffers *buffers, zf_error *error) {
  auto *self = reinterpret_cast<Zero0 *>(object);
  if (self->host->world_size == 1) return ZF_OK;
  const zf_tensor_view &grads = buffers->grads;
  uint64_t bucket = self->bucket_elements ? self->bucket_elements : grads.numel;
  size_t element = zf::dtype_size(grads.dtype);
  for (uint64_t begin = 0; begin < grads.numel; begin += bucket) {
    zf_tensor_view part = grads;
    part.data = static_cast<char *>(grads.data) + begin * element;
    part.numel = std::min(bucket, grads.numel - begin);
    zf_status status = self->host->all_reduce(self->host, part, ZF_REDUCE_SUM, buffers->stream, error);
    if (status != ZF_OK) return status;
  }
  return ZF_OK;
}

const zf_param_decl params[] = {
    {"bucket_mb", ZF_PARAM_FLOAT, ZF_PARAM_HAS_MIN, "0",
     "all-reduce gradients in buckets of this many MiB (0 = one collective)", 0, 0, nullptr, nullptr},
};

const zf_stage_api api = {
    sizeof(zf_stage_api), create, destroy, plan,
    nullptr, nullptr, nullptr, nullptr,  // no block hooks: every rank holds every parameter
    reduce_gradients,
    nullptr,  // nothing to gather: every rank updated all parameters
};

const zf_descriptor descriptor = {
    sizeof(zf_descriptor), ZF_ABI_VERSION, "zero0", ZF_KIND_STAGE,
    sizeof params / sizeof params[0], params, "0.1.0",
    "data parallel: gradients all-reduced, every rank holds everything",
    ZF_CAP_CPU | ZF_CAP_CUDA, &api,
};

}  // namespace

ZF_PLUGIN_DEFINE(descriptor)
