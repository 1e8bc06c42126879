// The byte tokenizer: every byte is its own token, so any byte string (valid UTF-8 or not)
// round-trips. Id 256 is EOS when enabled; it decodes to nothing, like a control symbol.
#include "tokenizer/tokenizer.hpp"

#include "runtime/error.hpp"

namespace zf {
namespace {

constexpr int64_t kByteEos = 256;

class ByteTokenizer final : public Tokenizer {
 public:
  explicit ByteTokenizer(bool eos) : eos_(eos) {}

  std::string name() const override { return "byte"; }

  std::vector<int64_t> encode(const std::string &text) const override {
    std::vector<int64_t> ids(text.size());
    for (size_t i = 0; i < text.size(); ++i) ids[i] = uint8_t(text[i]);
    return ids;
  }

  std::string decode(const std::vector<int64_t> &ids) const override {
    std::string text;
    text.reserve(ids.size());
    for (int64_t id : ids) {
      if (eos_ && id == kByteEos) continue;
      ZF_REQUIRE(id >= 0 && id < 256, "byte tokenizer: token id %lld is not a byte (vocab %lld)", (long long)id,
                 (long long)vocab_size());
      text += char(uint8_t(id));
    }
    return text;
  }

  int64_t vocab_size() const override { return eos_ ? 257 : 256; }
  std::optional<int64_t> eos_id() const override { return eos_ ? std::optional<int64_t>(kByteEos) : std::nullopt; }
  std::optional<int64_t> bos_id() const override { return std::nullopt; }
  std::optional<int64_t> pad_id() const override { return std::nullopt; }

 private:
  bool eos_;
};

}  // namespace

std::unique_ptr<Tokenizer> make_byte_tokenizer(bool eos) { return std::make_unique<ByteTokenizer>(eos); }

}  // namespace zf
