// Qwen3 dense (Qwen3ForCausalLM): Llama's layer with an RMSNorm over each head of q and k before RoPE,
// and an explicit head_dim (128 in every published size, whatever hidden / heads is).
#include "model/family.hpp"

namespace zf {

Family qwen3_family() {
  Family f;
  f.type = "qwen3";
  f.layer_types = true;
  f.architecture = "Qwen3ForCausalLM";
  f.default_theta = 1e6;
  f.default_vocab = 151936;
  f.default_max_seq = 40960;
  f.read = [](const nlohmann::json &, const std::string &, TransformerShape &s) {
    s.features.qk_norm = QkNorm::per_head;
  };
  f.write = [](const TransformerShape &s, nlohmann::json &c) {
    c.erase("mlp_bias");
    c["use_sliding_window"] = !s.features.sliding_layers.empty();
  };
  f.defaults = [](TransformerShape &s) { s.features.qk_norm = QkNorm::per_head; };
  return f;
}

}  // namespace zf
