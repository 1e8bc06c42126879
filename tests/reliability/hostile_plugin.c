/* Plugin files that would crash a host that trusts them, one VARIANT_* per module: an entry
 * point exported as data, a descriptor pointer into nowhere, a constructor that aborts. */
#include <zf/zf_plugin.h>

#include <stdint.h>
#include <stdlib.h>

#if defined(VARIANT_DATA_ENTRY)
ZF_EXPORT const unsigned char zf_plugin_negotiate[16] = {0};
#else
ZF_EXPORT uint32_t zf_plugin_negotiate(uint32_t host_version) {
  return host_version < ZF_ABI_VERSION ? host_version : ZF_ABI_VERSION;
}
#endif

#if defined(VARIANT_ABORT_CTOR)
__attribute__((constructor)) static void explode(void) { abort(); }
#endif

ZF_EXPORT const zf_descriptor *zf_plugin_describe(void) { return (const zf_descriptor *)(uintptr_t)16; }
