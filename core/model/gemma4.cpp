// Gemma 4's decoder (families/gemma4.cpp reads its config.json; gemma4_layout.hpp says where its layers
// differ). What passes from block to block is one tensor [B, T, width]: the hidden state, then each
// layer's per-layer input (hidden_size_per_layer_input channels a layer, computed from the token ids
// and the embeddings in block 0), then the keys and values of each layer that later layers reuse
// (num_kv_shared_layers), written by that layer. Each layer reads its slices and passes the rest on,
// so activation checkpointing, sharding and the engine's block hooks see an ordinary block chain, and
// the gradients of per-layer inputs and shared keys and values flow back through the stream.
#include "model/attention.hpp"
#include "model/fused_ops.hpp"
#include "model/gemma4_layout.hpp"
#include "model/gemma4_moe.hpp"
#include "model/rope.hpp"
#include "model/transformer.hpp"

#include <cmath>
#include <map>

namespace zf {
namespace {

class Gemma4 final : public TransformerModel {
 public:
  explicit Gemma4(const TransformerOptions &options) : TransformerModel(options) {
    const TransformerShape &s = shape();
    const Gemma4Spec &g = s.features.gemma4;
    const int64_t h = s.hidden, per = g.per_layer_hidden, all = s.layers * g.per_layer_hidden;
    set_block_names("model.layers.");
    embed_tokens_ = add("model.embed_tokens.weight", {s.vocab, h}, 0, Init::embedding);
    if (per > 0) {
      embed_per_layer_ = add("model.embed_tokens_per_layer.weight", {g.per_layer_vocab, all}, 0, Init::embedding);
      per_layer_projection_ = add("model.per_layer_model_projection.weight", {all, h}, 0, Init::linear);
      per_layer_norm_ = add("model.per_layer_projection_norm.weight", {per}, 0, Init::norm);
    }
    width_ = h + all;
    for (int64_t i = 0; i < s.layers; ++i) {  // a slot for each layer whose keys and values a later one reads
      const int64_t source = gemma4_kv_source(s, i);
      if (source != i && !slots_.count(source)) {
        slots_[source] = width_;
        width_ += 2 * gemma4_kv_heads(s, source) * gemma4_head_dim(s, source);
      }
    }
    for (int64_t i = 0; i < s.layers; ++i) {
      const std::string p = "model.layers." + std::to_string(i) + ".";
      const uint32_t b = uint32_t(i + 1);
      const int64_t d = gemma4_head_dim(s, i), q = s.heads * d, kv = gemma4_kv_heads(s, i) * d;
      const int64_t inner = gemma4_mlp_width(s, i);
      Layer l;
      l.scalar = add(p + "layer_scalar", {1}, b, Init::norm);
      l.q = add(p + "self_attn.q_proj.weight", {q, h}, b, Init::linear);
      l.q_norm = add(p + "self_attn.q_norm.weight", {d}, b, Init::norm);
      if (gemma4_kv_source(s, i) == i) {
        l.k_norm = add(p + "self_attn.k_norm.weight", {d}, b, Init::norm);
        l.k = add(p + "self_attn.k_proj.weight", {kv, h}, b, Init::linear);
        if (!gemma4_values_are_keys(s, i)) l.v = add(p + "self_attn.v_proj.weight", {kv, h}, b, Init::linear);
      }
      l.o = add(p + "self_attn.o_proj.weight", {h, q}, b, Init::residual);
      l.gate = add(p + "mlp.gate_proj.weight", {inner, h}, b, Init::linear);
      l.up = add(p + "mlp.up_proj.weight", {inner, h}, b, Init::linear);
      l.down = add(p + "mlp.down_proj.weight", {h, inner}, b, Init::residual);
      l.input_norm = add(p + "input_layernorm.weight", {h}, b, Init::norm);
      l.attention_out_norm = add(p + "post_attention_layernorm.weight", {h}, b, Init::norm);
      l.mlp_in_norm = add(p + "pre_feedforward_layernorm.weight", {h}, b, Init::norm);
      l.mlp_out_norm = add(p + "post_feedforward_layernorm.weight", {h}, b, Init::norm);
      if (g.experts > 0) {  // beside the MLP (gemma4_moe.hpp)
        const int64_t e = g.experts, wide = g.expert_intermediate;
        l.moe.router_proj = add(p + "router.proj.weight", {e, h}, b, Init::linear);
        l.moe.router_scale = add(p + "router.scale", {h}, b, Init::norm);
        l.moe.per_expert_scale = add(p + "router.per_expert_scale", {e}, b, Init::norm);
        for (int64_t x = 0; x < e; ++x) {  // one matrix each, read from and written to the 3-D tensors
          const std::string expert = p + "experts." + std::to_string(x) + ".";
          l.moe.experts.gate.push_back(add(expert + "gate_proj.weight", {wide, h}, b, Init::linear));
          l.moe.experts.up.push_back(add(expert + "up_proj.weight", {wide, h}, b, Init::linear));
          l.moe.experts.down.push_back(add(expert + "down_proj.weight", {h, wide}, b, Init::residual));
        }
        l.moe.dense_out_norm = add(p + "post_feedforward_layernorm_1.weight", {h}, b, Init::norm);
        l.moe.pre_norm = add(p + "pre_feedforward_layernorm_2.weight", {h}, b, Init::norm);
        l.moe.experts_out_norm = add(p + "post_feedforward_layernorm_2.weight", {h}, b, Init::norm);
      }
      if (per > 0) {
        l.per_layer_gate = add(p + "per_layer_input_gate.weight", {per, h}, b, Init::linear);
        l.per_layer_projection = add(p + "per_layer_projection.weight", {h, per}, b, Init::residual);
        l.per_layer_norm = add(p + "post_per_layer_input_norm.weight", {h}, b, Init::norm);
      }
      layers_.push_back(l);
    }
    norm_ = add("model.norm.weight", {h}, uint32_t(s.layers + 1), Init::norm);
    const uint32_t head = uint32_t(s.layers + 1);
    lm_head_ = s.tie_embeddings ? embed_tokens_ : add("lm_head.weight", {s.vocab, h}, head, Init::linear);
  }

  // The stream: the scaled embeddings, every layer's per-layer input, zeros where shared keys and values go.
  torch::Tensor embed(const torch::Tensor &ids, const PackedDocuments &) override {
    const TransformerShape &s = shape();
    const Gemma4Spec &g = s.features.gemma4;
    torch::Tensor x = scaled(torch::embedding(embed_tokens_, ids, options().padding_idx), std::sqrt(double(s.hidden)));
    std::vector<torch::Tensor> parts = {x};
    if (g.per_layer_hidden > 0) {
      const int64_t pad = options().padding_idx < g.per_layer_vocab ? options().padding_idx : -1;
      torch::Tensor tokens =
          scaled(torch::embedding(embed_per_layer_, ids, pad), std::sqrt(double(g.per_layer_hidden)));
      torch::Tensor context = torch::linear(x, per_layer_projection_) * (1 / std::sqrt(double(s.hidden)));
      context = norm(context.view({ids.size(0), ids.size(1), s.layers, g.per_layer_hidden}), per_layer_norm_);
      parts.push_back((context.flatten(2) + tokens) * (1 / std::sqrt(2.0)));
    }
    const int64_t carried = width_ - s.hidden - s.layers * g.per_layer_hidden;
    if (carried > 0) parts.push_back(torch::zeros({ids.size(0), ids.size(1), carried}, x.options()));
    return parts.size() == 1 ? x : torch::cat(parts, -1);
  }

  torch::Tensor layer(int64_t index, const torch::Tensor &stream, const PackedDocuments &packed) override {
    const TransformerShape &s = shape();
    const Gemma4Spec &g = s.features.gemma4;
    const Layer &l = layers_[size_t(index)];
    torch::Tensor x = stream.narrow(-1, 0, s.hidden), out = stream;
    torch::Tensor attended = attention(index, l, norm(x, l.input_norm), stream, out, packed);
    torch::Tensor h, mlp_in;
    std::tie(h, mlp_in) = add_rms_norm(x, norm(attended, l.attention_out_norm), l.mlp_in_norm,
                                       s.features.norm_weight, s.norm_eps, options().fused);
    torch::Tensor gated = gated_activation(torch::linear(mlp_in, l.gate), torch::linear(mlp_in, l.up), true,
                                           options().fused);
    torch::Tensor mixed = torch::linear(gated, l.down);
    if (l.moe.router_proj.defined()) {
      const bool grouped = moe_grouped_by_default(h, gemma4_moe_spec(l.moe, g.top_k));
      mixed = gemma4_moe(l.moe, h, mixed, g.top_k, s.norm_eps, options().fused, grouped);
    }
    h = h + norm(mixed, l.mlp_out_norm);
    if (g.per_layer_hidden > 0) {  // the layer's own input, gated by the hidden state, added back
      torch::Tensor input = stream.narrow(-1, s.hidden + index * g.per_layer_hidden, g.per_layer_hidden);
      torch::Tensor mixed = torch::gelu(torch::linear(h, l.per_layer_gate), "tanh") * input;
      h = h + norm(torch::linear(mixed, l.per_layer_projection), l.per_layer_norm);
    }
    h = h * (l.scalar.detach() + l.scalar * 0);  // fixed: a buffer transformers loads and never trains
    if (width_ == s.hidden) return h;
    return torch::cat({h, out.narrow(-1, s.hidden, width_ - s.hidden)}, -1);
  }

  torch::Tensor final_norm(const torch::Tensor &stream) override {
    return norm(stream.narrow(-1, 0, shape().hidden), norm_);
  }
  torch::Tensor head_weight() const override { return lm_head_; }
  LogitsTransform logits_transform() const override { return {1, shape().features.final_softcap}; }

 private:
  struct Layer {
    torch::Tensor scalar, q, q_norm, k, k_norm, v, o, gate, up, down;
    torch::Tensor input_norm, attention_out_norm, mlp_in_norm, mlp_out_norm;
    torch::Tensor per_layer_gate, per_layer_projection, per_layer_norm;
    Gemma4MoeWeights moe;  // the experts beside the MLP (enable_moe_block)
  };

  // x * scale with the scale a tensor of x's dtype, as transformers' scaled embeddings round it.
  static torch::Tensor scaled(const torch::Tensor &x, double scale) {
    return x * torch::scalar_tensor(scale, x.options().dtype(torch::kFloat32)).to(x.scalar_type());
  }

  torch::Tensor norm(const torch::Tensor &x, const torch::Tensor &weight) const {
    return rms_norm(x, weight, shape().features.norm_weight, shape().norm_eps, options().fused);
  }

  // Queries of this layer over its own keys and values, or over those an earlier layer left in the
  // stream; a layer whose keys and values are reused writes them into `out`'s slot.
  torch::Tensor attention(int64_t index, const Layer &l, const torch::Tensor &x, const torch::Tensor &stream,
                          torch::Tensor &out, const PackedDocuments &packed) {
    const TransformerShape &s = shape();
    const int64_t batch = x.size(0), length = x.size(1), d = gemma4_head_dim(s, index);
    const int64_t kv_heads = gemma4_kv_heads(s, index), source = gemma4_kv_source(s, index);
    const RopeTables &cached = rope(index, d, length, x);
    const RopeTables tables = packed.defined() ? rope_at(cached, packed.positions) : cached;
    torch::Tensor q = norm(torch::linear(x, l.q).view({batch, length, s.heads, d}), l.q_norm).transpose(1, 2);
    q = rotate(q, tables, options().fused);
    torch::Tensor k, v;
    auto heads = [&](const torch::Tensor &t) { return t.view({batch, length, kv_heads, d}).transpose(1, 2); };
    if (source != index) {  // a shared layer: the keys and values of `source`, already normed and turned
      const int64_t size = kv_heads * d, at = slots_.at(source);
      k = heads(stream.narrow(-1, at, size));
      v = heads(stream.narrow(-1, at + size, size));
    } else {
      torch::Tensor keys = torch::linear(x, l.k).view({batch, length, kv_heads, d});
      torch::Tensor values = l.v.defined() ? torch::linear(x, l.v).view({batch, length, kv_heads, d}) : keys;
      k = rotate(norm(keys, l.k_norm).transpose(1, 2), tables, options().fused);
      v = at::rms_norm(values.to(torch::kFloat32), {d}, std::nullopt, s.norm_eps).to(values.scalar_type());
      v = v.transpose(1, 2);
      if (slots_.count(index)) {
        const int64_t at = slots_.at(index), size = kv_heads * d;
        auto flat = [&](const torch::Tensor &t) { return t.transpose(1, 2).reshape({batch, length, size}); };
        const int64_t after = at + 2 * size;
        out = torch::cat({stream.narrow(-1, 0, at), flat(k), flat(v), stream.narrow(-1, after, width_ - after)}, -1);
      }
    }
    AttentionOptions options;
    options.window = s.features.sliding(index) ? s.features.sliding_window : 0;
    options.scale = s.features.attention_scale;
    options.dropout = dropout_p();
    options.documents = &packed;
    torch::Tensor attended = causal_attention(q, k, v, options).transpose(1, 2).reshape({batch, length, s.heads * d});
    return torch::linear(attended, l.o);
  }

  // The tables of the layer type's RoPE over its head size, cached for the last (length, device, dtype).
  const RopeTables &rope(int64_t index, int64_t head_dim, int64_t length, const torch::Tensor &like) {
    const TransformerShape &s = shape();
    const RopeSpec spec = s.features.rope_of(index, s.rope_theta);
    Cached &cached = rope_cache_[s.features.sliding(index) ? 1 : 0];
    const RopeTables &t = cached.tables;
    if (!(t.cos.defined() && t.cos.size(0) == length && t.cos.size(1) == head_dim && t.cos.device() == like.device() &&
          t.cos.scalar_type() == like.scalar_type() && cached.spec == spec))
      cached = Cached{spec, rope_tables(spec, head_dim, s.max_seq, length, like)};
    return cached.tables;
  }

  struct Cached {
    RopeSpec spec;
    RopeTables tables;
  };
  torch::Tensor embed_tokens_, embed_per_layer_, per_layer_projection_, per_layer_norm_, norm_, lm_head_;
  std::vector<Layer> layers_;
  std::map<int64_t, int64_t> slots_;  // a layer whose keys and values later layers read -> their offset in the stream
  int64_t width_ = 0;                 // of the stream
  Cached rope_cache_[2];              // full-attention layers, sliding-window layers
};

}  // namespace

std::unique_ptr<TransformerModel> make_gemma4(const TransformerOptions &options) {
  return std::make_unique<Gemma4>(options);
}

}  // namespace zf
