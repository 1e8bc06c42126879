// The Llama family as Hugging Face's LlamaForCausalLM and Qwen2ForCausalLM compute it: RMSNorm,
// rotary position embeddings (half-split rotation), grouped-query attention, SwiGLU MLP, no biases
// except Qwen2's q/k/v biases, untied head unless tie_embeddings.
#include "model/transformer.hpp"

#include <ATen/Context.h>

namespace zf {
namespace {

class Llama final : public TransformerModel {
 public:
  explicit Llama(const TransformerOptions &options) : TransformerModel(options) {
    const TransformerShape &s = shape();
    int64_t h = s.hidden, q = s.heads * s.head_dim(), kv = s.kv_heads * s.head_dim();
    uint32_t head_block = uint32_t(s.layers + 1);
    set_block_names("model.layers.");

    embed_tokens_ = add("model.embed_tokens.weight", {s.vocab, h}, 0, Init::embedding);
    for (int64_t i = 0; i < s.layers; ++i) {
      std::string p = "model.layers." + std::to_string(i) + ".";
      uint32_t b = uint32_t(i + 1);
      Layer l;
      l.input_norm = add(p + "input_layernorm.weight", {h}, b, Init::norm);
      l.q_weight = add(p + "self_attn.q_proj.weight", {q, h}, b, Init::linear);
      if (s.qkv_bias) l.q_bias = add(p + "self_attn.q_proj.bias", {q}, b, Init::bias);
      l.k_weight = add(p + "self_attn.k_proj.weight", {kv, h}, b, Init::linear);
      if (s.qkv_bias) l.k_bias = add(p + "self_attn.k_proj.bias", {kv}, b, Init::bias);
      l.v_weight = add(p + "self_attn.v_proj.weight", {kv, h}, b, Init::linear);
      if (s.qkv_bias) l.v_bias = add(p + "self_attn.v_proj.bias", {kv}, b, Init::bias);
      l.o_weight = add(p + "self_attn.o_proj.weight", {h, q}, b, Init::residual);
      l.post_attention_norm = add(p + "post_attention_layernorm.weight", {h}, b, Init::norm);
      l.gate_weight = add(p + "mlp.gate_proj.weight", {s.intermediate, h}, b, Init::linear);
      l.up_weight = add(p + "mlp.up_proj.weight", {s.intermediate, h}, b, Init::linear);
      l.down_weight = add(p + "mlp.down_proj.weight", {h, s.intermediate}, b, Init::residual);
      layers_.push_back(l);
    }
    norm_ = add("model.norm.weight", {h}, head_block, Init::norm);
    lm_head_ = s.tie_embeddings ? embed_tokens_ : add("lm_head.weight", {s.vocab, h}, head_block, Init::linear);
  }

  torch::Tensor embed(const torch::Tensor &ids) override { return torch::embedding(embed_tokens_, ids); }

  torch::Tensor layer(int64_t index, const torch::Tensor &x) override {
    const Layer &l = layers_[size_t(index)];
    const TransformerShape &s = shape();
    int64_t batch = x.size(0), length = x.size(1), d = s.head_dim();
    torch::Tensor normed = rms_norm(x, l.input_norm);
    auto heads = [&](const torch::Tensor &t, int64_t count) {
      return t.view({batch, length, count, d}).transpose(1, 2);
    };
    torch::Tensor q = heads(torch::linear(normed, l.q_weight, l.q_bias), s.heads);
    torch::Tensor k = heads(torch::linear(normed, l.k_weight, l.k_bias), s.kv_heads);
    torch::Tensor v = heads(torch::linear(normed, l.v_weight, l.v_bias), s.kv_heads);
    // rotate_half(t) * sin as one roll: roll(t) * [-sin | sin] has the same bits, in fewer ops (the
    // backward of a 1.5B step was launch-bound on the host: docs/gpu.md).
    const auto &[cos, signed_sin] = rotary(length, x);
    q = q * cos + q.roll(d / 2, -1) * signed_sin;
    k = k * cos + k.roll(d / 2, -1) * signed_sin;
    // enable_gqa lets each group of heads / kv_heads query heads share one key/value head
    // without materializing repeated keys and values. Under deterministic kernels
    // (run.deterministic) the keys and values are repeated instead: attention with grouped heads
    // may pick a kernel that accumulates with atomics, plain attention has a deterministic one.
    bool grouped = s.kv_heads != s.heads;
    if (grouped && at::globalContext().deterministicAlgorithms()) {
      auto repeat = [&](const torch::Tensor &t) {
        return t.unsqueeze(2).expand({batch, s.kv_heads, s.heads / s.kv_heads, length, d}).reshape({batch, s.heads, length, d});
      };
      k = repeat(k);
      v = repeat(v);
      grouped = false;
    }
    torch::Tensor attended = at::scaled_dot_product_attention(q, k, v, {}, dropout_p(), /*is_causal=*/true,
                                                              std::nullopt, /*enable_gqa=*/grouped);
    attended = attended.transpose(1, 2).reshape({batch, length, s.heads * d});
    torch::Tensor residual = x + torch::linear(attended, l.o_weight);
    normed = rms_norm(residual, l.post_attention_norm);
    torch::Tensor gated = torch::silu(torch::linear(normed, l.gate_weight)) * torch::linear(normed, l.up_weight);
    return residual + torch::linear(gated, l.down_weight);
  }

  torch::Tensor head(const torch::Tensor &x) override { return torch::linear(rms_norm(x, norm_), lm_head_); }

 private:
  struct Layer {
    torch::Tensor input_norm, q_weight, q_bias, k_weight, k_bias, v_weight, v_bias, o_weight;
    torch::Tensor post_attention_norm, gate_weight, up_weight, down_weight;
  };

  // Normalized in fp32, cast back, then scaled: the order HF uses, which matters in bf16. ATen's
  // rms_norm without a weight does the first two: the same ops on the CPU (the same bits), one fused
  // kernel each way on a GPU.
  torch::Tensor rms_norm(const torch::Tensor &x, const torch::Tensor &weight) const {
    return weight * at::rms_norm(x, {x.size(-1)}, std::nullopt, shape().norm_eps);
  }

  // cos and [-sin | sin] [T, head_dim] of the rotation angles position * theta^(-2i/d), computed in
  // fp32 and cached for the last (length, device, dtype) seen.
  const std::pair<torch::Tensor, torch::Tensor> &rotary(int64_t length, const torch::Tensor &like) {
    if (rotary_.first.defined() && rotary_.first.size(0) == length && rotary_.first.device() == like.device() &&
        rotary_.first.scalar_type() == like.scalar_type())
      return rotary_;
    torch::NoGradGuard no_grad;
    int64_t d = shape().head_dim();
    auto fp32 = torch::TensorOptions().dtype(torch::kFloat32).device(like.device());
    torch::Tensor inverse_frequency =
        torch::pow(shape().rope_theta, torch::arange(0, d, 2, fp32) / double(d)).reciprocal();
    torch::Tensor angles = torch::outer(torch::arange(length, fp32), inverse_frequency);
    torch::Tensor cos = angles.cos().to(like.scalar_type()), sin = angles.sin().to(like.scalar_type());
    rotary_ = {torch::cat({cos, cos}, -1), torch::cat({-sin, sin}, -1)};
    return rotary_;
  }

  torch::Tensor embed_tokens_, norm_, lm_head_;
  std::vector<Layer> layers_;
  std::pair<torch::Tensor, torch::Tensor> rotary_;
};

}  // namespace

std::unique_ptr<TransformerModel> make_llama(const TransformerOptions &options) {
  return std::make_unique<Llama>(options);
}

}  // namespace zf
