// The random data set of the ZenFlow benchmark workload: a fixed set of Gaussian inputs with
// uniform random labels, drawn from its own generator so it does not depend on model init.
// Its eval split is a separate draw of round(samples * eval_fraction) examples.
#include "data/data_source.hpp"

#include "runtime/error.hpp"

#include <cmath>

namespace zf {
namespace {

class RandomData final : public DataSource {
 public:
  RandomData(int64_t samples, int64_t features, int64_t classes, uint64_t seed, Split split) : split_(split) {
    auto generator = at::make_generator<at::CPUGeneratorImpl>(seed);
    inputs_ = at::normal(0.0, 1.0, {samples, features}, generator);
    targets_ = at::randint(classes, {samples}, generator, torch::kInt64);
  }

  Batch batch(int64_t chunk, int64_t micro_batch) override {
    int64_t samples = inputs_.size(0);
    int64_t rows = micro_batch;
    if (split_ == Split::eval) {
      ZF_REQUIRE(chunk * micro_batch < samples, "eval chunk %lld is past the end of the eval split (%lld samples)",
                 (long long)chunk, (long long)samples);
      rows = std::min(micro_batch, samples - chunk * micro_batch);
    }
    auto index = (torch::arange(rows, torch::kInt64) + chunk * micro_batch).remainder(samples);
    Batch batch;
    batch.inputs = inputs_.index_select(0, index);
    batch.targets = targets_.index_select(0, index);
    batch.samples = rows;
    batch.tokens = rows;
    return batch;
  }

  int64_t size() const override { return inputs_.size(0); }
  int64_t vocab_size() const override { return 0; }

 private:
  Split split_;
  torch::Tensor inputs_, targets_;
};

}  // namespace

std::unique_ptr<DataSource> make_random_data(const RunConfig &config, Split split) {
  ZF_REQUIRE(config.string("model", "type") == "linear_stack", "%s: data.type = \"random\" feeds linear_stack models only",
             config.where("data", "type").str().c_str());
  int64_t hidden = config.integer("model", "hidden");
  int64_t samples = config.integer("data", "samples");
  uint64_t seed = uint64_t(config.integer("run", "seed"));
  if (split == Split::train) return std::make_unique<RandomData>(samples, hidden, hidden, seed + 1, split);
  double fraction = config.real("data", "eval_fraction");
  if (fraction <= 0) return nullptr;
  int64_t held_out = std::max<int64_t>(1, std::llround(double(samples) * fraction));
  return std::make_unique<RandomData>(held_out, hidden, hidden, seed + 3, split);
}

}  // namespace zf
