// OLMo 2 (Olmo2ForCausalLM) and OLMo 3 (Olmo3ForCausalLM): norms after each branch instead of before
// it, the norm's weight applied in fp32, and RMSNorms over the whole q and k projections; OLMo 3 adds
// sliding-window layers (layer_types, read by the shared keys).
#include "model/family.hpp"

namespace zf {
namespace {

void compose(TransformerShape &s) {
  s.features.placement = NormPlacement::post;
  s.features.norm_weight = NormWeight::scale_then_cast;
  s.features.qk_norm = QkNorm::whole;
}

Family olmo(const char *type, const char *architecture) {
  Family f;
  f.type = type;
  f.architecture = architecture;
  f.default_norm_eps = 1e-5;
  f.default_vocab = 50304;
  f.default_max_seq = 2048;
  f.read = [](const nlohmann::json &, const std::string &, TransformerShape &s) { compose(s); };
  f.defaults = compose;
  f.write = [](const TransformerShape &, nlohmann::json &c) { c.erase("mlp_bias"); };
  return f;
}

}  // namespace

Family olmo2_family() { return olmo("olmo2", "Olmo2ForCausalLM"); }
Family olmo3_family() {
  Family f = olmo("olmo3", "Olmo3ForCausalLM");
  f.layer_types = f.rope_per_layer_type = true;
  return f;
}

}  // namespace zf
