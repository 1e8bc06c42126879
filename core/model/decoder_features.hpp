// decoder_features.hpp: how a decoder layer of the Llama lineage is composed, beyond its sizes. Each
// family (model/families/) sets these from its config.json; the shared layer (decoder.cpp) reads
// them. The defaults are plain Llama: pre-norm RMSNorm, RoPE over the whole head, causal attention
// over every position, SwiGLU. No libtorch here.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace zf {

// RoPE's inverse frequencies (rope.cpp), as Hugging Face's rope_parameters give them.
struct RopeSpec {
  std::string type = "default";  // default, linear, llama3, yarn, proportional
  double theta = 0;  // sliding_rope's own base; the full layers' base is TransformerShape::rope_theta
  double factor = 1;
  double low_freq_factor = 1, high_freq_factor = 4;  // llama3
  int64_t original_max = 0;                           // llama3, yarn: original_max_position_embeddings
  double beta_fast = 32, beta_slow = 1;               // yarn
  double attention_factor = 0;                        // yarn: 0 = computed from factor (and mscale)
  double mscale = 0, mscale_all_dim = 0;              // yarn
  bool truncate = true;                               // yarn
  double partial = 1;  // proportional: the fraction of the head's channel pairs rotated, the rest left as they are
  bool operator==(const RopeSpec &) const = default;
};

// Where the layer's norms sit around its two branches (attention, MLP).
enum class NormPlacement {
  pre,       // x + f(norm(x)): Llama, Qwen, Mistral, Phi-3, Granite
  post,      // x + norm(f(x)): OLMo 2 / 3
  sandwich,  // x + norm(f(norm(x))): Gemma 3
};

// How an RMSNorm applies its weight w to x / rms(x) (computed in fp32).
enum class NormWeight {
  cast_then_scale,  // w * (x / rms).to(dtype): Llama, Qwen, Mistral
  scale_then_cast,  // (w * (x / rms)).to(dtype): OLMo 2 / 3
  one_plus,         // ((1 + w) * (x / rms)).to(dtype), w starting at 0: Gemma 3
};

enum class QkNorm {
  none,
  per_head,  // RMSNorm over each head of q and k, weight [head_dim]: Qwen3, Gemma 3
  whole,     // RMSNorm over the whole q and k projections, weight [heads * head_dim]: OLMo 2 / 3
};

// The Gated DeltaNet layers' sizes (Qwen3.5's linear_* keys; gated_deltanet.hpp).
struct DeltaNetSpec {
  int64_t key_heads = 0, key_dim = 0;      // linear_num_key_heads, linear_key_head_dim
  int64_t value_heads = 0, value_dim = 0;  // linear_num_value_heads, linear_value_head_dim
  int64_t conv_kernel = 0;                 // linear_conv_kernel_dim
  int64_t conv_channels() const { return 2 * key_heads * key_dim + value_heads * value_dim; }
  bool operator==(const DeltaNetSpec &) const = default;
};

// The mixture-of-experts MLP of a family's sparse layers (moe.hpp): a router over `experts` SwiGLU
// experts of width `expert_intermediate`, each token sent to its top `top_k`.
struct MoeSpec {
  int64_t experts = 0;  // 0: no layer has experts
  int64_t top_k = 0;    // num_experts_per_tok
  int64_t expert_intermediate = 0;
  bool norm_topk = false;      // the top-k probabilities renormalised to sum to 1 (norm_topk_prob)
  bool aux_loss = false;       // the load-balancing loss is added to the loss (output_router_logits)
  double aux_coef = 0;         // router_aux_loss_coef
  bool mixtral_names = false;  // block_sparse_moe.experts.E.w1 (gate), w3 (up), w2 (down), not mlp.experts.E.*_proj
  // Qwen3.5-MoE: a shared SwiGLU expert of this width that every token uses, its output scaled by
  // sigmoid(shared_expert_gate . x) (moe_shared.hpp); 0 = none.
  int64_t shared_intermediate = 0;
  // Qwen3.5-MoE: checkpoints hold a layer's experts as two 3-D tensors, mlp.experts.gate_up_proj
  // [experts, 2 x width, hidden] and down_proj [experts, hidden, width] (fused_experts.hpp).
  bool fused_experts = false;
  // gpt-oss: a router with a bias (mlp.router), the experts fused into 3-D tensors with biases
  // (mlp.experts.gate_up_proj [E, hidden, 2 x width], gate and up interleaved, and down_proj
  // [E, width, hidden]), and the clamped SwiGLU (up + 1) * gate * sigmoid(alpha * gate), gate <= limit,
  // |up| <= limit. 0: plain SwiGLU experts stored one by one.
  double swiglu_limit = 0;
  double swiglu_alpha = 0;
  bool fused() const { return swiglu_limit > 0; }
  std::vector<uint8_t> dense_layers;  // per layer, 1 = a plain MLP instead of experts; empty = none
  bool operator==(const MoeSpec &) const = default;
};

// Gemma 4's layer (gemma4_layout.hpp): full-attention layers with a head size and key-value heads of
// their own, whose values may be their keys' projection; the last layers reusing the keys and values
// of the last earlier layer of their type; per-layer input embeddings; a fixed scalar per layer.
struct Gemma4Spec {
  bool on = false;
  int64_t global_head_dim = 0;   // full_attention layers' head size (global_head_dim); 0: head_dim
  int64_t global_kv_heads = 0;   // their key-value heads (num_global_key_value_heads); 0: kv_heads
  bool k_eq_v = false;           // attention_k_eq_v: a full layer's values are its keys' projection (no v_proj)
  int64_t kv_shared_layers = 0;  // num_kv_shared_layers: the last N layers compute no keys or values
  int64_t per_layer_hidden = 0;  // hidden_size_per_layer_input: 0 = no per-layer inputs
  int64_t per_layer_vocab = 0;   // vocab_size_per_layer_input
  bool double_wide_mlp = false;  // use_double_wide_mlp: the kv-shared layers' MLP twice as wide
  // enable_moe_block: every layer's MLP beside `experts` GeGLU experts of width expert_intermediate,
  // each token sent to its top `top_k` (gemma4_moe.hpp); 0: none
  int64_t experts = 0, top_k = 0, expert_intermediate = 0;
  bool operator==(const Gemma4Spec &) const = default;
};

struct DecoderFeatures {
  int64_t head_dim = 0;  // 0: hidden / heads
  NormPlacement placement = NormPlacement::pre;
  NormWeight norm_weight = NormWeight::cast_then_scale;
  QkNorm qk_norm = QkNorm::none;
  bool attention_bias = false;  // q, k, v and o have biases (Llama's attention_bias)
  bool mlp_bias = false;
  std::string activation = "silu";  // the MLP's gate: silu (SwiGLU) or gelu_tanh (GeGLU)
  bool fused_qkv = false;           // one qkv_proj and one gate_up_proj matrix (Phi-3)
  RopeSpec rope;                    // full-attention layers (every layer without sliding windows)
  RopeSpec sliding_rope;            // sliding-window layers, where they have their own (Gemma 3, OLMo 3)
  double partial_rotary = 1;        // the fraction of each head that RoPE rotates (Phi-3)
  int64_t sliding_window = 0;       // a sliding layer's query at i sees keys j with i - window < j <= i
  std::vector<uint8_t> sliding_layers;  // per layer, 1 = sliding window; empty = none
  std::vector<uint8_t> rope_layers;     // per layer, 0 = no RoPE (SmolLM3); empty = RoPE everywhere
  std::vector<uint8_t> linear_layers;   // per layer, 1 = a Gated DeltaNet mixer instead of attention (Qwen3.5)
  DeltaNetSpec deltanet;                // the sizes of those layers
  MoeSpec moe;                          // experts in place of the MLP (Qwen3-MoE, Mixtral, OLMoE)
  bool attention_sinks = false;         // a learned logit per head in every softmax's denominator (gpt-oss)
  bool attention_output_gate = false;   // q_proj doubled: attention's output times sigmoid(gate) (Qwen3.5)
  double llama4_scaling_beta = 0;       // Ministral 3: queries scaled by 1 + beta * log(1 + floor(pos / original_max))
  double embedding_scale = 1;           // Gemma: sqrt(hidden); Granite: embedding_multiplier
  double attention_scale = 0;           // softmax scale; 0 = 1 / sqrt(head_dim)
  double residual_scale = 1;            // Granite: branch outputs scaled before the residual add
  double logits_divisor = 1;            // Granite: logits_scaling
  double final_softcap = 0;             // Gemma: final_logit_softcapping (0: none)
  Gemma4Spec gemma4;                    // Gemma 4's layer (its own model: gemma4.cpp)
  bool operator==(const DecoderFeatures &) const = default;

  bool sliding(int64_t layer) const { return !sliding_layers.empty() && sliding_layers[size_t(layer)]; }
  bool linear(int64_t layer) const { return !linear_layers.empty() && linear_layers[size_t(layer)]; }
  bool sparse(int64_t layer) const {
    return moe.experts > 0 && (moe.dense_layers.empty() || !moe.dense_layers[size_t(layer)]);
  }
  bool uses_rope(int64_t layer) const { return rope_layers.empty() || rope_layers[size_t(layer)]; }
  // The RoPE of a layer, its base filled in (`theta`: TransformerShape::rope_theta).
  RopeSpec rope_of(int64_t layer, double theta) const {
    RopeSpec spec = sliding(layer) && sliding_rope.theta > 0 ? sliding_rope : rope;
    if (spec.theta == 0) spec.theta = theta;
    return spec;
  }
};

}  // namespace zf
