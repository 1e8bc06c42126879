// zf-sentencepiece.so: libsentencepiece behind the C interface of sentencepiece_module.h.
#include "sentencepiece_module.h"

#include <sentencepiece_processor.h>

#include <exception>
#include <string>
#include <vector>

namespace {

thread_local std::string last_error;

const char *failed(const std::string &why) {
  last_error = why;
  return last_error.c_str();
}

sentencepiece::SentencePieceProcessor &processor(void *model) {
  return *static_cast<sentencepiece::SentencePieceProcessor *>(model);
}

void *load(const char *path, const char **error) {
  try {
    auto *model = new sentencepiece::SentencePieceProcessor();
    auto status = model->Load(path);
    if (status.ok()) return model;
    delete model;
    *error = failed(status.ToString());
  } catch (const std::exception &e) {
    *error = failed(e.what());
  }
  return nullptr;
}

void destroy(void *model) { delete &processor(model); }

const char *encode(void *model, const char *text, size_t size, zf_sp_ids_sink sink, void *context) {
  try {
    std::vector<int> ids;
    auto status = processor(model).Encode(std::string(text, size), &ids);
    if (!status.ok()) return failed(status.ToString());
    sink(context, ids.data(), ids.size());
    return nullptr;
  } catch (const std::exception &e) {
    return failed(e.what());
  }
}

const char *decode(void *model, const int *ids, size_t count, zf_sp_text_sink sink, void *context) {
  try {
    std::string text;
    auto status = processor(model).Decode(std::vector<int>(ids, ids + count), &text);
    if (!status.ok()) return failed(status.ToString());
    sink(context, text.data(), text.size());
    return nullptr;
  } catch (const std::exception &e) {
    return failed(e.what());
  }
}

int piece_size(void *model) { return processor(model).GetPieceSize(); }
int eos_id(void *model) { return processor(model).eos_id(); }
int bos_id(void *model) { return processor(model).bos_id(); }
int pad_id(void *model) { return processor(model).pad_id(); }

}  // namespace

extern "C" __attribute__((visibility("default"))) const zf_sp_api *zf_sentencepiece_api(void) {
  static const zf_sp_api api = {load, destroy, encode, decode, piece_size, eos_id, bos_id, pad_id};
  return &api;
}
