// The `synthetic` source: data.samples sequences of uniformly random ids below data.vocab, for
// benchmarks. Id t of sequence i is a hash of (run.seed, i, t), so nothing is stored.
#include "data/sequences.hpp"

#include "data/order.hpp"
#include "runtime/error.hpp"

namespace zf {
namespace {

class SyntheticSequences final : public SequenceSet {
 public:
  SyntheticSequences(int64_t count, int64_t seq_len, int64_t vocab, uint64_t seed)
      : count_(count), seq_len_(seq_len), vocab_(vocab), seed_(seed) {}

  int64_t count() const override { return count_; }
  int64_t seq_len() const override { return seq_len_; }
  int64_t vocab_size() const override { return vocab_; }

  int64_t fill(int64_t index, int64_t *inputs, int64_t *targets) const override {
    uint64_t base = mix64(seed_, uint64_t(index));
    for (int64_t t = 0; t <= seq_len_; ++t) {
      int64_t id = int64_t((unsigned __int128)mix64(base, uint64_t(t)) * uint64_t(vocab_) >> 64);
      if (t < seq_len_) inputs[t] = id;
      if (t > 0) targets[t - 1] = id;
    }
    return seq_len_;
  }

  std::string describe() const override {
    return format("synthetic: %lld random sequences of %lld ids below %lld", (long long)count_, (long long)seq_len_,
                  (long long)vocab_);
  }

 private:
  int64_t count_, seq_len_, vocab_;
  uint64_t seed_;
};

}  // namespace

std::shared_ptr<const SequenceSet> load_synthetic_sequences(const RunConfig &config) {
  int64_t vocab = config.integer("data", "vocab");
  ZF_REQUIRE(vocab > 0, "%s: data.type = \"synthetic\" needs data.vocab (the model's vocabulary size)",
             config.where("data", "vocab").str().c_str());
  return std::make_shared<SyntheticSequences>(config.integer("data", "samples"), config.integer("data", "seq_len"),
                                              vocab, uint64_t(config.integer("run", "seed")) + 2);
}

}  // namespace zf
