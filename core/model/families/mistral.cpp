// Mistral (MistralForCausalLM: Mistral 7B, Mistral Small 3) and Ministral 3 (Ministral3ForCausalLM):
// Llama's layer with an explicit head_dim and, where the config has sliding_window, a window over
// every layer; Ministral 3 adds yarn RoPE and Llama 4's query scaling by position (both read by the
// shared keys).
#include "model/family.hpp"

namespace zf {
namespace {

void write_mistral(const TransformerShape &s, nlohmann::json &c) {
  c.erase("attention_bias");
  c.erase("mlp_bias");
  if (s.features.sliding_layers.empty()) c["sliding_window"] = nullptr;
  c.erase("layer_types");  // a window over every layer is sliding_window alone
}

Family mistral_like(const char *type, const char *architecture) {
  Family f;
  f.type = type;
  f.architecture = architecture;
  f.default_max_seq = 131072;
  f.write = write_mistral;
  return f;
}

}  // namespace

Family mistral_family() { return mistral_like("mistral", "MistralForCausalLM"); }

Family ministral3_family() {
  Family f = mistral_like("ministral3", "Ministral3ForCausalLM");
  f.default_theta = 1e6;
  f.default_vocab = 131072;
  f.default_max_seq = 262144;
  // transformers' Ministral 3 always scales its queries: both keys are always written (beta 0: no scaling).
  f.write = [](const TransformerShape &s, nlohmann::json &c) {
    write_mistral(s, c);
    nlohmann::json &rope = c["rope_parameters"];
    rope["llama_4_scaling_beta"] = s.features.llama4_scaling_beta;
    if (!rope.contains("original_max_position_embeddings")) rope["original_max_position_embeddings"] = s.max_seq;
  };
  return f;
}

}  // namespace zf
