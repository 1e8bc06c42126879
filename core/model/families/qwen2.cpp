// Qwen2 and Qwen2.5 (Qwen2ForCausalLM): Llama's layer with biases on q, k and v (not on o).
#include "model/family.hpp"

namespace zf {

Family qwen2_family() {
  Family f;
  f.type = "qwen2";
  f.architecture = "Qwen2ForCausalLM";
  f.default_theta = 1e6;
  f.default_vocab = 151936;
  f.default_max_seq = 32768;
  f.read = [](const nlohmann::json &, const std::string &, TransformerShape &s) { s.qkv_bias = true; };
  f.write = [](const TransformerShape &s, nlohmann::json &c) {
    c.erase("attention_bias");  // Qwen2's q/k/v biases are not a key
    c.erase("mlp_bias");
    c["use_sliding_window"] = !s.features.sliding_layers.empty();
  };
  f.defaults = [](TransformerShape &s) { s.qkv_bias = true; };
  return f;
}

}  // namespace zf
