// The SequenceSets of documents.hpp: one document per sequence, or several packed in each.
#include "data/documents.hpp"

#include "model/model.hpp"
#include "runtime/error.hpp"

#include <algorithm>
#include <deque>
#include <map>
#include <numeric>

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

  const Documents &documents() const { return documents_; }
  int64_t pad() const { return pad_; }
  const std::string &what() const { return what_; }

 private:
  Documents documents_;
  int64_t seq_len_, vocab_, pad_;
  std::string what_;
};

// data.packing: the documents of a DocumentSequences (shared, not copied), several per sequence.
// A sequence is its documents one after another, then padding (a document of its own whose targets
// are ignored); a document's last token predicts nothing, and one longer than seq_len keeps its
// first seq_len tokens.
class PackedSequences final : public SequenceSet {
 public:
  explicit PackedSequences(std::shared_ptr<const DocumentSequences> unpacked)
      : unpacked_(std::move(unpacked)), documents_(unpacked_->documents()), seq_len_(unpacked_->seq_len()) {
    pack();
  }

  int64_t count() const override { return int64_t(sequence_start_.size()) - 1; }
  int64_t seq_len() const override { return seq_len_; }
  int64_t vocab_size() const override { return unpacked_->vocab_size(); }

  int64_t fill(int64_t index, int64_t *inputs, int64_t *targets) const override {
    int64_t t = 0;
    for (int64_t r = sequence_start_[size_t(index)]; r < sequence_start_[size_t(index) + 1]; ++r) {
      const int64_t d = placed_[size_t(r)], first = documents_.start[size_t(d)], length = kept(d);
      for (int64_t i = 0; i < length; ++i, ++t) {
        inputs[t] = documents_.ids[size_t(first + i)];
        targets[t] = i + 1 < length && documents_.counted[size_t(first + i + 1)] ? documents_.ids[size_t(first + i + 1)]
                                                                                : kIgnoreIndex;
      }
    }
    const int64_t tokens = t;
    for (; t < seq_len_; ++t) {
      inputs[t] = unpacked_->pad();
      targets[t] = kIgnoreIndex;
    }
    return tokens;
  }

  bool fill_positions(int64_t index, int64_t *positions) const override {
    int64_t t = 0;
    for (int64_t r = sequence_start_[size_t(index)]; r < sequence_start_[size_t(index) + 1]; ++r)
      for (int64_t i = 0, length = kept(placed_[size_t(r)]); i < length; ++i) positions[t++] = i;
    for (int64_t i = 0; t < seq_len_; ++i) positions[t++] = i;
    return true;
  }

  std::string describe() const override {
    const double share = 100.0 * double(tokens_) / (double(count()) * double(seq_len_));
    std::string line = format("%s: %lld documents packed into %lld sequences of %lld tokens (best-fit decreasing, "
                              "each document attending only to itself): %.2f%% of the positions hold tokens",
                              unpacked_->what().c_str(), (long long)(int64_t(placed_.size())), (long long)count(),
                              (long long)seq_len_, share);
    if (cut_ > 0)
      line += format("; %lld documents longer than data.seq_len are cut to it (%lld tokens left out)", (long long)cut_,
                     (long long)cut_tokens_);
    if (empty_ > 0) line += format("; %lld empty documents left out", (long long)empty_);
    return line;
  }

 private:
  int64_t kept(int64_t d) const { return std::min(documents_.length(d), seq_len_); }

  // Best-fit decreasing, as TRL's "bfd" packing: the documents longest first (ties in the order
  // given), each into the open sequence with the least room that holds it (the oldest of equals),
  // else into a new one. Deterministic: the same documents give the same sequences.
  void pack() {
    std::vector<int64_t> order;
    for (int64_t d = 0; d < documents_.count(); ++d) {
      if (documents_.length(d) == 0) {
        ++empty_;
        continue;
      }
      order.push_back(d);
      tokens_ += kept(d);
      if (documents_.length(d) > seq_len_) {
        ++cut_;
        cut_tokens_ += documents_.length(d) - seq_len_;
      }
    }
    ZF_REQUIRE(!order.empty(), "%s: no document holds a token", unpacked_->what().c_str());
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return kept(a) > kept(b); });
    std::vector<std::vector<int64_t>> rows;
    std::map<int64_t, std::deque<size_t>> open;  // room left -> the sequences with that much, oldest first
    for (int64_t d : order) {
      const int64_t length = kept(d);
      auto fit = open.lower_bound(length);
      size_t row = rows.size();
      int64_t room = seq_len_;
      if (fit == open.end()) {
        rows.emplace_back();
      } else {
        row = fit->second.front();
        room = fit->first;
        fit->second.pop_front();
        if (fit->second.empty()) open.erase(fit);
      }
      rows[row].push_back(d);
      if (room > length) open[room - length].push_back(row);
    }
    sequence_start_.assign(1, 0);
    for (const std::vector<int64_t> &row : rows) {
      placed_.insert(placed_.end(), row.begin(), row.end());
      sequence_start_.push_back(int64_t(placed_.size()));
    }
  }

  std::shared_ptr<const DocumentSequences> unpacked_;
  const Documents &documents_;
  int64_t seq_len_;
  std::vector<int64_t> placed_;  // sequence s holds documents placed_[sequence_start_[s] .. sequence_start_[s + 1])
  std::vector<int64_t> sequence_start_;
  int64_t tokens_ = 0, cut_ = 0, cut_tokens_ = 0, empty_ = 0;
};

}  // namespace

std::shared_ptr<const SequenceSet> make_document_sequences(Documents documents, int64_t seq_len, int64_t vocab,
                                                           int64_t pad, std::string what) {
  return std::make_shared<DocumentSequences>(std::move(documents), seq_len, vocab, pad, std::move(what));
}

std::shared_ptr<const SequenceSet> pack_document_sequences(const std::shared_ptr<const SequenceSet> &set) {
  auto documents = std::dynamic_pointer_cast<const DocumentSequences>(set);
  return documents ? std::make_shared<PackedSequences>(std::move(documents)) : nullptr;
}

}  // namespace zf
