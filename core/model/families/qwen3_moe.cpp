// Qwen3-MoE (Qwen3MoeForCausalLM): Qwen3's attention (per-head q/k norms, explicit head_dim) with a
// mixture of SwiGLU experts in place of the MLP (moe.hpp): softmax over num_experts, the top
// num_experts_per_tok, renormalised when norm_topk_prob; the layers of mlp_only_layers keep a dense
// MLP of intermediate_size. Experts are stored one by one (mlp.experts.E.{gate,up,down}_proj).
#include "model/family.hpp"
#include "model/moe_config.hpp"

namespace zf {
namespace {

MoeKeys keys() {
  MoeKeys k;
  k.inner = "moe_intermediate_size";
  k.default_coef = 0.001;
  return k;
}

}  // namespace

Family qwen3_moe_family() {
  Family f;
  f.type = "qwen3_moe";
  f.architecture = "Qwen3MoeForCausalLM";
  f.default_theta = 1e6;
  f.default_vocab = 151936;
  f.default_max_seq = 40960;
  f.read = [](const nlohmann::json &c, const std::string &source, TransformerShape &s) {
    s.features.qk_norm = QkNorm::per_head;
    read_moe_config(c, source, keys(), s);
  };
  f.write = [](const TransformerShape &s, nlohmann::json &c) {
    c.erase("mlp_bias");
    c["use_sliding_window"] = !s.features.sliding_layers.empty();
    write_moe_config(s, keys(), c);
  };
  f.defaults = [](TransformerShape &s) {
    s.features.qk_norm = QkNorm::per_head;
    default_moe(s, true);
  };
  return f;
}

}  // namespace zf
