/* sentencepiece_module.h: the C interface of zf-sentencepiece.so, the one place libsentencepiece
 * is linked. The core loads that module with dlopen(RTLD_LOCAL | RTLD_DEEPBIND) so that
 * libsentencepiece's global symbols (it exports FLAGS_minloglevel, as libc10 does) bind inside
 * the module and can never overwrite libtorch's: sharing that symbol turned every CAFFE_ENFORCE
 * into an abort. Errors are returned as text (valid until the next call on the same thread);
 * no C++ exception crosses this boundary. */
#ifndef ZF_SENTENCEPIECE_MODULE_H
#define ZF_SENTENCEPIECE_MODULE_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ZF_SENTENCEPIECE_API_SYMBOL "zf_sentencepiece_api"

typedef void (*zf_sp_ids_sink)(void *context, const int *ids, size_t count);
typedef void (*zf_sp_text_sink)(void *context, const char *text, size_t size);

typedef struct zf_sp_api {
  /* A loaded model, or NULL with *error set. */
  void *(*load)(const char *path, const char **error);
  void (*destroy)(void *model);
  /* Each returns NULL on success, else the reason. */
  const char *(*encode)(void *model, const char *text, size_t size, zf_sp_ids_sink sink, void *context);
  const char *(*decode)(void *model, const int *ids, size_t count, zf_sp_text_sink sink, void *context);
  int (*piece_size)(void *model);
  int (*eos_id)(void *model); /* -1 when the model has none */
  int (*bos_id)(void *model);
  int (*pad_id)(void *model);
} zf_sp_api;

const zf_sp_api *zf_sentencepiece_api(void);

#ifdef __cplusplus
}
#endif

#endif
