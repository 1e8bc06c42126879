// The random data set of the ZenFlow benchmark workload: a fixed set of Gaussian inputs with
// uniform random labels, drawn from its own generator so it does not depend on model init.
#include "data/data_source.hpp"

#include "runtime/error.hpp"

namespace zf {
namespace {

class RandomData final : public DataSource {
 public:
  RandomData(int64_t samples, int64_t features, int64_t classes, uint64_t seed) {
    auto generator = at::make_generator<at::CPUGeneratorImpl>(seed);
    inputs_ = at::normal(0.0, 1.0, {samples, features}, generator);
    targets_ = at::randint(classes, {samples}, generator, torch::kInt64);
  }

  Batch batch(int64_t chunk, int64_t micro_batch) override {
    int64_t samples = inputs_.size(0);
    auto index = (torch::arange(micro_batch, torch::kInt64) + chunk * micro_batch).remainder(samples);
    Batch batch;
    batch.inputs = inputs_.index_select(0, index);
    batch.targets = targets_.index_select(0, index);
    batch.samples = micro_batch;
    batch.tokens = micro_batch;
    return batch;
  }

 private:
  torch::Tensor inputs_, targets_;
};

}  // namespace

std::unique_ptr<DataSource> make_data_source(const Config &config) {
  std::string type = config.string("data", "type");
  if (type == "random") {
    ZF_REQUIRE(config.string("model", "type") == "linear_stack",
               "%s: data.type = \"random\" feeds linear_stack models only", config.where("data", "type").str().c_str());
    int64_t hidden = config.integer("model", "hidden");
    return std::make_unique<RandomData>(config.integer("data", "samples"), hidden, hidden,
                                        uint64_t(config.integer("run", "seed")) + 1);
  }
  throw Error(format("%s: data.type = \"%s\" is not built into this zfcore", config.where("data", "type").str().c_str(),
                     type.c_str()));
}

}  // namespace zf
