// zero0: plain data parallelism. Every rank holds all parameters, gradients and optimizer state;
// the gradients are summed over ranks (all-reduce) in buckets of bucket_mb: with overlap_comm,
// each bucket as soon as the backward has finished its gradients (on a GPU, on the host's
// communication stream beside the backward of the blocks before), the rest after the backward.
// Every rank then applies the same update.
#include "../common/zero_shard.hpp"

#include <limits>
#include <memory>

namespace {

using namespace zf::zero;

struct Zero0 {
  const zf_host *host;
  double bucket_mb;  // 0 = one collective
  bool overlap;
  std::unique_ptr<Collectives> comm;     // made once the gradients' dtype is known
  std::unique_ptr<BackwardReducer> reducer;

  BackwardReducer &reducer_for(const zf_tensor_view &grads) {
    if (!reducer) {
      Knobs knobs;
      knobs.reduce_bucket_size = bucket_mb > 0 ? uint64_t(bucket_mb * 1024 * 1024) / zf::dtype_size(grads.dtype)
                                               : std::numeric_limits<uint64_t>::max();
      knobs.overlap_comm = overlap;
      comm = std::make_unique<Collectives>(host, grads.numel, knobs);
      reducer = std::make_unique<BackwardReducer>(host, *comm, knobs, BackwardReducer::all_reduce);
    }
    return *reducer;
  }
};

zf_status create(const zf_host *host, const zf_config *config, zf_object **out, zf_error *error) {
  if (zf_status status = require_abi_1_2(host, "zero0", error); status != ZF_OK) return status;
  return zf::guard(error, [&] {
    zf::Config cfg(host, config);
    *out = reinterpret_cast<zf_object *>(new Zero0{host, cfg.real("bucket_mb"), cfg.boolean("overlap_comm"), nullptr, nullptr});
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
    {"bucket_mb", ZF_PARAM_FLOAT, ZF_PARAM_HAS_MIN, "25",
     "all-reduce gradients in buckets of this many MiB (0 = one collective after the backward)", 0, 0, nullptr,
     nullptr},
    {"overlap_comm", ZF_PARAM_BOOL, 0, "true",
     "start each bucket's all-reduce as soon as the backward has finished it (GPU: overlapped with the backward)",
     0, 0, nullptr, nullptr},
};

const zf_stage_api api = {
    sizeof(zf_stage_api), create, destroy, plan,
    nullptr, nullptr, nullptr, after_backward,
    reduce_gradients,
    nullptr,  // nothing to gather: every rank updated all parameters
};

const zf_descriptor descriptor = {
    sizeof(zf_descriptor), ZF_ABI_VERSION, "zero0", ZF_KIND_STAGE,
    sizeof params / sizeof params[0], params, "0.2.0",
    "data parallel: gradients all-reduced in buckets during the backward, every rank holds everything",
    ZF_CAP_CPU | ZF_CAP_CUDA, &api,
};

}  // namespace

ZF_PLUGIN_DEFINE(descriptor)
