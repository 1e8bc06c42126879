// GPT-2 (Radford et al. 2019) as Hugging Face's GPT2LMHeadModel computes it: learned positions,
// pre-LayerNorm blocks, tanh-approximated GELU, tied output head by default.
#include "model/attention.hpp"
#include "model/transformer.hpp"

#include "runtime/error.hpp"

namespace zf {
namespace {

class Gpt2 final : public TransformerModel {
 public:
  explicit Gpt2(const TransformerOptions &options) : TransformerModel(options) {
    const TransformerShape &s = shape();
    int64_t h = s.hidden, inner = s.intermediate;
    uint32_t head_block = uint32_t(s.layers + 1);
    set_block_names("transformer.h.");

    wte_ = add("transformer.wte.weight", {s.vocab, h}, 0, Init::embedding);
    wpe_ = add("transformer.wpe.weight", {s.max_seq, h}, 0, Init::embedding);
    for (int64_t i = 0; i < s.layers; ++i) {
      std::string p = "transformer.h." + std::to_string(i) + ".";
      uint32_t b = uint32_t(i + 1);
      Layer l;
      // HF's Conv1D stores these weights [in, out]; ours are [out, in] (hf_transposed).
      l.ln_1_weight = add(p + "ln_1.weight", {h}, b, Init::norm);
      l.ln_1_bias = add(p + "ln_1.bias", {h}, b, Init::bias);
      l.attn_weight = add(p + "attn.c_attn.weight", {3 * h, h}, b, Init::linear, true);
      l.attn_bias = add(p + "attn.c_attn.bias", {3 * h}, b, Init::bias);
      l.attn_proj_weight = add(p + "attn.c_proj.weight", {h, h}, b, Init::residual, true);
      l.attn_proj_bias = add(p + "attn.c_proj.bias", {h}, b, Init::bias);
      l.ln_2_weight = add(p + "ln_2.weight", {h}, b, Init::norm);
      l.ln_2_bias = add(p + "ln_2.bias", {h}, b, Init::bias);
      l.fc_weight = add(p + "mlp.c_fc.weight", {inner, h}, b, Init::linear, true);
      l.fc_bias = add(p + "mlp.c_fc.bias", {inner}, b, Init::bias);
      l.mlp_proj_weight = add(p + "mlp.c_proj.weight", {h, inner}, b, Init::residual, true);
      l.mlp_proj_bias = add(p + "mlp.c_proj.bias", {h}, b, Init::bias);
      layers_.push_back(l);
    }
    ln_f_weight_ = add("transformer.ln_f.weight", {h}, head_block, Init::norm);
    ln_f_bias_ = add("transformer.ln_f.bias", {h}, head_block, Init::bias);
    lm_head_ = s.tie_embeddings ? wte_ : add("lm_head.weight", {s.vocab, h}, head_block, Init::linear);
  }

  torch::Tensor embed(const torch::Tensor &ids, const PackedDocuments &packed) override {
    int64_t length = ids.size(1);
    // With init_from, the checkpoint's config.json fixes the table's size: only the data can change.
    bool fixed = !options().init_from.empty();
    ZF_REQUIRE(length <= shape().max_seq,
               "sequences of %lld tokens exceed GPT-2's position table (%s = %lld): set data.seq_len to at most "
               "%lld%s",
               (long long)length, fixed ? "n_positions in model.init_from's config.json" : "model.max_seq",
               (long long)shape().max_seq, (long long)shape().max_seq, fixed ? "" : " or raise model.max_seq");
    // Packed documents restart their positions (each is below the row's length).
    torch::Tensor positions = packed.defined() ? packed.positions.to(ids.device()) : torch::arange(length, ids.options());
    torch::Tensor x = torch::embedding(wte_, ids) + torch::embedding(wpe_, positions);
    return dropout(x);
  }

  torch::Tensor layer(int64_t index, const torch::Tensor &x, const PackedDocuments &packed) override {
    const Layer &l = layers_[size_t(index)];
    const TransformerShape &s = shape();
    int64_t batch = x.size(0), length = x.size(1), h = s.hidden;
    torch::Tensor normed = torch::layer_norm(x, {h}, l.ln_1_weight, l.ln_1_bias, s.norm_eps);
    std::vector<torch::Tensor> qkv = torch::linear(normed, l.attn_weight, l.attn_bias).split(h, -1);
    auto heads = [&](const torch::Tensor &t) { return t.view({batch, length, s.heads, s.head_dim()}).transpose(1, 2); };
    AttentionOptions options;
    options.dropout = dropout_p();
    options.documents = &packed;
    torch::Tensor attended = causal_attention(heads(qkv[0]), heads(qkv[1]), heads(qkv[2]), options);
    attended = attended.transpose(1, 2).reshape({batch, length, h});
    torch::Tensor residual =
        x + dropout(torch::linear(attended, l.attn_proj_weight, l.attn_proj_bias));
    normed = torch::layer_norm(residual, {h}, l.ln_2_weight, l.ln_2_bias, s.norm_eps);
    torch::Tensor inner = torch::gelu(torch::linear(normed, l.fc_weight, l.fc_bias), "tanh");
    return residual + dropout(torch::linear(inner, l.mlp_proj_weight, l.mlp_proj_bias));
  }

  torch::Tensor final_norm(const torch::Tensor &x) override {
    return torch::layer_norm(x, {shape().hidden}, ln_f_weight_, ln_f_bias_, shape().norm_eps);
  }
  torch::Tensor head_weight() const override { return lm_head_; }

 private:
  struct Layer {
    torch::Tensor ln_1_weight, ln_1_bias, attn_weight, attn_bias, attn_proj_weight, attn_proj_bias;
    torch::Tensor ln_2_weight, ln_2_bias, fc_weight, fc_bias, mlp_proj_weight, mlp_proj_bias;
  };
  torch::Tensor wte_, wpe_, ln_f_weight_, ln_f_bias_, lm_head_;
  std::vector<Layer> layers_;
};

}  // namespace

std::unique_ptr<TransformerModel> make_gpt2(const TransformerOptions &options) {
  return std::make_unique<Gpt2>(options);
}

}  // namespace zf
