// Phi-3 and Phi-4 (Phi3ForCausalLM, model_type phi3): Llama's layer with q, k and v in one qkv_proj
// matrix and gate and up in one gate_up_proj matrix; partial_rotary_factor and a window over every
// layer where the config has them (shared keys).
#include "model/family.hpp"

namespace zf {

Family phi3_family() {
  Family f;
  f.type = "phi3";
  f.architecture = "Phi3ForCausalLM";
  f.default_norm_eps = 1e-5;
  f.default_vocab = 32064;
  f.read = [](const nlohmann::json &, const std::string &, TransformerShape &s) { s.features.fused_qkv = true; };
  f.defaults = [](TransformerShape &s) { s.features.fused_qkv = true; };
  f.write = [](const TransformerShape &s, nlohmann::json &c) {
    c.erase("attention_bias");
    c.erase("mlp_bias");
    c.erase("layer_types");
    if (s.features.sliding_layers.empty()) c["sliding_window"] = nullptr;
    c["resid_pdrop"] = c["embd_pdrop"] = 0.0;
  };
  return f;
}

}  // namespace zf
