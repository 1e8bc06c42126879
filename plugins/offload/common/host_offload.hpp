// host_offload.hpp: the plugin object of cpu_optimizer and cpu_full, which differ in one thing:
// cpu_full also keeps the working (bf16/fp16) parameters in host memory, and the host streams each
// block to the GPU before its forward and backward (ABI 1.5, zf_offload_plan.param_tier).
// Header-only: plugins build against the SDK alone.
#pragma once

#include "offload_estimate.hpp"
#include "transfers.hpp"

#include <memory>

namespace zf_offload {

struct HostOffload {
  const zf_host *host = nullptr;
  zf_tier tier = ZF_TIER_PINNED_HOST;
  bool overlap = true;
  uint64_t bucket_numel = 0;
  bool offload_params = false;  // cpu_full
  uint64_t prefetch_numel = 0;  // cpu_full: elements of the next blocks copied ahead
  HostRatio ratio;              // cpu_optimizer: the share of the shard on the host (offload.ratio)
  std::unique_ptr<Transfers> transfers;
};

inline HostOffload &host_offload(zf_object *object) { return *reinterpret_cast<HostOffload *>(object); }

// create() of either plugin: the keys of ZF_HOST_OFFLOAD_PARAMS, and prefetch_size for cpu_full.
inline zf_status create_host_offload(const zf_host *host, const zf_config *config, bool offload_params,
                                     zf_object **out, zf_error *error) {
  if (!ZF_HAS(zf_host, host, event_synchronize))
    return zf::fail(error, ZF_DECLINED, "needs a host of ABI 1.3 or later (streams and events)");
  if (offload_params && ZF_ABI_MINOR_OF(host->abi_version) < 5)
    return zf::fail(error, ZF_DECLINED, "needs a host of ABI 1.5 or later (parameters in host memory)");
  return zf::guard(error, [&] {
    zf::Config table(host, config);
    auto *self = new HostOffload();
    self->host = host;
    // In a CPU run pinning means nothing, and the model's own buffers are host memory: the master
    // stays on a tier of its own (plain memory there), so the update is still an offload (ZenFlow's
    // CPU half included) whatever pin_memory says.
    const bool cpu_run = host->device == ZF_DEVICE_CPU;
    self->tier = table.boolean("pin_memory") || cpu_run ? ZF_TIER_PINNED_HOST : ZF_TIER_HOST;
    self->overlap = table.boolean("overlap");
    self->bucket_numel = uint64_t(table.integer("bucket_size"));
    self->offload_params = offload_params;
    if (offload_params) self->prefetch_numel = uint64_t(table.integer("prefetch_size"));
    else self->ratio = read_ratio(table);
    self->transfers = std::make_unique<Transfers>(host);
    *out = reinterpret_cast<zf_object *>(self);
  });
}

inline void destroy_host_offload(zf_object *object) { delete &host_offload(object); }

inline zf_status plan_host_offload(zf_object *object, const zf_layout *, uint64_t, zf_offload_plan *plan,
                                   zf_error *error) {
  HostOffload &self = host_offload(object);
  zf_status status = plan_host_tiers(plan, self.tier, self.tier, self.overlap, self.bucket_numel, self.ratio, error);
  if (status != ZF_OK || !self.offload_params) return status;
  plan_params_on_host(plan, self.tier, self.prefetch_numel);
  return ZF_OK;
}

inline zf_status wait_host_offload(zf_object *object, zf_error *) {
  host_offload(object).transfers->synchronize();
  return ZF_OK;
}

// estimate_memory of either plugin: the master and state on the pin_memory tier, and (cpu_full)
// the working parameters with them.
template <bool params_on_host>
zf_status estimate_host_offload(const zf_memory_shape *shape, zf_memory_estimate *estimate, zf_error *error) {
  return zf::guard(error, [&] {
    HostTiers how;
    how.tier = zf::Config(shape).boolean("pin_memory") ? ZF_TIER_PINNED_HOST : ZF_TIER_HOST;
    how.params_on_host = params_on_host;
    if (!params_on_host) how.ratio = read_ratio(zf::Config(shape));  // cpu_optimizer's offload.ratio
    return estimate_host_tiers(*shape, how, estimate, error);
  });
}

// The api table of either plugin, around its own create and estimate.
constexpr zf_offload_api host_offload_api(decltype(zf_offload_api::create) create,
                                          zf_estimate_memory_fn estimate_memory) {
  using Entries = TransferEntries<HostOffload>;
  return zf_offload_api{.struct_size = sizeof(zf_offload_api),
                        .create = create,
                        .destroy = destroy_host_offload,
                        .plan = plan_host_offload,
                        .gradients_out = Entries::gradients_out,
                        .parameters_in = Entries::parameters_in,
                        .wait = wait_host_offload,
                        .write_tile = nullptr,  // no disk tier
                        .read_tile = nullptr,
                        .transfer_event = Entries::transfer_event,
                        .estimate_memory = estimate_memory};
}

}  // namespace zf_offload

// The keys both plugins read.
#define ZF_HOST_OFFLOAD_PARAMS                                                                                     \
  zf::param_bool("pin_memory", "true",                                                                             \
                 "master, optimizer state and transfer buffers in page-locked memory (PCIe at full speed); "       \
                 "false = pageable"),                                                                              \
      zf::param_bool("overlap", "true",                                                                            \
                     "copy, update and upload each bucket as soon as the backward finished its gradients; false = " \
                     "all after the backward, one bucket (the serial reference)"),                                 \
      zf::param_int("bucket_size", "16777216",                                                                     \
                    "elements per bucket of gradient copies, CPU updates and parameter uploads (DeepSpeed's unit)", \
                    zf::at_least(1))
