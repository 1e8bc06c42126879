// SentencePiece models (Llama-2's tokenizer.model) through Debian's libsentencepiece.
#include "tokenizer/tokenizer.hpp"

#include "runtime/error.hpp"

#include <sentencepiece_processor.h>

namespace zf {
namespace {

std::optional<int64_t> present(int id) { return id >= 0 ? std::optional<int64_t>(id) : std::nullopt; }

class SentencePieceTokenizer final : public Tokenizer {
 public:
  explicit SentencePieceTokenizer(const std::string &path) : path_(path) {
    auto status = processor_.Load(path);
    ZF_REQUIRE(status.ok(), "%s: cannot load the SentencePiece model: %s (set data.tokenizer_path to a tokenizer.model)",
               path.c_str(), status.ToString().c_str());
  }

  std::string name() const override { return "sentencepiece:" + path_; }

  std::vector<int64_t> encode(const std::string &text) const override {
    std::vector<int> ids;
    auto status = processor_.Encode(text, &ids);
    ZF_REQUIRE(status.ok(), "%s: SentencePiece cannot encode the text: %s", path_.c_str(), status.ToString().c_str());
    return std::vector<int64_t>(ids.begin(), ids.end());
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
    auto status = processor_.Decode(narrow, &text);
    ZF_REQUIRE(status.ok(), "%s: SentencePiece cannot decode: %s", path_.c_str(), status.ToString().c_str());
    return text;
  }

  int64_t vocab_size() const override { return processor_.GetPieceSize(); }
  std::optional<int64_t> eos_id() const override { return present(processor_.eos_id()); }
  std::optional<int64_t> bos_id() const override { return present(processor_.bos_id()); }
  std::optional<int64_t> pad_id() const override { return present(processor_.pad_id()); }

 private:
  std::string path_;
  sentencepiece::SentencePieceProcessor processor_;
};

}  // namespace

std::unique_ptr<Tokenizer> load_sentencepiece_tokenizer(const std::string &path) {
  return std::make_unique<SentencePieceTokenizer>(path);
}

}  // namespace zf
