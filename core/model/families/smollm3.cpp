// SmolLM3 (SmolLM3ForCausalLM): Llama's layer where some layers (every fourth in the published
// model) use no RoPE at all (no_rope_layers: 1 = RoPE, 0 = none); a tied head.
#include "model/family.hpp"
#include "model/hf_config_fields.hpp"

namespace zf {

Family smollm3_family() {
  Family f;
  f.type = "smollm3";
  f.layer_types = true;
  f.architecture = "SmolLM3ForCausalLM";
  f.default_tie = true;
  f.default_theta = 2e6;
  f.default_vocab = 128256;
  f.default_max_seq = 32768;
  f.read = [](const nlohmann::json &c, const std::string &source, TransformerShape &s) {
    if (!c.contains("no_rope_layers") || c["no_rope_layers"].is_null()) {  // the config's rule: every 4th
      const int64_t interval = field_or<int64_t>(c, "no_rope_layer_interval", 4, source);
      for (int64_t i = 0; i < s.layers; ++i) s.features.rope_layers.push_back((i + 1) % interval != 0);
      return;
    }
    const nlohmann::json &layers = c["no_rope_layers"];
    ZF_REQUIRE(layers.is_array() && int64_t(layers.size()) == s.layers,
               "%s: config.json \"no_rope_layers\" must list 0 or 1 for each of the %lld layers", source.c_str(),
               (long long)s.layers);
    for (const nlohmann::json &use : layers) {
      ZF_REQUIRE(use == 0 || use == 1, "%s: config.json \"no_rope_layers\" holds %s; each entry is 0 or 1",
                 source.c_str(), excerpt(use.dump()).c_str());
      s.features.rope_layers.push_back(use == 1);
    }
  };
  f.write = [](const TransformerShape &s, nlohmann::json &c) {
    nlohmann::json layers = nlohmann::json::array();
    for (int64_t i = 0; i < s.layers; ++i) layers.push_back(s.features.uses_rope(i) ? 1 : 0);
    c["no_rope_layers"] = layers;
    c["use_sliding_window"] = !s.features.sliding_layers.empty();
  };
  f.defaults = [](TransformerShape &s) {
    if (s.features.rope_layers.empty())
      for (int64_t i = 0; i < s.layers; ++i) s.features.rope_layers.push_back((i + 1) % 4 != 0);
  };
  return f;
}

}  // namespace zf
