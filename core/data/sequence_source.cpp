// The token sources as DataSources: the held-out split, the per-epoch order and the batch
// tensors over a SequenceSet (see data_source.hpp for the chunk arithmetic).
#include "data/sequence_source.hpp"

#include "data/order.hpp"
#include "runtime/digest.hpp"
#include "runtime/error.hpp"

#include <algorithm>
#include <map>
#include <vector>

namespace zf {
namespace {

class SequenceSource final : public DataSource {
 public:
  SequenceSource(std::shared_ptr<const SequenceSet> set, std::vector<int64_t> members, Split split, bool shuffle,
                 uint64_t seed)
      : set_(std::move(set)), members_(std::move(members)), split_(split), shuffle_(shuffle), seed_(seed) {}

  Batch batch(int64_t chunk, int64_t micro_batch) override {
    ZF_REQUIRE(chunk >= 0 && micro_batch > 0, "data chunk %lld with micro-batch %lld: both must be positive",
               (long long)chunk, (long long)micro_batch);
    int64_t size = int64_t(members_.size());
    int64_t first = 0;
    ZF_REQUIRE(!__builtin_mul_overflow(chunk, micro_batch, &first) && first <= INT64_MAX - micro_batch,
               "data chunk %lld x micro-batch %lld overflows 64 bits; lower train.steps, grad_accum or micro_batch",
               (long long)chunk, (long long)micro_batch);
    int64_t rows = micro_batch;
    if (split_ == Split::eval) {
      ZF_REQUIRE(first < size, "eval chunk %lld starts at sequence %lld, past the end of the eval split (%lld sequences)",
                 (long long)chunk, (long long)first, (long long)size);
      rows = std::min(micro_batch, size - first);
    }
    int64_t seq_len = set_->seq_len();
    Batch batch;
    batch.inputs = torch::empty({rows, seq_len}, torch::kInt64);
    batch.targets = torch::empty({rows, seq_len}, torch::kInt64);
    torch::Tensor positions = torch::empty({rows, seq_len}, torch::kInt64);
    int64_t *inputs = batch.inputs.data_ptr<int64_t>();
    int64_t *targets = batch.targets.data_ptr<int64_t>();
    bool packed = rows > 0;
    for (int64_t row = 0; row < rows; ++row) {
      int64_t position = first + row;
      int64_t member = split_ == Split::eval ? position : order(position / size)[size_t(position % size)];
      batch.tokens += set_->fill(members_[size_t(member)], inputs + row * seq_len, targets + row * seq_len);
      packed = packed && set_->fill_positions(members_[size_t(member)], positions.data_ptr<int64_t>() + row * seq_len);
    }
    if (packed) batch.packed = packed_documents(positions);
    batch.samples = rows;
    return batch;
  }

  int64_t size() const override { return int64_t(members_.size()); }
  int64_t vocab_size() const override { return set_->vocab_size(); }

  std::string sampled_digest() const override {
    const int64_t size = int64_t(members_.size()), samples = std::min<int64_t>(size, 256), seq_len = set_->seq_len();
    uint64_t digest = digest_bytes(&size, sizeof size, kDigestSeed);
    std::vector<int64_t> row(size_t(2 * seq_len));
    for (int64_t i = 0; i < samples; ++i) {
      std::fill(row.begin(), row.end(), 0);
      try {
        set_->fill(members_[size_t(i * size / samples)], row.data(), row.data() + seq_len);
      } catch (const Error &) {
        // A sequence the run cannot read (an id outside the vocabulary) stops the step that reads it.
      }
      digest = digest_bytes(row.data(), row.size() * sizeof(int64_t), digest);
    }
    return format("%016llx", (unsigned long long)digest);
  }

 private:
  // The order of epoch `epoch`: a permutation seeded by (seed, epoch). A batch can straddle two
  // epochs, so the last two are kept.
  const std::vector<int64_t> &order(int64_t epoch) {
    auto it = orders_.find(epoch);
    if (it != orders_.end()) return it->second;
    if (orders_.size() >= 2) orders_.erase(orders_.begin());
    std::vector<int64_t> order;
    if (shuffle_) {
      order = permutation(int64_t(members_.size()), seed_, uint64_t(epoch));
    } else {
      order.resize(members_.size());
      for (size_t i = 0; i < order.size(); ++i) order[i] = int64_t(i);
    }
    return orders_.emplace(epoch, std::move(order)).first->second;
  }

  std::shared_ptr<const SequenceSet> set_;
  std::vector<int64_t> members_;  // indices into set_ that belong to this split, ascending
  Split split_;
  bool shuffle_;
  uint64_t seed_;
  std::map<int64_t, std::vector<int64_t>> orders_;
};

}  // namespace

std::unique_ptr<DataSource> make_sequence_source(std::shared_ptr<const SequenceSet> set, Split split,
                                                 double eval_fraction, bool shuffle, uint64_t seed) {
  SplitIndices indices = split_indices(set->count(), eval_fraction);
  if (split == Split::eval) {
    if (indices.eval.empty()) return nullptr;
    return std::make_unique<SequenceSource>(std::move(set), std::move(indices.eval), split, false, seed);
  }
  ZF_REQUIRE(!indices.train.empty(), "the data has %lld sequence(s), all held out for evaluation; lower data.eval_fraction",
             (long long)set->count());
  return std::make_unique<SequenceSource>(std::move(set), std::move(indices.train), split, shuffle, seed);
}

}  // namespace zf
