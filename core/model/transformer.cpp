#include "model/transformer.hpp"

#include "model/init.hpp"
#include "runtime/error.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace zf {
namespace {

// Activation checkpointing of one transformer layer: the forward runs without building a graph
// (autograd keeps only the layer's input), the backward runs the layer again with grad enabled and
// differentiates that, with the same packed documents. The layer's parameters are inputs of the
// function so that their gradients reach the engine's accumulators like any other.
struct CheckpointedLayer : torch::autograd::Function<CheckpointedLayer> {
  static torch::Tensor forward(torch::autograd::AutogradContext *ctx, const torch::Tensor &hidden,
                               at::TensorList /*parameters*/, TransformerModel *model, int64_t index,
                               const PackedDocuments &packed) {
    ctx->saved_data["model"] = int64_t(reinterpret_cast<intptr_t>(model));
    ctx->saved_data["index"] = index;
    ctx->saved_data["positions"] = packed.positions;
    ctx->saved_data["starts"] = packed.starts;
    ctx->saved_data["longest"] = packed.longest;
    ctx->save_for_backward({hidden});
    return model->layer(index, hidden, packed);  // grad mode is off inside Function::forward
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext *ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    auto *model = reinterpret_cast<TransformerModel *>(intptr_t(ctx->saved_data["model"].toInt()));
    int64_t index = ctx->saved_data["index"].toInt();
    torch::Tensor input = ctx->get_saved_variables()[0].detach().requires_grad_(true);
    const PackedDocuments packed{ctx->saved_data["positions"].toTensor(), ctx->saved_data["starts"].toTensor(),
                                 ctx->saved_data["longest"].toInt()};
    const std::vector<torch::Tensor> &parameters = model->block_parameters(size_t(index + 1));
    torch::Tensor output;
    {
      torch::AutoGradMode enable(true);
      output = model->layer(index, input, packed);
    }
    std::vector<torch::Tensor> inputs = {input};
    inputs.insert(inputs.end(), parameters.begin(), parameters.end());
    auto grads = torch::autograd::grad({output}, inputs, {grad_outputs[0]}, /*retain_graph=*/false,
                                       /*create_graph=*/false, /*allow_unused=*/true);
    grads.emplace_back();  // model pointer
    grads.emplace_back();  // index
    grads.emplace_back();  // packed documents
    return grads;
  }
};

}  // namespace

TransformerModel::TransformerModel(TransformerOptions options)
    : options_(std::move(options)),
      dtype_(options_.dtype == "bfloat16" ? torch::kBFloat16 : torch::kFloat32) {
  ZF_REQUIRE(options_.dtype == "float32" || options_.dtype == "bfloat16",
             "model.dtype = \"%s\": use float32 or bfloat16", options_.dtype.c_str());
}

void TransformerModel::set_block_names(const std::string &layer_prefix) {
  block_names_ = {"embeddings"};
  for (int64_t i = 0; i < shape().layers; ++i) block_names_.push_back(layer_prefix + std::to_string(i));
  block_names_.push_back("head");
  block_tensors_.assign(block_names_.size(), {});
}

torch::Tensor TransformerModel::add(const std::string &name, std::vector<int64_t> sizes, uint32_t block, Init init,
                                    bool hf_transposed, bool stacked) {
  ZF_REQUIRE(block < block_tensors_.size(), "internal: parameter %s in block %u of %zu", name.c_str(), block,
             block_tensors_.size());
  Recipe recipe{init, 0, 0.0};
  const bool no_decay = init == Init::bias || init == Init::norm || init == Init::zero_norm || init == Init::log_decay;
  if (!no_decay && options_.init_from.empty()) {
    recipe.std = init == Init::residual ? 0.02 / std::sqrt(2.0 * double(options_.shape.layers)) : 0.02;
    recipe.seed = draw_init_seed();
  }
  recipes_.push_back(recipe);
  torch::Tensor value = unallocated_tensor(sizes, dtype_);
  value.requires_grad_(true);
  bool matrix = (init == Init::linear || init == Init::residual) && (sizes.size() == 2 || (stacked && sizes.size() == 3));
  bool table = init == Init::embedding && sizes.size() == 2;
  parameters_.push_back(ModelParameter{name, value, block, matrix, no_decay, table});
  hf_transposed_.push_back(hf_transposed);
  block_tensors_[block].push_back(value);
  return value;
}

torch::Tensor TransformerModel::forward_block(size_t block, const torch::Tensor &hidden, const Batch &batch) {
  size_t last = block_names_.size() - 1;
  ZF_REQUIRE(block <= last, "internal: block %zu of a %zu-block model", block, block_names_.size());
  if (block == 0) {
    ZF_REQUIRE(hidden.dim() == 2 && hidden.scalar_type() == torch::kLong,
               "model %s takes token ids [batch, sequence] of int64, but the data gives %s %s: use a token data "
               "source", name().c_str(), c10::toString(hidden.scalar_type()), c10::str(hidden.sizes()).c_str());
    if (hidden.is_cpu() && hidden.numel() > 0) {  // on a GPU the check would stall the stream
      int64_t low = hidden.min().item<int64_t>(), high = hidden.max().item<int64_t>();
      ZF_REQUIRE(low >= 0 && high < shape().vocab,
                 "token id %lld is outside model.vocab = %lld: the tokenizer and the model disagree",
                 (long long)(low < 0 ? low : high), (long long)shape().vocab);
    }
    return embed(hidden, batch.packed);
  }
  if (block == last) return head(hidden);
  int64_t index = int64_t(block) - 1;
  const int64_t recomputed = options_.checkpoint_layers > 0 ? options_.checkpoint_layers : shape().layers;
  if (options_.activation_checkpointing && index < recomputed && torch::GradMode::is_enabled())
    return CheckpointedLayer::apply(hidden, at::TensorList(block_tensors_[block]), this, index, batch.packed);
  return layer(index, hidden, batch.packed);
}

namespace {

torch::Tensor flat_targets(const Batch &batch, const torch::Tensor &like, int64_t positions) {
  torch::Tensor targets = batch.targets.reshape({-1}).to(like.device(), torch::kLong);
  ZF_REQUIRE(targets.size(0) == positions, "the batch has %lld targets for %lld positions of logits",
             (long long)targets.size(0), (long long)positions);
  return targets;
}

}  // namespace

torch::Tensor TransformerModel::loss(const torch::Tensor &logits, const Batch &batch) {
  torch::Tensor flat = logits.reshape({-1, logits.size(-1)}).to(torch::kFloat32);
  torch::Tensor targets = flat_targets(batch, flat, flat.size(0));
  namespace F = torch::nn::functional;
  torch::Tensor total = F::cross_entropy(
      flat, targets, F::CrossEntropyFuncOptions().ignore_index(kIgnoreIndex).reduction(torch::kSum));
  // Dividing by at least one keeps a micro-batch without counted positions at loss 0, not NaN.
  torch::Tensor counted = (targets != kIgnoreIndex).sum().clamp_min(1).to(torch::kFloat32);
  return total / counted;
}

torch::Tensor TransformerModel::forward_loss(const torch::Tensor &hidden, const Batch &batch) {
  if (options_.fused == FusedKernels::off) return Model::forward_loss(hidden, batch);
  torch::Tensor x = final_norm(hidden);
  x = x.reshape({-1, x.size(-1)});
  return fused_linear_cross_entropy(x, head_weight(), flat_targets(batch, x, x.size(0)), logits_transform(), 0,
                                    options_.fused);
}

std::vector<HfTensor> TransformerModel::hf_tensors() const {
  std::vector<HfTensor> tensors;
  for (size_t i = 0; i < parameters_.size(); ++i)
    tensors.push_back(HfTensor{parameters_[i].name, parameters_[i].tensor, hf_transposed_[i],
                               fused_expert_slice(options_.shape, parameters_[i].name)});
  return tensors;
}

std::unique_ptr<ParameterSource> TransformerModel::initial_values() const {
  class InitialValues final : public ParameterSource {
   public:
    InitialValues(const std::vector<ModelParameter> &parameters, const std::vector<Recipe> &recipes)
        : parameters_(parameters), recipes_(recipes) {}
    void fill(size_t index, const StoredRegion &stored, torch::Tensor destination) const override {
      const Recipe &recipe = recipes_.at(index);
      const torch::Tensor &tensor = parameters_[index].tensor;
      const StoredRegion region = tensor.dim() == 3 ? stack_run(stored, tensor.size(2)) : stored;
      if (recipe.std > 0) {
        const auto [rows, cols] = matrix_shape(parameters_[index].tensor);
        fill_normal(recipe.seed, recipe.std, rows, cols, region, destination);
      } else if (recipe.init == Init::log_decay) {  // entries [x0, x0 + nx) of a vector
        const int64_t n = parameters_[index].tensor.numel();
        torch::Tensor at = torch::arange(region.x0, region.x0 + region.nx, torch::kFloat64);
        destination.copy_(torch::log(1 + 15 * at / double(std::max<int64_t>(n - 1, 1))));
      } else {
        destination.fill_(recipe.init == Init::norm ? 1.0 : 0.0);
      }
    }

   private:
    const std::vector<ModelParameter> &parameters_;
    const std::vector<Recipe> &recipes_;
  };
  return std::make_unique<InitialValues>(parameters_, recipes_);
}

std::unique_ptr<TransformerModel> make_unallocated_transformer(const TransformerOptions &options) {
  options.shape.validate("model");
  if (options.shape.features.gemma4.on) return make_gemma4(options);
  return options.shape.is_gpt2() ? make_gpt2(options) : make_decoder(options);
}

std::unique_ptr<TransformerModel> make_transformer(const TransformerOptions &options) {
  std::unique_ptr<TransformerModel> model = make_unallocated_transformer(options);
  allocate_parameters(model->parameters(), *model->initial_values());
  return model;
}

}  // namespace zf
