// Qwen3.5-MoE (Qwen3_5MoeForCausalLM, model_type qwen3_5_moe_text): Qwen3.5's layers (qwen3_5.cpp: Gated
// DeltaNet layers, gated full attention, (1 + w) norms) with a mixture of experts in place of every MLP
// (moe.hpp): softmax over num_experts, the top num_experts_per_tok always renormalised (the config has no
// norm_topk_prob), experts of moe_intermediate_size, and a shared expert of shared_expert_intermediate_size
// whose output is scaled by sigmoid(shared_expert_gate . x) (moe_shared.hpp). Checkpoints hold a layer's
// experts fused, mlp.experts.gate_up_proj [E, 2I, H] and down_proj [E, H, I] (fused_experts.hpp); those
// transformers saves one expert at a time read as well, and an export writes the fused layout.
#include "model/family.hpp"
#include "model/hf_config_fields.hpp"
#include "model/moe_config.hpp"

namespace zf {

Family qwen3_5_text_family();

namespace {

MoeKeys keys() {
  MoeKeys k;
  k.inner = "moe_intermediate_size";
  k.norm_topk_key = false;  // the router always renormalises its top k
  k.default_coef = 0.001;
  return k;
}

const Family &dense() {
  static const Family family = qwen3_5_text_family();
  return family;
}

void read(const nlohmann::json &c, const std::string &source, TransformerShape &s) {
  dense().read(c, source, s);
  read_moe_config(c, source, keys(), s);
  MoeSpec &m = s.features.moe;
  m.dense_layers.clear();  // every layer has experts: transformers reads no mlp_only_layers or decoder_sparse_step
  m.fused_experts = true;
  m.shared_intermediate = field_or<int64_t>(c, "shared_expert_intermediate_size", 512, source);
  ZF_REQUIRE(m.shared_intermediate > 0, "%s: config.json has shared_expert_intermediate_size = %lld: must be > 0",
             source.c_str(), (long long)m.shared_intermediate);
}

void write(const TransformerShape &s, nlohmann::json &c) {
  dense().write(s, c);
  write_moe_config(s, keys(), c);
  c["shared_expert_intermediate_size"] = s.features.moe.shared_intermediate;
  for (const char *key : {"intermediate_size", "mlp_only_layers", "decoder_sparse_step"}) c.erase(key);
}

}  // namespace

Family qwen3_5_moe_text_family() {
  Family f = qwen3_5_text_family();
  f.type = "qwen3_5_moe_text";
  f.architecture = "Qwen3_5MoeForCausalLM";
  f.intermediate_key = "moe_intermediate_size";
  f.read = read;
  f.write = write;
  f.defaults = [](TransformerShape &s) {
    dense().defaults(s);
    default_moe(s, true);
    s.features.moe.fused_experts = true;
    if (s.features.moe.shared_intermediate == 0) s.features.moe.shared_intermediate = s.intermediate;
  };
  return f;
}

// The image-text checkpoints (Qwen3_5MoeForConditionalGeneration, model_type qwen3_5_moe: Qwen3.5-35B-A3B,
// Qwen3.6-35B-A3B): the language model above under text_config, saved as model.language_model.*; the vision
// tower (model.visual.*) and multi-token-prediction layers (mtp.*) pass through an export unchanged.
Family qwen3_5_moe_image_text_family() {
  return image_text_of(qwen3_5_moe_text_family(), "qwen3_5_moe", "Qwen3_5MoeForConditionalGeneration",
                       "model.language_model.", "lm_head.weight");
}

}  // namespace zf
