/* One selector plugin, compiled many times with one VARIANT_* macro each, to check how the host
 * treats every way a plugin can be broken. Written in C99: the ABI header must compile as C. */
#include <zf/zf_plugin.h>

#include <stdio.h>
#include <string.h>

#ifndef PLUGIN_NAME
#define PLUGIN_NAME "good"
#endif

static int instance;

static zf_status create(const zf_host *host, const zf_config *config, zf_object **out, zf_error *error) {
  (void)host;
  (void)config;
  *out = (zf_object *)&instance;
#if defined(VARIANT_CREATE_DECLINES)
  snprintf(error->message, sizeof error->message, "no accelerator of this kind on this machine");
  return ZF_DECLINED;
#elif defined(VARIANT_CREATE_FAILS)
  snprintf(error->message, sizeof error->message, "cannot open /dev/imaginary0");
  return ZF_ERROR;
#else
  (void)error;
  return ZF_OK;
#endif
}

static void destroy(zf_object *object) { (void)object; }

static zf_status select_columns(zf_object *object, const zf_select_args *args, zf_tensor_view scores,
                                zf_tensor_view mask, zf_error *error) {
  (void)object;
  (void)scores;
  (void)error;
  /* Every other column: a visible, checkable choice. */
  for (uint32_t i = 0; i < args->column_count; ++i) ((uint8_t *)mask.data)[i] = (uint8_t)(i % 2 == 0);
  return ZF_OK;
}

static const zf_selector_api api = {
    sizeof(zf_selector_api), create, destroy, NULL,
#if defined(VARIANT_MISSING_REQUIRED)
    NULL,
#else
    select_columns,
#endif
};

static const zf_param_decl params[] = {
#if defined(VARIANT_BAD_DEFAULT)
    {"ratio", ZF_PARAM_INT, 0, "abc", "an integer whose default is not", 0, 0, NULL, NULL},
#else
    {"ratio", ZF_PARAM_FLOAT, ZF_PARAM_HAS_MIN | ZF_PARAM_MIN_EXCLUSIVE | ZF_PARAM_HAS_MAX, "0.5",
     "fraction of columns", 0, 1, NULL, NULL},
#endif
};

static const zf_descriptor descriptor = {
#if defined(VARIANT_SHORT_STRUCT)
    offsetof(zf_descriptor, capabilities),
#else
    sizeof(zf_descriptor),
#endif
    ZF_ABI_VERSION,
#if defined(VARIANT_NAME_MISMATCH)
    "somebody_else",
#else
    PLUGIN_NAME,
#endif
#if defined(VARIANT_WRONG_KIND)
    ZF_KIND_OPTIMIZER,
#else
    ZF_KIND_SELECTOR,
#endif
    1, params, "9.9.9", "a test plugin",
#if defined(VARIANT_CAP_MISMATCH)
    ZF_CAP_CPU | ZF_CAP_SCORES,
#else
    ZF_CAP_CPU,
#endif
    &api};

#if defined(VARIANT_NO_ENTRY)
ZF_EXPORT int not_a_plugin(void) { return (int)descriptor.struct_size; }
#else
ZF_EXPORT uint32_t zf_plugin_negotiate(uint32_t host_version) {
#if defined(VARIANT_OLD_MAJOR)
  (void)host_version;
  return ZF_ABI_MAKE(0, 9);
#elif defined(VARIANT_NEW_MAJOR)
  (void)host_version;
  return ZF_ABI_MAKE(ZF_ABI_MAJOR + 1, 0);
#else
  return host_version < ZF_ABI_VERSION ? host_version : ZF_ABI_VERSION;
#endif
}
#if defined(VARIANT_MISSING_DESCRIBE)
ZF_EXPORT const zf_descriptor *zf_plugin_misspelled(void) { return &descriptor; }
#else
ZF_EXPORT const zf_descriptor *zf_plugin_describe(void) { return &descriptor; }
#endif
#endif
