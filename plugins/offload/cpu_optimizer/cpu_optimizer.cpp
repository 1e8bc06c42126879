// cpu_optimizer: ZeRO-Offload's strategy. The fp32 master and the optimizer state of this rank's
// shard live in pinned host memory and a CPU optimizer (cpu_adam, cpu_lion, cpu_adagrad) updates
// them. Gradients come down bucket by bucket as the backward finishes them (one stream), updated
// parameters go up bucket by bucket as the CPU finishes them (another stream), so both PCIe
// directions, the backward and the CPU update overlap. On a CPU run the "device" is host memory:
// the same buckets, copies and ordering run, which is how CI tests the schedule.
#include "../common/transfers.hpp"

#include <memory>

namespace {

struct CpuOptimizerOffload {
  const zf_host *host = nullptr;
  zf_tier tier = ZF_TIER_PINNED_HOST;
  bool overlap = true;
  uint64_t bucket_numel = 0;
  std::unique_ptr<zf_offload::Transfers> transfers;
};

CpuOptimizerOffload &self_of(zf_object *object) { return *reinterpret_cast<CpuOptimizerOffload *>(object); }

zf_status create(const zf_host *host, const zf_config *config, zf_object **out, zf_error *error) {
  if (!ZF_HAS(zf_host, host, event_synchronize))
    return zf::fail(error, ZF_DECLINED, "needs a host of ABI 1.3 or later (streams and events)");
  return zf::guard(error, [&] {
    zf::Config table(host, config);
    auto *self = new CpuOptimizerOffload();
    self->host = host;
    self->tier = table.boolean("pin_memory") ? ZF_TIER_PINNED_HOST : ZF_TIER_HOST;
    self->overlap = table.boolean("overlap");
    self->bucket_numel = uint64_t(table.integer("bucket_size"));
    self->transfers = std::make_unique<zf_offload::Transfers>(host);
    *out = reinterpret_cast<zf_object *>(self);
  });
}

void destroy(zf_object *object) { delete &self_of(object); }

zf_status plan(zf_object *object, const zf_layout *, uint64_t, zf_offload_plan *plan, zf_error *error) {
  CpuOptimizerOffload &self = self_of(object);
  return zf_offload::plan_host_tiers(plan, self.tier, self.tier, self.overlap, self.bucket_numel, error);
}

using Entries = zf_offload::TransferEntries<CpuOptimizerOffload>;

zf_status wait(zf_object *object, zf_error *) {
  self_of(object).transfers->synchronize();
  return ZF_OK;
}

const zf_param_decl params[] = {
    zf::param_bool("pin_memory", "true",
                   "master, optimizer state and transfer buffers in page-locked memory (PCIe at full speed); false = "
                   "pageable"),
    zf::param_bool("overlap", "true",
                   "copy, update and upload each bucket as soon as the backward finished its gradients; false = all "
                   "after the backward, one bucket (the serial reference)"),
    zf::param_int("bucket_size", "16777216",
                  "elements per bucket of gradient copies, CPU updates and parameter uploads (DeepSpeed's unit)",
                  zf::at_least(1)),
};

const zf_offload_api api = {.struct_size = sizeof(zf_offload_api),
                            .create = create,
                            .destroy = destroy,
                            .plan = plan,
                            .gradients_out = Entries::gradients_out,
                            .parameters_in = Entries::parameters_in,
                            .wait = wait,
                            .write_tile = nullptr,  // no disk tier
                            .read_tile = nullptr,
                            .transfer_event = Entries::transfer_event};

const zf_descriptor descriptor = {
    sizeof(zf_descriptor), ZF_ABI_VERSION, "cpu_optimizer", ZF_KIND_OFFLOAD, sizeof params / sizeof params[0],
    params, "1.0.0",
    "ZeRO-Offload: fp32 master and optimizer state in pinned host memory, updated by a CPU optimizer, "
    "per-bucket copies overlapping the backward",
    ZF_CAP_CPU | ZF_CAP_CUDA, &api,
};

}  // namespace

ZF_PLUGIN_DEFINE(descriptor)
