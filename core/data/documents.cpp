// The SequenceSet of documents.hpp.
#include "data/documents.hpp"

#include "model/model.hpp"
#include "runtime/error.hpp"

#include <algorithm>

namespace zf {

void Documents::add(const std::vector<int64_t> &tokens, const std::vector<uint8_t> &flags) {
  ZF_REQUIRE(tokens.size() == flags.size(), "internal: %zu tokens with %zu loss flags", tokens.size(), flags.size());
  ids.insert(ids.end(), tokens.begin(), tokens.end());
  counted.insert(counted.end(), flags.begin(), flags.end());
  start.push_back(int64_t(ids.size()));
}

namespace {

class DocumentSequences final : public SequenceSet {
 public:
  DocumentSequences(Documents documents, int64_t seq_len, int64_t vocab, int64_t pad, std::string what)
      : documents_(std::move(documents)), seq_len_(seq_len), vocab_(vocab), pad_(pad), what_(std::move(what)) {}

  int64_t count() const override { return documents_.count(); }
  int64_t seq_len() const override { return seq_len_; }
  int64_t vocab_size() const override { return vocab_; }

  int64_t fill(int64_t index, int64_t *inputs, int64_t *targets) const override {
    const int64_t first = documents_.start[size_t(index)];
    const int32_t *ids = documents_.ids.data() + first;
    const uint8_t *counted = documents_.counted.data() + first;
    const int64_t length = std::min(documents_.length(index), seq_len_ + 1);
    for (int64_t t = 0; t < seq_len_; ++t) {
      inputs[t] = t < length ? ids[t] : pad_;
      targets[t] = t + 1 < length && counted[t + 1] ? ids[t + 1] : kIgnoreIndex;
    }
    return std::min(length, seq_len_);
  }

  std::string describe() const override {
    return format("%s: %lld examples, %zu tokens, padded or truncated to %lld", what_.c_str(), (long long)count(),
                  documents_.ids.size(), (long long)seq_len_);
  }

 private:
  Documents documents_;
  int64_t seq_len_, vocab_, pad_;
  std::string what_;
};

}  // namespace

std::shared_ptr<const SequenceSet> make_document_sequences(Documents documents, int64_t seq_len, int64_t vocab,
                                                           int64_t pad, std::string what) {
  return std::make_shared<DocumentSequences>(std::move(documents), seq_len, vocab, pad, std::move(what));
}

}  // namespace zf
