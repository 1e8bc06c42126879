#include "model/linear_stack.hpp"

#include "model/param_source.hpp"

#include <cmath>

namespace zf {
namespace {

class LinearStack final : public Model {
 public:
  LinearStack(int64_t hidden, int64_t layers, torch::Dtype dtype, bool allocate) {
    // torch.nn.Linear's default init: U(-1/sqrt(in), 1/sqrt(in)) for weight and bias.
    double bound = 1.0 / std::sqrt(double(hidden));
    for (int64_t i = 0; i < layers; ++i) {
      torch::NoGradGuard no_grad;
      if (!allocate) {  // shapes only
        weights_.push_back(unallocated_tensor({hidden, hidden}, dtype));
        biases_.push_back(unallocated_tensor({hidden}, dtype));
        continue;
      }
      weights_.push_back(torch::empty({hidden, hidden}).uniform_(-bound, bound).to(dtype).requires_grad_());
      biases_.push_back(torch::empty({hidden}).uniform_(-bound, bound).to(dtype).requires_grad_());
    }
  }

  std::string name() const override { return "linear_stack"; }

  std::vector<std::string> block_names() const override {
    std::vector<std::string> names;
    for (size_t i = 0; i < weights_.size(); ++i) names.push_back("linears." + std::to_string(i));
    return names;
  }

  std::vector<ModelParameter> parameters() override {
    std::vector<ModelParameter> params;
    for (size_t i = 0; i < weights_.size(); ++i) {
      std::string prefix = "linears." + std::to_string(i);
      params.push_back({prefix + ".weight", weights_[i], uint32_t(i), true, false});
      params.push_back({prefix + ".bias", biases_[i], uint32_t(i), false, true});
    }
    return params;
  }

  torch::Tensor forward_block(size_t block, const torch::Tensor &hidden, const Batch &) override {
    return torch::addmm(biases_[block], hidden.to(weights_[block].scalar_type()), weights_[block].t());
  }

  torch::Tensor loss(const torch::Tensor &output, const Batch &batch) override {
    return torch::nn::functional::cross_entropy(output.to(torch::kFloat32), batch.targets);
  }

  void train(bool) override {}

 private:
  std::vector<torch::Tensor> weights_, biases_;
};

}  // namespace

std::unique_ptr<Model> make_linear_stack(int64_t hidden, int64_t layers, torch::Dtype dtype) {
  return std::make_unique<LinearStack>(hidden, layers, dtype, true);
}

std::unique_ptr<Model> make_unallocated_linear_stack(int64_t hidden, int64_t layers, torch::Dtype dtype) {
  return std::make_unique<LinearStack>(hidden, layers, dtype, false);
}

}  // namespace zf
