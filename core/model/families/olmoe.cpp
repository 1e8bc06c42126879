// OLMoE (OlmoeForCausalLM): Llama's pre-norm layer with RMSNorms over the whole q and k projections
// and a mixture of num_experts SwiGLU experts of intermediate_size in place of the MLP (moe.hpp),
// the top num_experts_per_tok renormalised only when norm_topk_prob (false in OLMoE-1B-7B).
#include "model/family.hpp"
#include "model/hf_config_fields.hpp"
#include "model/moe_config.hpp"

namespace zf {

Family olmoe_family() {
  Family f;
  f.type = "olmoe";
  f.architecture = "OlmoeForCausalLM";
  f.default_norm_eps = 1e-5;
  f.default_vocab = 50304;
  f.default_max_seq = 4096;
  f.read = [](const nlohmann::json &c, const std::string &source, TransformerShape &s) {
    s.features.qk_norm = QkNorm::whole;
    require_default(c, "clip_qkv", nullptr, source, "q, k and v clamped to +-clip_qkv");
    read_moe_config(c, source, MoeKeys{}, s);
  };
  f.write = [](const TransformerShape &s, nlohmann::json &c) {
    c.erase("mlp_bias");
    c["clip_qkv"] = nullptr;
    write_moe_config(s, MoeKeys{}, c);
  };
  f.defaults = [](TransformerShape &s) {
    s.features.qk_norm = QkNorm::whole;
    default_moe(s, false);
  };
  return f;
}

}  // namespace zf
