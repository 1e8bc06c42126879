// SentencePiece models (Llama-2's tokenizer.model) through Debian's libsentencepiece, which only
// the module zf-sentencepiece.so links (tokenizer/sentencepiece/sentencepiece_module.h says why).
#include "tokenizer/tokenizer.hpp"

#include "plugin/plugin_registry.hpp"
#include "runtime/error.hpp"
#include "runtime/input.hpp"
#include "tokenizer/sentencepiece/sentencepiece_module.h"

#include <dlfcn.h>

#include <mutex>

namespace zf {
namespace {

std::optional<int64_t> present(int id) { return id >= 0 ? std::optional<int64_t>(id) : std::nullopt; }

// The module beside the built-in plugins (lib/zfcore/), loaded once and never unloaded.
const zf_sp_api &sentencepiece_module() {
  static std::mutex mutex;
  static const zf_sp_api *api = nullptr;
  std::lock_guard<std::mutex> lock(mutex);
  if (api) return *api;
  std::string path = (PluginRegistry::builtin_dir().parent_path() / "zf-sentencepiece.so").string();
  // RTLD_DEEPBIND: the module and libsentencepiece resolve their own symbols first, and
  // RTLD_LOCAL keeps them out of everyone else's lookups (libc10 defines FLAGS_minloglevel too).
  void *handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
  ZF_REQUIRE(handle, "cannot load the SentencePiece module %s: %s (reinstall zfcore)", path.c_str(), dlerror());
  auto entry = reinterpret_cast<const zf_sp_api *(*)()>(dlsym(handle, ZF_SENTENCEPIECE_API_SYMBOL));
  ZF_REQUIRE(entry, "%s: no %s entry (reinstall zfcore)", path.c_str(), ZF_SENTENCEPIECE_API_SYMBOL);
  api = entry();
  return *api;
}

class SentencePieceTokenizer final : public Tokenizer {
 public:
  explicit SentencePieceTokenizer(const std::string &path) : api_(sentencepiece_module()), path_(path) {
    // The library opens the file itself: the input rule first (a FIFO would block it forever).
    const std::string problem = regular_file_problem(path);
    ZF_REQUIRE(problem.empty(), "%s: cannot load the SentencePiece model: %s (set data.tokenizer_path to a "
               "tokenizer.model)", path.c_str(), problem.c_str());
    const char *error = nullptr;
    model_ = api_.load(path.c_str(), &error);
    ZF_REQUIRE(model_, "%s: cannot load the SentencePiece model: %s (set data.tokenizer_path to a tokenizer.model)",
               path.c_str(), error ? error : "unknown error");
  }
  ~SentencePieceTokenizer() override { api_.destroy(model_); }

  std::string name() const override { return "sentencepiece:" + path_; }

  std::vector<int64_t> encode(const std::string &text) const override {
    std::vector<int64_t> ids;
    auto sink = [](void *out, const int *data, size_t count) {
      static_cast<std::vector<int64_t> *>(out)->assign(data, data + count);
    };
    const char *error = api_.encode(model_, text.data(), text.size(), sink, &ids);
    ZF_REQUIRE(!error, "%s: SentencePiece cannot encode the text: %s", path_.c_str(), error);
    return ids;
  }

  std::string decode(const std::vector<int64_t> &ids) const override {
    std::vector<int> narrow;
    narrow.reserve(ids.size());
    for (int64_t id : ids) {
      ZF_REQUIRE(id >= 0 && id < vocab_size(), "%s: token id %lld is outside the vocabulary (%lld)", path_.c_str(),
                 (long long)id, (long long)vocab_size());
      narrow.push_back(int(id));
    }
    std::string text;
    auto sink = [](void *out, const char *data, size_t size) { static_cast<std::string *>(out)->assign(data, size); };
    const char *error = api_.decode(model_, narrow.data(), narrow.size(), sink, &text);
    ZF_REQUIRE(!error, "%s: SentencePiece cannot decode: %s", path_.c_str(), error);
    return text;
  }

  int64_t vocab_size() const override { return api_.piece_size(model_); }
  std::optional<int64_t> eos_id() const override { return present(api_.eos_id(model_)); }
  std::optional<int64_t> bos_id() const override { return present(api_.bos_id(model_)); }
  std::optional<int64_t> pad_id() const override { return present(api_.pad_id(model_)); }

 private:
  const zf_sp_api &api_;
  std::string path_;
  void *model_ = nullptr;
};

}  // namespace

std::unique_ptr<Tokenizer> load_sentencepiece_tokenizer(const std::string &path) {
  return std::make_unique<SentencePieceTokenizer>(path);
}

}  // namespace zf
