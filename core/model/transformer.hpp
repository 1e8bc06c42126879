// transformer.hpp: what GPT-2 and the Llama family share: the block structure the engine drives,
// the parameter registry (Hugging Face names, flags, initialization), the loss, and activation
// checkpointing.
//
// Blocks: 0 = embeddings (token ids [B, T] -> hidden [B, T, H]); 1..L = transformer layers;
// L + 1 = final norm and output head (-> logits [B, T, vocab]). A tied head reuses block 0's
// embedding, which is listed once, in block 0. forward_loss runs the head and the loss together in
// chunks (model/fused_loss.hpp) unless model.fused = false.
//
// Parameters are plain tensors, not torch::nn modules; the engine re-points them into its flat
// buffers with set_data (2-D weights become transposed, column-contiguous views), so every forward
// here must accept non-contiguous parameters.
#pragma once

#include "model/fused_experts.hpp"
#include "model/fused_loss.hpp"
#include "model/model.hpp"
#include "model/param_source.hpp"
#include "model/transformer_shape.hpp"

namespace zf {

// A parameter as Hugging Face stores it: GPT-2's Conv1D weights are W^T ([in, out]); Qwen3.5-MoE's
// experts are slices of 3-D tensors (fused_experts.hpp), where a checkpoint may also hold them as `name`.
struct HfTensor {
  std::string name;
  torch::Tensor tensor;  // the model's own parameter, [out, in] for linear weights
  bool transposed = false;
  FusedSlice fused;
};

class TransformerModel : public Model {
 public:
  std::string name() const override { return options_.shape.type; }
  std::vector<std::string> block_names() const override { return block_names_; }
  std::vector<ModelParameter> parameters() override { return parameters_; }
  torch::Tensor forward_block(size_t block, const torch::Tensor &hidden, const Batch &batch) override;
  // Mean cross-entropy (fp32) over positions whose target is not kIgnoreIndex; 0 when none count.
  torch::Tensor loss(const torch::Tensor &logits, const Batch &batch) override;
  // The same loss from the last layer's output, never holding the whole logits (model.fused).
  torch::Tensor forward_loss(const torch::Tensor &hidden, const Batch &batch) override;
  void train(bool on) override { training_ = on; }
  std::vector<size_t> tied_blocks(size_t block) const override {
    if (options_.shape.tie_embeddings && block + 1 == block_names_.size() && block != 0) return {0};
    return {};
  }

  const TransformerShape &shape() const { return options_.shape; }
  const TransformerOptions &options() const { return options_; }
  torch::Dtype dtype() const { return dtype_; }
  std::vector<HfTensor> hf_tensors() const;

  // The three kinds of block; public for the activation-checkpointing function. `packed`: the
  // batch's documents where it packs several per row (positions, attention, recurrent state).
  virtual torch::Tensor embed(const torch::Tensor &ids, const PackedDocuments &packed) = 0;
  virtual torch::Tensor layer(int64_t index, const torch::Tensor &hidden, const PackedDocuments &packed) = 0;
  torch::Tensor head(const torch::Tensor &hidden) {
    return output_logits(final_norm(hidden), head_weight(), logits_transform());
  }
  // The head's parts: the final norm, the output projection's weight [vocab, hidden] (the
  // embedding when tied), what the family does to the logits after it.
  virtual torch::Tensor final_norm(const torch::Tensor &hidden) = 0;
  virtual torch::Tensor head_weight() const = 0;
  virtual LogitsTransform logits_transform() const { return {}; }
  const std::vector<torch::Tensor> &block_parameters(size_t block) const { return block_tensors_[block]; }

  // The random initial values of the parameters (zeros for biases, ones for norms), whose seeds
  // were drawn while the model was built; with init_from the checkpoint's values replace them
  // (hf_checkpoint.hpp) and this source fills zeros. Valid while the model lives.
  std::unique_ptr<ParameterSource> initial_values() const;

 protected:
  explicit TransformerModel(TransformerOptions options);

  enum class Init {
    embedding,  // N(0, 0.02); a lookup table, not a matrix (no column storage)
    linear,     // N(0, 0.02), a W[out, in] matrix
    residual,   // N(0, 0.02 / sqrt(2 * layers)): projections that write into the residual stream
    bias,       // zeros, no weight decay
    norm,       // ones, no weight decay
    zero_norm,  // zeros, no weight decay: a norm that scales by (1 + w) (Gemma)
    log_decay,  // log(A) with A spread evenly over [1, 16] across its entries, no weight decay: a
                // Gated DeltaNet's per-head decay rate (transformers draws A uniformly from that range)
  };
  // Registers and returns the parameter, a tensor with no memory yet (param_source.hpp), and
  // draws its seed from torch's global generator (random values are drawn in fp32, then cast, so
  // both dtypes start from the same values); registration order is the engine's order.
  // `stacked`: a 3-D [E, in, out] linear or residual weight, E matrices W_e = [e].t() side by side
  // (gpt-oss's fused experts): a matrix [out, E x in] to the engine, stored column by column
  // (flat_buffers.hpp), so selectors choose among each expert's input columns.
  torch::Tensor add(const std::string &name, std::vector<int64_t> sizes, uint32_t block, Init init,
                    bool hf_transposed = false, bool stacked = false);
  // The blocks: "embeddings", one per layer named layer_prefix + index, then "head".
  void set_block_names(const std::string &layer_prefix);
  double dropout_p() const { return training_ ? options_.dropout : 0.0; }
  torch::Tensor dropout(const torch::Tensor &x) const {
    return dropout_p() > 0 ? torch::dropout(x, dropout_p(), /*train=*/true) : x;
  }

 private:
  TransformerOptions options_;
  torch::Dtype dtype_;
  bool training_ = true;
  std::vector<std::string> block_names_;
  std::vector<ModelParameter> parameters_;
  std::vector<bool> hf_transposed_;                     // parallel to parameters_
  struct Recipe {
    Init init;
    uint64_t seed;  // of random values (none with init_from)
    double std;
  };
  std::vector<Recipe> recipes_;                          // parallel to parameters_
  std::vector<std::vector<torch::Tensor>> block_tensors_;  // parameters per block
};

std::unique_ptr<TransformerModel> make_gpt2(const TransformerOptions &options);
// The families of the Llama lineage (model/families/), one layer composed by the shape's features.
std::unique_ptr<TransformerModel> make_decoder(const TransformerOptions &options);
// Gemma 4's layers (gemma4.cpp), whose per-layer inputs and shared keys and values travel between blocks.
std::unique_ptr<TransformerModel> make_gemma4(const TransformerOptions &options);
// make_transformer's parameters hold their initial values (with init_from: zeros until the
// checkpoint is loaded); make_unallocated_transformer's have shapes only (initial_values() fills them).
std::unique_ptr<TransformerModel> make_transformer(const TransformerOptions &options);
std::unique_ptr<TransformerModel> make_unallocated_transformer(const TransformerOptions &options);

}  // namespace zf
