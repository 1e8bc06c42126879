// all: every column is important (ZenFlow with topk_ratio = 1, or no selection at all).
#include <zf/zf_plugin.hpp>

#include <cstring>

namespace {

zf_status create(const zf_host *, const zf_config *, zf_object **out, zf_error *) {
  static int instance;  // stateless: any non-NULL handle will do
  *out = reinterpret_cast<zf_object *>(&instance);
  return ZF_OK;
}

void destroy(zf_object *) {}

zf_status select(zf_object *, const zf_select_args *args, zf_tensor_view, zf_tensor_view mask, zf_error *error) {
  if (mask.dtype != ZF_DTYPE_U8 || mask.numel != args->column_count || mask.device != ZF_DEVICE_CPU)
    return zf::fail(error, ZF_ERROR_INVALID_ARGUMENT, "mask must be a CPU U8 view of %u columns", args->column_count);
  std::memset(mask.data, 1, mask.numel);
  return ZF_OK;
}

const zf_selector_api api = {.struct_size = sizeof(zf_selector_api), .create = create, .destroy = destroy, .select = select};

const zf_descriptor descriptor = {.struct_size = sizeof(zf_descriptor),
                                  .abi_version = ZF_ABI_VERSION,
                                  .name = "all",
                                  .kind = ZF_KIND_SELECTOR,
                                  .version = "0.1.0",
                                  .description = "selects every column",
                                  .capabilities = ZF_CAP_CPU | ZF_CAP_CUDA,
                                  .api = &api};

}  // namespace

ZF_PLUGIN_DEFINE(descriptor)
