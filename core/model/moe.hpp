// moe.hpp: the mixture-of-experts MLP of Qwen3-MoE, Mixtral, OLMoE and gpt-oss (decoder_features.hpp's
// MoeSpec): a router's softmax over the experts, each token's top k (renormalised where the family
// does: gpt-oss's softmax over its top k logits is that), SwiGLU experts (gpt-oss's clamped, with
// biases, fused into 3-D tensors), and the outputs summed in fp32 in token order with the top k sorted, so the
// result does not depend on how the experts were computed. On a GPU in bf16 the experts run as three
// grouped GEMMs over the tokens sorted by expert (at::_grouped_mm, no host round trip); elsewhere one
// loop over the experts. Every expert takes part in the graph, so one that received no token still
// gets a (zero) gradient.
//
// The load-balancing loss (transformers' load_balancing_loss_func without an attention mask):
//   aux = E * sum_e f_e * P_e,  f_e = top-k picks of e / rows,  P_e = summed probabilities of e / rows,
// over the rows of every sparse layer of the micro-batch. RouterStats gathers both per layer; the
// gradient of aux reaches each layer's router inside that layer's backward (its probabilities' node
// adds it), so a stage that gathers a block's parameters for its backward sees no other path.
#pragma once

#include "model/decoder_features.hpp"

#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

namespace zf {

struct MoeWeights {
  torch::Tensor router;                   // [experts, hidden]
  torch::Tensor router_bias;              // [experts] (gpt-oss), or undefined
  std::vector<torch::Tensor> gate, up, down;  // per expert: [inner, hidden], [inner, hidden], [hidden, inner]
  // gpt-oss's fused experts instead (MoeSpec::fused): [E, hidden, 2 inner] (gate, up interleaved),
  // [E, 2 inner], [E, inner, hidden], [E, hidden].
  torch::Tensor gate_up, gate_up_bias, fused_down, down_bias;
};

// The tensor names of expert `e` of a layer (`p` ends in "model.layers.N.") and of its router.
std::string moe_router_name(const MoeSpec &spec, const std::string &p);
// gpt-oss's: the router's bias and the fused experts' tensors (`which`: gate_up_proj, gate_up_proj_bias,
// down_proj, down_proj_bias).
std::string moe_router_bias_name(const std::string &p);
std::string moe_fused_name(const std::string &p, const char *which);
std::string moe_expert_name(const MoeSpec &spec, const std::string &p, int64_t e, const char *which);  // gate, up, down

// The router statistics of one micro-batch and the load-balancing loss built from them.
class RouterStats {
 public:
  RouterStats();
  ~RouterStats();
  void reset(const MoeSpec &spec);  // at the micro-batch's first block
  // Records a sparse layer's probabilities [rows, experts] (fp32) and picks [rows, k]; returns the
  // probabilities to route with, whose backward adds the load-balancing loss's gradient when the loss
  // is part of the training loss. Recording a layer again (activation checkpointing) replaces it.
  torch::Tensor track(int64_t layer, const torch::Tensor &probs, const torch::Tensor &picks);
  // `loss` plus router_aux_loss_coef * aux when the config asks for it (output_router_logits); the
  // unscaled aux of this micro-batch is last_aux() after it (NaN without sparse layers).
  torch::Tensor add_to(const torch::Tensor &loss);
  double last_aux() const;

  struct State;

 private:
  std::unique_ptr<State> state_;
};

// The MoE MLP of one layer on x [..., hidden]. `grouped`: run the experts as grouped GEMMs (the GPU
// path; at::_grouped_mm also runs on the CPU, for tests); else a loop over the experts.
torch::Tensor moe_mlp(const MoeSpec &spec, const MoeWeights &w, const torch::Tensor &x, RouterStats *stats,
                      int64_t layer, bool grouped);
// The experts' part of it, which Gemma 4's block shares (gemma4_moe.hpp): each token of `tokens` [n, hidden]
// through the experts it `picks` [n, k], their outputs times `weights` [n, k] (fp32) summed in fp32 in token
// order; in the dtype of `tokens`. `gelu`: GeGLU experts (tanh's GELU), not SwiGLU.
torch::Tensor routed_experts(const MoeSpec &spec, const MoeWeights &w, const torch::Tensor &tokens,
                             const torch::Tensor &picks, const torch::Tensor &weights, bool gelu, bool grouped);
// True where moe_mlp groups by default: a CUDA tensor in bf16 with widths the kernels take.
bool moe_grouped_by_default(const torch::Tensor &x, const MoeSpec &spec);

}  // namespace zf
