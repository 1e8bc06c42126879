// transfers.hpp: the PCIe half of an offload plugin that keeps the master on the host: gradients
// go down on one stream and updated parameters go up on another, so both directions, the
// backward and the CPU update overlap. Shared by cpu_optimizer and nvme (header-only: plugins
// build against the SDK alone). On a CPU run every stream and event is NULL and copies are plain.
#pragma once

#include <zf/zf_plugin.hpp>

#include <cstdlib>
#include <string>

namespace zf_offload {

struct Transfers {
  const zf_host *host = nullptr;
  void *down = nullptr;  // device -> host: gradients
  void *up = nullptr;    // host -> device: parameters

  explicit Transfers(const zf_host *h) : host(h), down(h->stream_create(h)), up(h->stream_create(h)) {}

  // Queued on the gradient stream after what `stream` has queued so far (the bucket's reduction).
  zf_status gradients_out(zf_tensor_view device_grads, zf_tensor_view host_grads, void *stream, zf_error *error) {
    host->event_wait(host, down, host->event_record(host, stream));
    return host->copy(host, host_grads, device_grads, down, error);
  }
  // The host wrote host_params before this call; the copy needs no event on the way in.
  zf_status parameters_in(zf_tensor_view host_params, zf_tensor_view device_params, zf_error *error) {
    return host->copy(host, device_params, host_params, up, error);
  }
  zf_status transfer_event(int32_t direction, void **event, zf_error *error) {
    if (direction != ZF_TRANSFER_GRADIENTS_OUT && direction != ZF_TRANSFER_PARAMETERS_IN)
      return zf::fail(error, ZF_ERROR_INVALID_ARGUMENT, "unknown transfer direction %d", direction);
    *event = host->event_record(host, direction == ZF_TRANSFER_GRADIENTS_OUT ? down : up);
    return ZF_OK;
  }
  void synchronize() {
    for (void *stream : {down, up}) host->event_synchronize(host, host->event_record(host, stream));
  }
};

// offload.ratio: the share of the optimizer shard kept and updated on the host, or "auto" (the
// host chooses it after the first step, ABI 1.9).
struct HostRatio {
  double share = 1;
  bool automatic = false;
};

inline HostRatio read_ratio(const zf::Config &table) {
  const std::string text = table.string("ratio");
  if (text == "auto") return {1, true};
  char *end = nullptr;
  const double share = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || !(share >= 0 && share <= 1))
    throw zf::Failure(ZF_ERROR_INVALID_ARGUMENT,
                      "offload.ratio = \"" + text + "\": expected a share from 0 to 1, or \"auto\"");
  return {share, false};
}

// The plan of a plugin that keeps the master on the host: master, gradients and the parameters'
// compute-precision copy on `tier`, the optimizer state on `state_tier`, for `ratio` of the shard
// (the rest stays where the model computes).
inline zf_status plan_host_tiers(zf_offload_plan *plan, zf_tier tier, zf_tier state_tier, bool overlap,
                                 uint64_t bucket_numel, HostRatio ratio, zf_error *error) {
  if (!ZF_HAS(zf_offload_plan, plan, bucket_numel))
    return zf::fail(error, ZF_ERROR_UNSUPPORTED, "the host's offload plan is older than ABI 1.3");
  if (ratio.share < 1 && !ZF_HAS(zf_offload_plan, plan, host_ratio))
    return zf::fail(error, ZF_ERROR_UNSUPPORTED, "offload.ratio < 1 needs a host of ABI 1.8 or later");
  if (ratio.automatic && !ZF_HAS(zf_offload_plan, plan, host_ratio_auto))
    return zf::fail(error, ZF_ERROR_UNSUPPORTED, "offload.ratio = \"auto\" needs a host of ABI 1.9 or later");
  if (ZF_HAS(zf_offload_plan, plan, host_ratio)) plan->host_ratio = ratio.share;
  if (ratio.automatic) plan->host_ratio_auto = 1;
  plan->master_tier = plan->grad_tier = plan->param_out_tier = tier;
  plan->state_tier = state_tier;
  plan->overlap = overlap ? 1 : 0;
  plan->bucket_numel = bucket_numel;
  return ZF_OK;
}

// The working parameters on `tier` too (cpu_full, nvme with offload_params; ABI 1.5): the host
// streams each block to the device around its use, prefetch_numel elements ahead, and the
// optimizer writes them in place.
inline void plan_params_on_host(zf_offload_plan *plan, zf_tier tier, uint64_t prefetch_numel) {
  plan->param_tier = tier;  // param_out_tier is the same
  plan->prefetch_numel = prefetch_numel;
}

// The entries that move data, for a plugin object of type Plugin with a `transfers` member.
template <class Plugin>
struct TransferEntries {
  static Transfers &of(zf_object *object) { return *reinterpret_cast<Plugin *>(object)->transfers; }
  static zf_status gradients_out(zf_object *object, zf_tensor_view device_grads, zf_tensor_view host_grads,
                                 void *stream, zf_error *error) {
    return of(object).gradients_out(device_grads, host_grads, stream, error);
  }
  static zf_status parameters_in(zf_object *object, zf_tensor_view host_params, zf_tensor_view device_params, void *,
                                 zf_error *error) {
    return of(object).parameters_in(host_params, device_params, error);
  }
  static zf_status transfer_event(zf_object *object, int32_t direction, void **event, zf_error *error) {
    return of(object).transfer_event(direction, event, error);
  }
};

}  // namespace zf_offload

// offload.prefetch_size (cpu_full, nvme with offload_params).
#define ZF_OFFLOAD_PREFETCH_PARAM                                                                                 \
  zf::param_int("prefetch_size", "50000000",                                                                    \
                "elements of the next blocks copied to the GPU while the current one computes, at least the next " \
                "block; 0 = none (under zero3, its own prefetch_bucket_size applies instead)",                     \
                zf::at_least(0))

// offload.ratio (cpu_optimizer, nvme).
#define ZF_OFFLOAD_RATIO_PARAM                                                                                   \
  zf::param_string("ratio", "1",                                                                                 \
                   "share of the optimizer shard (master and state) kept and updated here, from 0 to 1; the rest " \
                   "stays where the model computes and is updated there every step (DeepSpeed's "                \
                   "offload_optimizer.ratio); auto: the smallest share whose rest fits the GPU memory left after " \
                   "the first step (1 on a CPU run without run.device_memory_limit_gb)")
