#include "model/moe_config.hpp"

#include "model/hf_config_fields.hpp"

namespace zf {

void read_moe_config(const nlohmann::json &c, const std::string &source, const MoeKeys &keys, TransformerShape &s) {
  MoeSpec &m = s.features.moe;
  // transformers' configs accept either spelling of the expert count (Qwen3-MoE saves num_local_experts).
  const char *other = std::string(keys.experts) == "num_experts" ? "num_local_experts" : "num_experts";
  m.experts = field_or<int64_t>(c, keys.experts, field_or<int64_t>(c, other, 0, source), source);
  m.top_k = field<int64_t>(c, "num_experts_per_tok", source);
  m.expert_intermediate = field<int64_t>(c, keys.inner, source);
  m.norm_topk = keys.norm_topk_key ? field_or<bool>(c, "norm_topk_prob", false, source) : true;
  m.aux_loss = field_or<bool>(c, "output_router_logits", false, source);
  m.aux_coef = field_or<double>(c, "router_aux_loss_coef", keys.default_coef, source);
  ZF_REQUIRE(m.experts > 0 && m.top_k > 0 && m.top_k <= m.experts && m.expert_intermediate > 0,
             "%s: config.json has %s = %lld, num_experts_per_tok = %lld, %s = %lld: each must be > 0, and the "
             "experts per token at most the experts", source.c_str(), keys.experts, (long long)m.experts,
             (long long)m.top_k, keys.inner, (long long)m.expert_intermediate);
  require_default(c, "router_jitter_noise", 0.0, source, "the router's multiplicative noise in training");
  const int64_t step = field_or<int64_t>(c, "decoder_sparse_step", 1, source);
  ZF_REQUIRE(step > 0, "%s: config.json has decoder_sparse_step = %lld: must be > 0", source.c_str(), (long long)step);
  std::vector<uint8_t> dense(size_t(s.layers), 0);
  bool any = false;
  for (int64_t i = 0; i < s.layers; ++i) dense[size_t(i)] = (i + 1) % step != 0;
  if (c.contains("mlp_only_layers") && c["mlp_only_layers"].is_array())
    for (const nlohmann::json &layer : c["mlp_only_layers"]) {
      ZF_REQUIRE(layer.is_number_integer() && layer.get<int64_t>() >= 0 && layer.get<int64_t>() < s.layers,
                 "%s: config.json's mlp_only_layers has %s: each must be a layer index below %lld", source.c_str(),
                 excerpt(layer.dump()).c_str(), (long long)s.layers);
      dense[size_t(layer.get<int64_t>())] = 1;
    }
  for (uint8_t one : dense) any = any || one;
  if (any) m.dense_layers = dense;
}

void write_moe_config(const TransformerShape &s, const MoeKeys &keys, nlohmann::json &c) {
  const MoeSpec &m = s.features.moe;
  c[keys.experts] = m.experts;
  c["num_experts_per_tok"] = m.top_k;
  c[keys.inner] = m.expert_intermediate;
  if (keys.norm_topk_key) c["norm_topk_prob"] = m.norm_topk;
  c["output_router_logits"] = m.aux_loss;
  c["router_aux_loss_coef"] = m.aux_coef;
  if (std::string(keys.inner) == "moe_intermediate_size") {  // Qwen3-MoE's dense layers
    nlohmann::json dense = nlohmann::json::array();
    for (int64_t i = 0; i < s.layers; ++i)
      if (!s.features.sparse(i)) dense.push_back(i);
    c["mlp_only_layers"] = dense;
    c["decoder_sparse_step"] = 1;
  }
}

void default_moe(TransformerShape &s, bool norm_topk) {
  MoeSpec &m = s.features.moe;
  if (m.experts > 0) return;
  m.experts = 8;
  m.top_k = 2;
  m.expert_intermediate = s.intermediate;
  m.norm_topk = norm_topk;
  m.aux_coef = 0.01;
}

}  // namespace zf
