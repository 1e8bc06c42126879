// moe_config.hpp: the config.json keys of the mixture-of-experts families (decoder_features.hpp's
// MoeSpec), read and written the way each family spells them. No libtorch here.
#pragma once

#include "model/transformer_shape.hpp"

#include <nlohmann/json.hpp>

#include <string>

namespace zf {

struct MoeKeys {
  const char *experts = "num_experts";     // Mixtral: num_local_experts
  const char *inner = "intermediate_size"; // Qwen3-MoE: moe_intermediate_size (intermediate_size: its dense layers)
  bool norm_topk_key = true;               // norm_topk_prob is read (Mixtral always renormalises)
  double default_coef = 0.01;              // router_aux_loss_coef when config.json has none
};

// Experts, top k, the experts' width, renormalisation and the load-balancing loss; Qwen3-MoE's
// decoder_sparse_step and mlp_only_layers; refusals (router_jitter_noise) name the key.
void read_moe_config(const nlohmann::json &c, const std::string &source, const MoeKeys &keys, TransformerShape &s);
void write_moe_config(const TransformerShape &s, const MoeKeys &keys, nlohmann::json &c);
// A model given by type alone: 8 experts of width intermediate, 2 per token.
void default_moe(TransformerShape &s, bool norm_topk);

}  // namespace zf
