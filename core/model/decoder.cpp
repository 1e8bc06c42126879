// The decoder layer of the Llama lineage, composed as the shape's features say (decoder_features.hpp):
// each family of model/families/ is this layer with its own norms, RoPE, attention and MLP variants,
// under Hugging Face's tensor names. Blocks: the embeddings, one per layer, then the final norm and
// the output head.
#include "model/attention.hpp"
#include "model/fused_ops.hpp"
#include "model/gated_deltanet.hpp"
#include "model/moe.hpp"
#include "model/moe_shared.hpp"
#include "model/rope.hpp"
#include "model/transformer.hpp"

namespace zf {
namespace {

class Decoder final : public TransformerModel {
 public:
  explicit Decoder(const TransformerOptions &options) : TransformerModel(options) {
    const TransformerShape &s = shape();
    const DecoderFeatures &f = s.features;
    const int64_t h = s.hidden, d = s.head_dim(), q = s.heads * d, kv = s.kv_heads * d, inner = s.intermediate;
    const uint32_t head_block = uint32_t(s.layers + 1);
    const Init norm = f.norm_weight == NormWeight::one_plus ? Init::zero_norm : Init::norm;
    const bool qkv_bias = s.qkv_bias || f.attention_bias;
    set_block_names("model.layers.");

    embed_tokens_ = add("model.embed_tokens.weight", {s.vocab, h}, 0, Init::embedding);
    for (int64_t i = 0; i < s.layers; ++i) {
      const std::string p = "model.layers." + std::to_string(i) + ".";
      const uint32_t b = uint32_t(i + 1);
      auto bias = [&](const std::string &name, int64_t size, bool has) {
        return has ? add(p + name, {size}, b, Init::bias) : torch::Tensor();
      };
      Layer l;
      if (f.placement != NormPlacement::post) l.attention_in_norm = add(p + "input_layernorm.weight", {h}, b, norm);
      if (f.linear(i)) {
        add_deltanet(p + "linear_attn.", b, l.deltanet);
      } else if (f.fused_qkv) {
        l.qkv = add(p + "self_attn.qkv_proj.weight", {q + 2 * kv, h}, b, Init::linear);
      } else {
        l.q = add(p + "self_attn.q_proj.weight", {f.attention_output_gate ? 2 * q : q, h}, b, Init::linear);
        l.q_bias = bias("self_attn.q_proj.bias", q, qkv_bias);
        l.k = add(p + "self_attn.k_proj.weight", {kv, h}, b, Init::linear);
        l.k_bias = bias("self_attn.k_proj.bias", kv, qkv_bias);
        l.v = add(p + "self_attn.v_proj.weight", {kv, h}, b, Init::linear);
        l.v_bias = bias("self_attn.v_proj.bias", kv, qkv_bias);
      }
      if (!f.linear(i)) l.o = add(p + "self_attn.o_proj.weight", {h, q}, b, Init::residual);
      l.o_bias = bias("self_attn.o_proj.bias", h, f.attention_bias && !f.linear(i));
      if (f.attention_sinks && !f.linear(i)) l.sinks = add(p + "self_attn.sinks", {s.heads}, b, Init::bias);
      if (f.qk_norm != QkNorm::none && !f.linear(i)) {
        const bool whole = f.qk_norm == QkNorm::whole;
        l.q_norm = add(p + "self_attn.q_norm.weight", {whole ? q : d}, b, norm);
        l.k_norm = add(p + "self_attn.k_norm.weight", {whole ? kv : d}, b, norm);
      }
      if (f.placement != NormPlacement::pre)
        l.attention_out_norm = add(p + "post_attention_layernorm.weight", {h}, b, norm);
      else
        l.mlp_in_norm = add(p + "post_attention_layernorm.weight", {h}, b, norm);
      if (f.placement == NormPlacement::sandwich) l.mlp_in_norm = add(p + "pre_feedforward_layernorm.weight", {h}, b, norm);
      if (f.placement != NormPlacement::pre)
        l.mlp_out_norm = add(p + "post_feedforward_layernorm.weight", {h}, b, norm);
      if (f.sparse(i)) {
        add_experts(p, b, l.moe);
        add_shared_expert(p, b, l.shared);
      } else if (f.fused_qkv) {
        l.gate_up = add(p + "mlp.gate_up_proj.weight", {2 * inner, h}, b, Init::linear);
      } else {
        l.gate = add(p + "mlp.gate_proj.weight", {inner, h}, b, Init::linear);
        l.gate_bias = bias("mlp.gate_proj.bias", inner, f.mlp_bias);
        l.up = add(p + "mlp.up_proj.weight", {inner, h}, b, Init::linear);
        l.up_bias = bias("mlp.up_proj.bias", inner, f.mlp_bias);
      }
      if (!f.sparse(i)) l.down = add(p + "mlp.down_proj.weight", {h, inner}, b, Init::residual);
      l.down_bias = bias("mlp.down_proj.bias", h, f.mlp_bias && !f.sparse(i));
      layers_.push_back(l);
    }
    norm_ = add("model.norm.weight", {h}, head_block, norm);
    lm_head_ = s.tie_embeddings ? embed_tokens_ : add("lm_head.weight", {s.vocab, h}, head_block, Init::linear);
  }

  torch::Tensor embed(const torch::Tensor &ids, const PackedDocuments &) override {
    if (shape().features.moe.experts > 0) router_stats_.reset(shape().features.moe);
    torch::Tensor x = torch::embedding(embed_tokens_, ids, options().padding_idx);
    const double scale = shape().features.embedding_scale;
    // Gemma multiplies by sqrt(hidden) as a tensor of the model's dtype: the same rounding here.
    return scale == 1 ? x : x * torch::scalar_tensor(scale, x.options()).to(x.scalar_type());
  }

  // x + attention, then that + MLP, each branch between the norms its placement has; the residual
  // add and the MLP's input norm in one pass (fused_ops.hpp).
  torch::Tensor layer(int64_t index, const torch::Tensor &x, const PackedDocuments &packed) override {
    const Layer &l = layers_[size_t(index)];
    const double residual_scale = shape().features.residual_scale;
    auto branch = [&](const torch::Tensor &out_norm, const torch::Tensor &out) {
      torch::Tensor normed = out_norm.defined() ? rms_norm(out, out_norm) : out;
      return residual_scale == 1 ? normed : normed * residual_scale;
    };
    const torch::Tensor in = l.attention_in_norm.defined() ? rms_norm(x, l.attention_in_norm) : x;
    torch::Tensor attended = mix(index, l, in, packed);
    torch::Tensor h, mlp_in;
    if (l.mlp_in_norm.defined()) {
      std::tie(h, mlp_in) = add_rms_norm(x, branch(l.attention_out_norm, attended), l.mlp_in_norm,
                                         shape().features.norm_weight, shape().norm_eps, options().fused);
    } else {
      h = mlp_in = x + branch(l.attention_out_norm, attended);
    }
    return h + branch(l.mlp_out_norm, feed_forward(index, l, mlp_in));
  }

  // The mean cross-entropy, plus the load-balancing loss where the config asks for it (moe.hpp).
  torch::Tensor loss(const torch::Tensor &logits, const Batch &batch) override {
    return with_aux(TransformerModel::loss(logits, batch));
  }
  torch::Tensor forward_loss(const torch::Tensor &hidden, const Batch &batch) override {
    if (options().fused == FusedKernels::off) return TransformerModel::forward_loss(hidden, batch);  // through loss() above
    return with_aux(TransformerModel::forward_loss(hidden, batch));
  }
  torch::Tensor with_aux(const torch::Tensor &loss) {
    return shape().features.moe.experts > 0 ? router_stats_.add_to(loss) : loss;
  }
  double aux_loss() const override { return router_stats_.last_aux(); }

  torch::Tensor final_norm(const torch::Tensor &x) override { return rms_norm(x, norm_); }
  torch::Tensor head_weight() const override { return lm_head_; }
  LogitsTransform logits_transform() const override {
    return {shape().features.logits_divisor, shape().features.final_softcap};
  }

 private:
  struct Layer {
    torch::Tensor attention_in_norm, attention_out_norm, mlp_in_norm, mlp_out_norm;
    torch::Tensor q, q_bias, k, k_bias, v, v_bias, qkv, o, o_bias, q_norm, k_norm, sinks;
    DeltaNetWeights deltanet;  // a linear-attention layer's mixer instead of q, k, v and o
    torch::Tensor gate, gate_bias, up, up_bias, gate_up, down, down_bias;
    MoeWeights moe;  // a sparse layer's router and experts instead of gate, up and down
    SharedExpertWeights shared;  // beside them, where the family has one (Qwen3.5-MoE)
  };

  // A sparse layer's router and experts, under the family's names (moe.hpp).
  void add_experts(const std::string &p, uint32_t b, MoeWeights &w) {
    const MoeSpec &moe = shape().features.moe;
    const int64_t h = shape().hidden, inner = moe.expert_intermediate;
    w.router = add(moe_router_name(moe, p), {moe.experts, h}, b, Init::linear);
    if (moe.fused()) {  // gpt-oss: the router's bias, the experts as 3-D tensors with biases
      const int64_t e = moe.experts;
      w.router_bias = add(moe_router_bias_name(p), {e}, b, Init::bias);
      w.gate_up = add(moe_fused_name(p, "gate_up_proj"), {e, h, 2 * inner}, b, Init::linear, false, true);
      w.gate_up_bias = add(moe_fused_name(p, "gate_up_proj_bias"), {e, 2 * inner}, b, Init::bias);
      w.fused_down = add(moe_fused_name(p, "down_proj"), {e, inner, h}, b, Init::residual, false, true);
      w.down_bias = add(moe_fused_name(p, "down_proj_bias"), {e, h}, b, Init::bias);
      return;
    }
    for (int64_t e = 0; e < moe.experts; ++e) {
      w.gate.push_back(add(moe_expert_name(moe, p, e, "gate"), {inner, h}, b, Init::linear));
      w.up.push_back(add(moe_expert_name(moe, p, e, "up"), {inner, h}, b, Init::linear));
      w.down.push_back(add(moe_expert_name(moe, p, e, "down"), {h, inner}, b, Init::residual));
    }
  }

  // A sparse layer's shared expert and its gate, where the family has one (moe_shared.hpp).
  void add_shared_expert(const std::string &p, uint32_t b, SharedExpertWeights &w) {
    const int64_t h = shape().hidden, inner = shape().features.moe.shared_intermediate;
    if (inner == 0) return;
    w.gate = add(p + "mlp.shared_expert.gate_proj.weight", {inner, h}, b, Init::linear);
    w.up = add(p + "mlp.shared_expert.up_proj.weight", {inner, h}, b, Init::linear);
    w.down = add(p + "mlp.shared_expert.down_proj.weight", {h, inner}, b, Init::residual);
    w.score = add(p + "mlp.shared_expert_gate.weight", {1, h}, b, Init::linear);
  }

  // A Gated DeltaNet mixer's parameters, under transformers' names (`p` ends in "linear_attn.").
  void add_deltanet(const std::string &p, uint32_t b, DeltaNetWeights &w) {
    const int64_t h = shape().hidden;
    const DeltaNetSpec &d = shape().features.deltanet;
    const int64_t values = d.value_heads * d.value_dim;
    w.in_proj_qkv = add(p + "in_proj_qkv.weight", {d.conv_channels(), h}, b, Init::linear);
    w.in_proj_z = add(p + "in_proj_z.weight", {values, h}, b, Init::linear);
    w.in_proj_b = add(p + "in_proj_b.weight", {d.value_heads, h}, b, Init::linear);
    w.in_proj_a = add(p + "in_proj_a.weight", {d.value_heads, h}, b, Init::linear);
    w.conv1d = add(p + "conv1d.weight", {d.conv_channels(), 1, d.conv_kernel}, b, Init::linear);
    w.dt_bias = add(p + "dt_bias", {d.value_heads}, b, Init::norm);
    w.A_log = add(p + "A_log", {d.value_heads}, b, Init::log_decay);
    w.norm = add(p + "norm.weight", {d.value_dim}, b, Init::norm);
    w.out_proj = add(p + "out_proj.weight", {h, values}, b, Init::residual);
  }

  torch::Tensor mix(int64_t index, const Layer &l, const torch::Tensor &x, const PackedDocuments &packed) {
    if (!l.deltanet.out_proj.defined()) return attention(index, l, x, packed);
    const DeltaNetSpec &d = shape().features.deltanet;
    return gated_deltanet(l.deltanet, x, d.key_heads, d.key_dim, d.value_heads, d.value_dim, shape().norm_eps,
                          packed.positions);
  }

  // RMSNorm over the last dimension, its weight applied as the family does (fused_ops.hpp).
  torch::Tensor rms_norm(const torch::Tensor &x, const torch::Tensor &weight) const {
    return zf::rms_norm(x, weight, shape().features.norm_weight, shape().norm_eps, options().fused);
  }

  torch::Tensor attention(int64_t index, const Layer &l, const torch::Tensor &x, const PackedDocuments &packed) {
    const TransformerShape &s = shape();
    const DecoderFeatures &f = s.features;
    const int64_t batch = x.size(0), length = x.size(1), d = s.head_dim();
    torch::Tensor q, k, v, output_gate;
    if (l.qkv.defined()) {
      std::vector<torch::Tensor> parts =
          torch::linear(x, l.qkv).split_with_sizes({s.heads * d, s.kv_heads * d, s.kv_heads * d}, -1);
      q = parts[0], k = parts[1], v = parts[2];
    } else {
      q = torch::linear(x, l.q, l.q_bias);
      if (f.attention_output_gate) {  // each head's q, then its gate: [B, T, heads, 2d]
        std::vector<torch::Tensor> parts = q.view({batch, length, s.heads, 2 * d}).chunk(2, -1);
        q = parts[0].reshape({batch, length, s.heads * d});
        output_gate = parts[1].reshape({batch, length, s.heads * d});
      }
      k = torch::linear(x, l.k, l.k_bias);
      v = torch::linear(x, l.v, l.v_bias);
    }
    if (f.qk_norm == QkNorm::whole) {
      q = rms_norm(q, l.q_norm);
      k = rms_norm(k, l.k_norm);
    }
    auto heads = [&](const torch::Tensor &t, int64_t count) { return t.view({batch, length, count, d}); };
    q = heads(q, s.heads);
    k = heads(k, s.kv_heads);
    if (f.qk_norm == QkNorm::per_head) {
      q = rms_norm(q, l.q_norm);
      k = rms_norm(k, l.k_norm);
    }
    q = q.transpose(1, 2);
    k = k.transpose(1, 2);
    v = heads(v, s.kv_heads).transpose(1, 2);
    if (f.uses_rope(index)) {
      const RopeTables &cached = rope(index, length, x);
      const RopeTables tables = packed.defined() ? rope_at(cached, packed.positions) : cached;
      q = rotate(q, tables, options().fused);
      k = rotate(k, tables, options().fused);
    }
    if (f.llama4_scaling_beta != 0) q = q * llama4_query_scale(length, q, packed);
    AttentionOptions options;
    options.window = f.sliding(index) ? f.sliding_window : 0;
    options.scale = f.attention_scale;
    options.dropout = dropout_p();
    options.documents = &packed;
    options.sinks = l.sinks;
    torch::Tensor attended = causal_attention(q, k, v, options);
    attended = attended.transpose(1, 2).reshape({batch, length, s.heads * d});
    if (output_gate.defined()) attended = attended * torch::sigmoid(output_gate);
    return torch::linear(attended, l.o, l.o_bias);
  }

  // The dense MLP, or the layer's experts (moe.hpp).
  torch::Tensor feed_forward(int64_t index, const Layer &l, const torch::Tensor &in) {
    if (!l.moe.router.defined()) return mlp(l, in);
    const MoeSpec &moe = shape().features.moe;
    torch::Tensor out = moe_mlp(moe, l.moe, in, &router_stats_, index, moe_grouped_by_default(in, moe));
    return l.shared.score.defined() ? out + shared_expert(l.shared, in, options().fused) : out;
  }

  torch::Tensor mlp(const Layer &l, const torch::Tensor &x) const {
    torch::Tensor gate, up;
    if (l.gate_up.defined()) {
      std::vector<torch::Tensor> parts = torch::linear(x, l.gate_up).chunk(2, -1);
      gate = parts[0], up = parts[1];
    } else {
      gate = torch::linear(x, l.gate, l.gate_bias);
      up = torch::linear(x, l.up, l.up_bias);
    }
    const bool gelu = shape().features.activation != "silu";
    return torch::linear(gated_activation(gate, up, gelu, options().fused), l.down, l.down_bias);
  }

  // The tables of the layer's RoPE (full or sliding layers may have their own), cached for the
  // last (length, device, dtype) seen.
  const RopeTables &rope(int64_t index, int64_t length, const torch::Tensor &like) {
    const TransformerShape &s = shape();
    const RopeSpec spec = s.features.rope_of(index, s.rope_theta);
    Cached &cached = rope_cache_[s.features.sliding(index) ? 1 : 0];
    const RopeTables &t = cached.tables;
    if (!(t.cos.defined() && t.cos.size(0) == length && t.cos.device() == like.device() &&
          t.cos.scalar_type() == like.scalar_type() && cached.spec == spec)) {
      const int64_t rotated = int64_t(double(s.head_dim()) * s.features.partial_rotary);
      cached = Cached{spec, rope_tables(spec, rotated, s.max_seq, length, like)};
    }
    return cached.tables;
  }

  // Ministral 3 (Llama 4's attention temperature): queries scaled by 1 + beta * log(1 + floor(pos / original_max)).
  torch::Tensor llama4_query_scale(int64_t length, const torch::Tensor &like, const PackedDocuments &packed) const {
    const DecoderFeatures &f = shape().features;
    torch::Tensor positions = packed.defined() ? packed.positions.to(like.device(), torch::kFloat32).unsqueeze(1)
                                               : torch::arange(length, like.options().dtype(torch::kFloat32)).view({1, 1, length});
    const double original = double(f.rope.original_max > 0 ? f.rope.original_max : shape().max_seq);
    torch::Tensor scale = 1 + f.llama4_scaling_beta * torch::log(1 + torch::floor(positions / original));
    return scale.unsqueeze(-1).to(like.scalar_type());
  }

  struct Cached {
    RopeSpec spec;
    RopeTables tables;
  };
  torch::Tensor embed_tokens_, norm_, lm_head_;
  std::vector<Layer> layers_;
  RouterStats router_stats_;  // of the micro-batch in flight: the load-balancing loss
  Cached rope_cache_[2];  // full-attention layers, sliding-window layers
};

}  // namespace

std::unique_ptr<TransformerModel> make_decoder(const TransformerOptions &options) {
  return std::make_unique<Decoder>(options);
}

}  // namespace zf
