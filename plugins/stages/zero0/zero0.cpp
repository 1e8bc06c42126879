// zero0: plain data parallelism. Every rank holds all parameters, gradients and optimizer state;
// the gradients are summed over ranks (all-reduce) in buckets of reduce_bucket_size elements (the
// unit and name of zero1-zero3 and DeepSpeed): with overlap_comm,
// each bucket as soon as the backward has finished its gradients (on a GPU, on the host's
// communication stream beside the backward of the blocks before), the rest after the backward.
// Every rank then applies the same update.
#include "../common/zero_estimate.hpp"

#include <memory>

namespace {

using namespace zf::zero;

struct Zero0 {
  const zf_host *host;
  uint64_t bucket_size;  // reduce_bucket_size: elements per all-reduce
  double bucket_mb;      // deprecated; > 0 overrides bucket_size (MiB of gradients)
  bool overlap;
  std::unique_ptr<Collectives> comm;     // made once the gradients' dtype is known
  std::unique_ptr<BackwardReducer> reducer;

  BackwardReducer &reducer_for(const zf_tensor_view &grads) {
    if (!reducer) {
      Knobs knobs;
      knobs.reduce_bucket_size = bucket_size;
      if (bucket_mb > 0)
        knobs.reduce_bucket_size = std::max<uint64_t>(1, uint64_t(bucket_mb * 1024 * 1024) / zf::dtype_size(grads.dtype));
      knobs.overlap_comm = overlap;
      comm = std::make_unique<Collectives>(host, grads.numel, knobs);
      reducer = std::make_unique<BackwardReducer>(host, *comm, knobs);
    }
    return *reducer;
  }
};

zf_status create(const zf_host *host, const zf_config *config, zf_object **out, zf_error *error) {
  if (zf_status status = require_abi_1_2(host, "zero0", error); status != ZF_OK) return status;
  return zf::guard(error, [&] {
    zf::Config cfg(host, config);
    const double bucket_mb = cfg.real("bucket_mb");
    if (bucket_mb > 0)
      zf::log(host, ZF_LOG_WARN,
              "stage.bucket_mb is deprecated: write stage.reduce_bucket_size = %llu (elements, as zero1-zero3 and "
              "DeepSpeed count them; this is %g MiB of fp32 gradients)",
              (unsigned long long)(bucket_mb * 1024 * 1024 / 4), bucket_mb);
    *out = reinterpret_cast<zf_object *>(new Zero0{host, uint64_t(cfg.integer("reduce_bucket_size")), bucket_mb,
                                                   cfg.boolean("overlap_comm"), nullptr, nullptr});
  });
}

void destroy(zf_object *object) { delete reinterpret_cast<Zero0 *>(object); }

zf_status plan(zf_object *, const zf_layout *layout, zf_stage_plan *plan, zf_error *) {
  plan->shard_begin = 0;
  plan->shard_end = layout->numel;
  plan->padded_numel = 0;
  return ZF_OK;
}

zf_status after_backward(zf_object *object, uint32_t block, const zf_step_buffers *buffers, zf_error *error) {
  auto *self = reinterpret_cast<Zero0 *>(object);
  return zf::guard(error, [&] { return self->reducer_for(buffers->grads).after_backward(block, *buffers, error); });
}

zf_status reduce_gradients(zf_object *object, const zf_step_buffers *buffers, zf_error *error) {
  auto *self = reinterpret_cast<Zero0 *>(object);
  return zf::guard(error, [&] { return self->reducer_for(buffers->grads).finish(*buffers, error); });
}

const zf_param_decl params[] = {
    // 50M elements: on 2 H200 (Qwen2-1.5B, docs/gpu.md) 12.5 ms a step faster than DDP's 25 MiB
    // (6.5M fp32 elements, 235 all-reduces of bf16 gradients a step); 200M measured the same as 50M.
    zf::param_int("reduce_bucket_size", "50000000", "elements all-reduced per gradient collective", zf::above(0)),
    zf::param_bool("overlap_comm", "true",
                   "start each bucket's all-reduce as soon as the backward has finished it (GPU: overlapped with "
                   "the backward)"),
    zf::param_float("bucket_mb", "0", "deprecated: MiB of gradients per all-reduce; write reduce_bucket_size",
                    zf::at_least(0)),
};

// Every rank holds everything: the ZeRO paper's 16 bytes per parameter.
zf_status estimate_memory(const zf_memory_shape *shape, zf_memory_estimate *estimate, zf_error *error) {
  return estimate_with(shape, estimate, error, [](const zf_memory_shape &, const ShapeSums &s, const zf::Config &,
                                                  zf_memory_estimate *e) {
    set_estimate(e, s.c * s.numel, s.c * s.numel, 4 * s.numel, s.k * s.numel, 0, 0, 16 * s.numel,
                 "params cP, grads cP, master 4P, state kP (paper: 16P)",
                 "a ZeRO stage over more ranks (stage.plugin = \"zero1\", \"zero2\" or \"zero3\") divides the "
                 "master and optimizer state by the number of ranks");
  });
}

// No gather_parameters: every rank updated all parameters.
const zf_stage_api api = {.struct_size = sizeof(zf_stage_api),
                          .create = create,
                          .destroy = destroy,
                          .plan = plan,
                          .after_backward = after_backward,
                          .reduce_gradients = reduce_gradients,
                          .estimate_memory = estimate_memory};

const zf_descriptor descriptor = {
    sizeof(zf_descriptor), ZF_ABI_VERSION, "zero0", ZF_KIND_STAGE,
    sizeof params / sizeof params[0], params, "0.2.0",
    "data parallel: gradients all-reduced in buckets during the backward, every rank holds everything",
    ZF_CAP_CPU | ZF_CAP_CUDA, &api,
};

}  // namespace

ZF_PLUGIN_DEFINE(descriptor)
