// Mixtral (MixtralForCausalLM): Mistral's layer with a mixture of num_local_experts SwiGLU experts of
// intermediate_size in place of the MLP (moe.hpp), the top num_experts_per_tok always renormalised;
// experts stored one by one as block_sparse_moe.experts.E.w1 (gate), w3 (up) and w2 (down).
#include "model/family.hpp"
#include "model/moe_config.hpp"

namespace zf {
namespace {

MoeKeys keys() {
  MoeKeys k;
  k.experts = "num_local_experts";
  k.norm_topk_key = false;
  k.default_coef = 0.001;
  return k;
}

void compose(TransformerShape &s) { s.features.moe.mixtral_names = true; }

}  // namespace

Family mixtral_family() {
  Family f;
  f.type = "mixtral";
  f.architecture = "MixtralForCausalLM";
  f.default_norm_eps = 1e-5;
  f.default_max_seq = 131072;
  f.read = [](const nlohmann::json &c, const std::string &source, TransformerShape &s) {
    read_moe_config(c, source, keys(), s);
    compose(s);
  };
  f.write = [](const TransformerShape &s, nlohmann::json &c) {
    c.erase("mlp_bias");
    c.erase("attention_bias");
    if (s.features.sliding_layers.empty()) c["sliding_window"] = nullptr;
    c.erase("layer_types");  // a window over every layer is sliding_window alone
    c["router_jitter_noise"] = 0.0;
    write_moe_config(s, keys(), c);
  };
  f.defaults = [](TransformerShape &s) {
    default_moe(s, true);
    compose(s);
  };
  return f;
}

}  // namespace zf
