// Granite 3 (GraniteForCausalLM): Llama's layer with four multipliers: the embeddings', the branch
// outputs' before each residual add, the attention's softmax scale, and a divisor of the logits.
#include "model/family.hpp"
#include "model/hf_config_fields.hpp"

#include <cmath>

namespace zf {

Family granite_family() {
  Family f;
  f.type = "granite";
  f.architecture = "GraniteForCausalLM";
  f.read = [](const nlohmann::json &c, const std::string &source, TransformerShape &s) {
    DecoderFeatures &d = s.features;
    d.embedding_scale = field_or<double>(c, "embedding_multiplier", 1.0, source);
    d.residual_scale = field_or<double>(c, "residual_multiplier", 1.0, source);
    d.attention_scale = field_or<double>(c, "attention_multiplier", 1.0, source);
    d.logits_divisor = field_or<double>(c, "logits_scaling", 1.0, source);
    ZF_REQUIRE(d.logits_divisor != 0, "%s: config.json has logits_scaling = 0; the logits are divided by it",
               source.c_str());
  };
  f.write = [](const TransformerShape &s, nlohmann::json &c) {
    const DecoderFeatures &d = s.features;
    c["embedding_multiplier"] = d.embedding_scale;
    c["residual_multiplier"] = d.residual_scale;
    c["attention_multiplier"] = d.attention_scale > 0 ? d.attention_scale : 1.0;
    c["logits_scaling"] = d.logits_divisor;
  };
  // A Granite given by type alone scales attention by 1/sqrt(head_dim), written out as its attention_multiplier.
  f.defaults = [](TransformerShape &s) {
    if (s.features.attention_scale == 0) s.features.attention_scale = 1 / std::sqrt(double(s.head_dim()));
  };
  return f;
}

}  // namespace zf
