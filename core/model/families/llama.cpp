// Llama 2 and 3.x (LlamaForCausalLM): pre-norm RMSNorm, RoPE (llama3 frequency scaling from 3.1 on),
// grouped-query attention, SwiGLU; attention_bias and mlp_bias where the config has them, a tied head
// in 3.2. Everything is read by the shared keys (decoder_config.cpp).
#include "model/family.hpp"

namespace zf {

Family llama_family() {
  Family f;
  f.type = "llama";
  f.architecture = "LlamaForCausalLM";
  f.default_norm_eps = 1e-5;
  return f;
}

}  // namespace zf
