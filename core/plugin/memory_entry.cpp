#include "plugin/memory_entry.hpp"

#include "plugin/api_copy.hpp"
#include "plugin/config_value.hpp"
#include "runtime/error.hpp"

#include <cstring>

namespace zf {

zf_estimate_memory_fn memory_entry(const PluginFile &file) {
  const zf_descriptor &d = *file.descriptor;
  if (d.kind == ZF_KIND_STAGE) return api_copy<zf_stage_api>(d.api).estimate_memory;
  if (d.kind == ZF_KIND_OFFLOAD) return api_copy<zf_offload_api>(d.api).estimate_memory;
  if (d.kind == ZF_KIND_OPTIMIZER) return api_copy<zf_optimizer_api>(d.api).estimate_memory;
  return nullptr;  // selectors hold no memory of their own
}

PluginMemory ask_plugin_memory(const PluginFile &file, const PluginConfig &config, zf_memory_shape shape) {
  PluginMemory out;
  zf_estimate_memory_fn entry = memory_entry(file);
  if (!entry) {
    out.why = format("no estimate: %s plugin '%s' (ABI %u.%u) has no memory entry (ABI %s)",
                     kind_name(file.descriptor->kind), file.descriptor->name, ZF_ABI_MAJOR_OF(file.abi_version),
                     ZF_ABI_MINOR_OF(file.abi_version), file.descriptor->kind == ZF_KIND_OPTIMIZER ? "1.9" : "1.7");
    return out;
  }
  shape.struct_size = sizeof shape;
  shape.config = reinterpret_cast<const zf_config *>(&config);
  shape.config_bool = config_value<int32_t>;
  shape.config_int = config_value<int64_t>;
  shape.config_float = config_value<double>;
  shape.config_string = config_value<const char *>;
  std::memset(&out.bytes, 0, sizeof out.bytes);
  out.bytes.struct_size = sizeof out.bytes;
  zf_error error{};
  zf_status status = entry(&shape, &out.bytes, &error);
  error.message[ZF_MESSAGE_CAPACITY - 1] = '\0';
  out.bytes.note[ZF_MESSAGE_CAPACITY - 1] = out.bytes.advice[ZF_MESSAGE_CAPACITY - 1] = '\0';
  out.estimated = status == ZF_OK;
  if (!out.estimated)
    out.why = format("no estimate: %s plugin '%s': %s%s", kind_name(file.descriptor->kind), file.descriptor->name,
                     status == ZF_DECLINED ? "" : "estimate_memory failed: ", error.message);
  return out;
}

bool params_on_host(const PluginFile &offload, const PluginConfig &config) {
  constexpr uint64_t kBlock = 1 << 16;  // elements: four blocks of a bf16 model
  const uint64_t blocks[] = {kBlock, kBlock, kBlock, kBlock};
  zf_memory_estimate stage{};
  stage.struct_size = sizeof stage;
  stage.params = stage.tier_bytes[ZF_TIER_DEVICE] = 2 * 4 * kBlock;
  zf_memory_shape shape{};
  shape.block_count = 4;
  shape.blocks = blocks;
  shape.alignment = 64;
  shape.world_size = 1;
  shape.compute_bytes = 2;
  shape.state_bytes = 8;
  shape.grad_accum = 1;
  shape.stage = &stage;
  const PluginMemory memory = ask_plugin_memory(offload, config, shape);
  return memory.estimated &&
         (memory.bytes.tier_bytes[ZF_TIER_PINNED_HOST] > 0 || memory.bytes.tier_bytes[ZF_TIER_HOST] > 0);
}

}  // namespace zf
