#include "update/update_buffers.hpp"

#include "update/disk_state.hpp"
#include "runtime/error.hpp"
#include "runtime/log.hpp"
#include "runtime/tensors.hpp"

#include <algorithm>
#include <cmath>

namespace zf {

std::vector<zf_optimizer_range> optimizer_ranges(const zf_layout &layout, uint64_t begin, uint64_t end) {
  std::vector<zf_optimizer_range> ranges;
  for (uint32_t i = 0; i < layout.segment_count; ++i) {
    const zf_segment &s = layout.segments[i];
    uint64_t seg_end = i + 1 < layout.segment_count ? layout.segments[i + 1].offset : end;
    uint64_t lo = std::max(s.offset, begin), hi = std::min(seg_end, end);
    if (i == 0) lo = begin;  // leading elements of the shard belong to the first segment
    if (lo >= hi) continue;
    append_range(ranges, lo - begin, hi - begin, (s.flags & ZF_SEGMENT_NO_DECAY) ? 1 : 0);
  }
  return ranges;
}

void append_range(std::vector<zf_optimizer_range> &ranges, uint64_t lo, uint64_t hi, uint32_t group) {
  if (lo >= hi) return;
  if (!ranges.empty() && ranges.back().end == lo && ranges.back().group == group) ranges.back().end = hi;
  else ranges.push_back(zf_optimizer_range{lo, hi, group, 0});
}

uint64_t device_part_of(uint64_t numel, double host_ratio) {
  return numel - uint64_t(std::llround(host_ratio * double(numel)));
}

bool on_host(zf_tier tier) { return tier == ZF_TIER_HOST || tier == ZF_TIER_PINNED_HOST; }

std::vector<zf_optimizer_range> clip_ranges(const std::vector<zf_optimizer_range> &ranges, uint64_t begin,
                                            uint64_t end) {
  std::vector<zf_optimizer_range> out;
  auto first = std::lower_bound(ranges.begin(), ranges.end(), begin,
                                [](const zf_optimizer_range &r, uint64_t at) { return r.end <= at; });
  for (auto r = first; r != ranges.end() && r->begin < end; ++r)
    out.push_back(zf_optimizer_range{std::max(r->begin, begin), std::min(r->end, end), r->group, 0});
  return out;
}

UpdateBuffers::UpdateBuffers(Runtime &runtime, PluginSet &plugins, const zf_layout &layout, uint64_t shard_begin,
                             uint64_t shard_end, torch::Dtype dtype, zf_tier model_tier,
                             const OptimizerSettings &settings, torch::Dtype gradients)
    : runtime(runtime), plugins(plugins), shard_begin(shard_begin), shard_end(shard_end), dtype(dtype),
      grad_dtype(gradients == torch::ScalarType::Undefined ? dtype : gradients), model_tier(model_tier) {
  const OffloadPlugin &offload = plugins.offload;
  tiers = offload.plan(layout, shard_end - shard_begin, model_tier);
  offloaded = tiers.master_tier != model_tier;
  check_optimizer_fits();
  ZF_REQUIRE(tiers.param_tier == model_tier || (on_host(tiers.param_tier) && on_host(tiers.master_tier)),
             "offload plugin '%s' put the working parameters on tier %s: they can live where the model computes, "
             "or in host memory beside the master (which it keeps on tier %s)",
             offload.name(), tier_name(tiers.param_tier), tier_name(tiers.master_tier));
  writes_in_place = offloaded && tiers.param_tier != model_tier && tiers.param_out_tier == tiers.param_tier &&
                     dtype != torch::kFloat32;
  if (offloaded && (tiers.host_ratio < 1 || tiers.host_ratio_auto)) {
    ZF_REQUIRE(tiers.param_tier == model_tier,
               "offload plugin '%s' keeps the working parameters in host memory, so the part of the optimizer shard "
               "that offload.ratio = %s leaves where the model computes could not be updated there",
               offload.name(), ratio_text().c_str());
    split_auto = tiers.host_ratio_auto != 0;
    if (!split_auto) device_part = device_part_of(numel(), tiers.host_ratio);
  }

  job.device = on_host(tiers.master_tier) ? ZF_DEVICE_CPU : ZF_DEVICE_CUDA;
  job.ranges = optimizer_ranges(layout, shard_begin, shard_end);
  for (uint32_t b = 0; b < layout.block_count; ++b)
    if (layout.blocks[b].numel) block_starts_.emplace_back(layout.blocks[b].offset, b);
  std::sort(block_starts_.begin(), block_starts_.end());
  job.overlapped = offloaded && tiers.overlap;
  zf_optimizer_group decay{float(settings.lr), float(settings.beta1), float(settings.beta2), float(settings.eps),
                           float(settings.weight_decay), {}};
  zf_optimizer_group no_decay = decay;
  no_decay.weight_decay = 0;
  groups = {decay, no_decay};

  const uint64_t n = numel(), element = c10::elementSize(dtype);
  planned.push_back({tiers.master_tier, "master", n * 4});
  const OptimizerPlugin &optimizer = plugins.optimizer;
  state_specs = optimizer.state_specs();
  for (const StateSpec &spec : state_specs)
    planned.push_back({tiers.state_tier, format("%s.%s", optimizer.name(), spec.name.c_str()),
                       n * c10::elementSize(spec.dtype)});
  if (tiers.state_tier == ZF_TIER_NVME) {
    ZF_REQUIRE(on_host(tiers.master_tier),
               "offload plugin '%s' puts the optimizer state on disk, which needs the master in host memory, not on "
               "tier %s", offload.name(), tier_name(tiers.master_tier));
    ZF_REQUIRE(!state_specs.empty(),
               "offload plugin '%s' puts the optimizer state on disk, which needs an optimizer that lets the host hold "
               "its state (state_spec, bind_state); '%s' keeps its own: use one that does (%s)",
               offload.name(), optimizer.name(), host_optimizers(kHostHeldState).c_str());
    disk = std::make_unique<DiskState>(runtime, offload, state_specs, n, tiers.bucket_numel ? tiers.bucket_numel : n);
    tiers.bucket_numel = disk->tile_numel();  // a bucket is a tile
    for (const StateSpec &spec : state_specs)
      planned.push_back({tiers.master_tier, format("%s.%s (disk tiles)", optimizer.name(), spec.name.c_str()),
                         disk->window_numel() * c10::elementSize(spec.dtype)});
  }
  if (state_specs.empty())  // an optimizer older than ABI 1.3 allocates its own state: assume Adam's
    planned.push_back({tiers.state_tier, format("%s.state (estimated, 8 bytes per element)", optimizer.name()),
                       n * 8});
  if (offloaded) {
    planned.push_back({tiers.grad_tier, "grads.offload", n * c10::elementSize(grad_dtype)});
    if (dtype != torch::kFloat32 && !writes_in_place)
      planned.push_back({tiers.param_out_tier, "params.offload", n * element});
  }
}

UpdateBuffers::~UpdateBuffers() = default;

std::string UpdateBuffers::host_optimizers(uint32_t traits, const char *except) const {
  const uint64_t writes = offloaded && dtype != torch::kFloat32 ? ZF_CAP_LOW_PRECISION_OUT : 0;
  return plugins.installed_with(ZF_KIND_OPTIMIZER, {ZF_CAP_CPU | writes, traits, except});
}

std::string UpdateBuffers::ratio_text() const {
  return tiers.host_ratio_auto ? std::string("\"auto\"") : format("%g", tiers.host_ratio);
}

// The optimizer must run where the master lives, and an offloaded bf16/fp16 run needs an
// optimizer that writes the compute-precision copy in its pass.
void UpdateBuffers::check_optimizer_fits() {
  const OffloadPlugin &offload = plugins.offload;
  const OptimizerPlugin &optimizer = plugins.optimizer;
  if (on_host(tiers.master_tier)) {
    ZF_REQUIRE(optimizer.has(ZF_CAP_CPU),
               "optimizer plugin '%s' runs on the GPU but offload plugin '%s' keeps the master weights in host "
               "memory: use a CPU optimizer (%s)",
               optimizer.name(), offload.name(), host_optimizers().c_str());
  } else {
    ZF_REQUIRE(tiers.master_tier == ZF_TIER_DEVICE && runtime.device == ZF_DEVICE_CUDA,
               "offload plugin '%s' put the master weights on tier %s, which this %s run does not have",
               offload.name(), tier_name(tiers.master_tier), runtime.device == ZF_DEVICE_CUDA ? "GPU" : "CPU");
    ZF_REQUIRE(optimizer.has(ZF_CAP_CUDA),
               "optimizer plugin '%s' runs on the CPU but run.device = \"cuda\" keeps the master weights on the "
               "GPU: use a GPU optimizer (%s), or, to update on the CPU, an offload plugin that keeps the master "
               "weights in host memory and moves gradients and parameters (%s)",
               optimizer.name(), plugins.installed_with(ZF_KIND_OPTIMIZER, {ZF_CAP_CUDA}).c_str(),
               plugins.installed_with(ZF_KIND_OFFLOAD, {0, kMovesData}).c_str());
  }
  if (!offloaded) return;
  ZF_REQUIRE(offload.moves_data(),
             "offload plugin '%s' keeps the master weights on tier %s but does not move gradients and parameters "
             "(gradients_out, parameters_in)", offload.name(), tier_name(tiers.master_tier));
  ZF_REQUIRE(dtype == torch::kFloat32 || optimizer.has(ZF_CAP_LOW_PRECISION_OUT),
             "optimizer plugin '%s' cannot write %s parameters in its step (ZF_CAP_LOW_PRECISION_OUT), which offload "
             "plugin '%s' needs: use one that can (%s)",
             optimizer.name(), c10::toString(dtype), offload.name(), host_optimizers().c_str());
}

void UpdateBuffers::allocate(const torch::Tensor &params_shard) {
  MemoryLedger &ledger = runtime.memory;
  const uint64_t n = numel();
  master = ledger_tensor(ledger, tiers.master_tier, n, torch::kFloat32, "master");
  master.copy_(params_shard);
  if (state_specs.empty()) {  // an optimizer that keeps its state itself
    plugins.optimizer.init_state(n);
  } else {
    std::vector<zf_tensor_view> views;
    const size_t count = state_specs.size();
    if (disk) {  // the optimizer works on a window of a few tiles
      std::vector<std::string> tags;
      for (size_t i = 0; i < count; ++i) tags.push_back(planned[1 + count + i].tag);
      state = disk->allocate(tiers.master_tier, tags);
    }
    for (size_t i = 0; i < count; ++i) {
      // The optimizer writes the initial values (its workers first-touch the pages).
      if (!disk)
        state.push_back(ledger_tensor(ledger, tiers.state_tier, n, state_specs[i].dtype, planned[1 + i].tag,
                                      /*zero=*/false));
      views.push_back(view_of(state[i]));
    }
    plugins.optimizer.bind_state(disk ? disk->window_numel() : n, views);
    if (disk) disk->write_initial();
  }
  if (!offloaded) return;
  host_grads = ledger_tensor(ledger, tiers.grad_tier, n, grad_dtype, "grads.offload", /*zero=*/false);
  if (dtype != torch::kFloat32 && !writes_in_place)
    params_out = ledger_tensor(ledger, tiers.param_out_tier, n, dtype, "params.offload", /*zero=*/false);
}

std::vector<size_t> UpdateBuffers::held_state_of(const OptimizerPlugin &device, const char *moves) const {
  const OptimizerPlugin &host = plugins.optimizer;
  ZF_REQUIRE(!state_specs.empty(),
             "%s between the host and the device, so the host must hold it: optimizer plugin '%s' keeps its own "
             "(use one that lets the host hold it: %s)", moves, host.name(), host_optimizers(kHostHeldState).c_str());
  ZF_REQUIRE(!device.state_specs().empty(), "%s: optimizer plugin '%s' (the device's update) cannot use host-held "
             "state", moves, device.name());
  ZF_REQUIRE(dtype == torch::kFloat32 || device.has(ZF_CAP_LOW_PRECISION_OUT),
             "%s: optimizer plugin '%s' (the device's update) cannot write %s parameters", moves, device.name(),
             c10::toString(dtype));
  std::vector<size_t> held;
  for (const StateSpec &spec : device.state_specs()) {
    auto found = std::find_if(state_specs.begin(), state_specs.end(),
                              [&](const StateSpec &mine) { return mine.name == spec.name; });
    ZF_REQUIRE(found != state_specs.end(),
               "%s between '%s' on the host and '%s' on the device, but '%s' has no state '%s': use a host optimizer "
               "with the state of '%s', among those that let the host hold theirs (%s)", moves, host.name(),
               device.name(), host.name(), spec.name.c_str(), device.name(),
               host_optimizers(kHostHeldState, host.name()).c_str());
    held.push_back(size_t(found - state_specs.begin()));
  }
  return held;
}

std::vector<std::pair<std::string, torch::Tensor>> UpdateBuffers::optimizer_state() {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  const OptimizerPlugin &optimizer = plugins.optimizer;
  ZF_REQUIRE(optimizer.exposes_state() || !state.empty(),
             "optimizer plugin '%s' exposes no state (state_tensor), so it cannot be checkpointed", optimizer.name());
  if (!state.empty()) {
    if (!disk)  // else the disk's pieces
      for (size_t i = 0; i < state.size(); ++i) out.emplace_back(state_specs[i].name, state[i]);
    return out;
  }
  for (const auto &[name, view] : optimizer.own_state()) out.emplace_back(name, tensor_of(view));
  return out;
}

// The first block that starts after layout element `at`.
static std::vector<std::pair<uint64_t, uint32_t>>::const_iterator starting_after(
    const std::vector<std::pair<uint64_t, uint32_t>> &block_starts, uint64_t at) {
  return std::upper_bound(block_starts.begin(), block_starts.end(), std::make_pair(at, ~uint32_t(0)));
}

uint32_t UpdateBuffers::block_of(uint64_t element) const {
  auto after = starting_after(block_starts_, shard_begin + element);
  return after == block_starts_.begin() ? 0 : std::prev(after)->second;
}

uint64_t UpdateBuffers::block_end(uint64_t element) const {
  auto after = starting_after(block_starts_, shard_begin + element);
  return after == block_starts_.end() ? numel() : std::min(numel(), after->first - shard_begin);
}

}  // namespace zf
