// offload_estimate.hpp: where the stage's bytes go under an offload plugin that keeps the master
// on the host (ABI 1.7's estimate_memory). The master, the optimizer state and a host copy of the
// gradient shard (bf16/fp16 runs: and of the updated parameters) move to `tier`; a stage that
// shards parameters (ZeRO-3) then keeps a compute-precision shard of its own beside the model.
// With params_on_host (cpu_full) the working parameters (ZeRO-3: the shard) live on `tier` too,
// and the device holds the blocks in use (two of the largest). state_on_disk (nvme): the state
// is on ZF_TIER_NVME except for ram_budget bytes of it in plain host memory. offload.ratio below 1
// keeps a master and state of the first (1 - ratio) of the shard beside the model too; "auto"
// chooses that part after the first step, which the estimate cannot count (its note says so).
#pragma once

#include "transfers.hpp"

#include <zf/zf_plugin.hpp>

#include <algorithm>
#include <string>

namespace zf_offload {

struct HostTiers {
  zf_tier tier = ZF_TIER_PINNED_HOST;
  bool params_on_host = false;
  bool state_on_disk = false;
  uint64_t ram_budget = 0;  // bytes of state kept in RAM (state_on_disk)
  HostRatio ratio;          // offload.ratio: the rest of the shard keeps its master and state on the device
};

inline zf_status estimate_host_tiers(const zf_memory_shape &shape, const HostTiers &how, zf_memory_estimate *out,
                                     zf_error *error) {
  const zf_memory_estimate *stage = shape.stage;
  if (!stage) return zf::fail(error, ZF_DECLINED, "the stage gives no estimate to move");
  const uint64_t c = shape.compute_bytes, shard = stage->master / 4, largest = zf::shape_largest_block(shape);
  const bool zero3 = shape.stage_capabilities & ZF_CAP_SHARD_PARAMETERS;
  const uint64_t copies = shard * c * (c == 4 || how.params_on_host ? 1 : 2);
  uint64_t device = stage->grads + stage->staging + stage->transient, host = stage->master + copies;
  if (how.params_on_host) {
    device += (zero3 ? stage->params : 0) + 2 * c * largest;
    host += zero3 ? c * shard : stage->params;
  } else {
    device += stage->params + (zero3 ? c * shard : 0);
  }
  device += uint64_t((1 - how.ratio.share) * double(stage->master + stage->state));
  out->tier_bytes[ZF_TIER_DEVICE] = device;
  if (how.ratio.automatic) {
    std::string note = out->note;
    note += std::string(note.empty() ? "" : "; ") +
            "device: plus what offload.ratio = \"auto\" keeps there after the first step";
    zf::set_text(out->note, note);
  }
  out->tier_bytes[how.tier] += host;
  if (how.state_on_disk) {
    const uint64_t in_ram = std::min(how.ram_budget, stage->state);
    out->tier_bytes[ZF_TIER_HOST] += in_ram;
    out->tier_bytes[ZF_TIER_NVME] = stage->state - in_ram;
  } else {
    out->tier_bytes[how.tier] += stage->state;
  }
  return ZF_OK;
}

}  // namespace zf_offload
