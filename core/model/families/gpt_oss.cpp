// gpt-oss (GptOssForCausalLM): Llama's pre-norm layer with biases on q, k, v and o, a learned sink per
// head in each attention softmax, sliding-window and full layers alternating (layer_types), YaRN RoPE,
// and a mixture of num_local_experts experts of intermediate_size (moe.hpp): a router with a bias whose
// top num_experts_per_tok logits are softmaxed, the clamped SwiGLU (swiglu_alpha, swiglu_limit), and the
// experts fused into 3-D tensors with biases (mlp.experts.gate_up_proj, gate and up interleaved). The
// published checkpoints store those experts in MXFP4 (hf_weights.cpp dequantises them at load).
#include "model/family.hpp"
#include "model/hf_config_fields.hpp"
#include "model/moe_config.hpp"

namespace zf {
namespace {

MoeKeys keys() {
  MoeKeys k;
  k.experts = "num_local_experts";
  k.norm_topk_key = false;  // the softmax over the top k logits: the top k probabilities renormalised
  k.default_coef = 0.001;
  return k;
}

// What transformers' GptOssConfig fills where config.json says nothing.
void compose(TransformerShape &s) {
  DecoderFeatures &f = s.features;
  f.attention_sinks = true;
  f.norm_weight = NormWeight::scale_then_cast;
  if (f.moe.swiglu_limit == 0) f.moe.swiglu_limit = 7.0;
  if (f.moe.swiglu_alpha == 0) f.moe.swiglu_alpha = 1.702;
}

void alternate_windows(TransformerShape &s, int64_t window) {  // sliding, full, sliding, ...
  s.features.sliding_window = window;
  s.features.sliding_layers.clear();
  for (int64_t i = 0; i < s.layers; ++i) s.features.sliding_layers.push_back(i % 2 == 0);
}

}  // namespace

Family gpt_oss_family() {
  Family f;
  f.type = "gpt_oss";
  f.architecture = "GptOssForCausalLM";
  f.layer_types = true;
  f.default_theta = 150000;
  f.default_norm_eps = 1e-5;
  f.default_vocab = 201088;
  f.default_max_seq = 131072;
  f.read = [](const nlohmann::json &c, const std::string &source, TransformerShape &s) {
    DecoderFeatures &f = s.features;
    f.attention_bias = field_or<bool>(c, "attention_bias", true, source);
    read_moe_config(c, source, keys(), s);
    f.moe.swiglu_alpha = field_or<double>(c, "swiglu_alpha", 1.702, source);
    f.moe.swiglu_limit = field_or<double>(c, "swiglu_limit", 7.0, source);
    ZF_REQUIRE(f.moe.swiglu_limit > 0, "%s: config.json has swiglu_limit = %g: must be > 0", source.c_str(),
               f.moe.swiglu_limit);
    const bool listed = c.contains("layer_types") && !c["layer_types"].is_null();
    const int64_t window = field_or<int64_t>(c, "sliding_window", 0, source);
    if (!listed && window > 0) alternate_windows(s, window);  // transformers' default layer_types
    const bool rope_given = (c.contains("rope_parameters") && !c["rope_parameters"].is_null()) ||
                            (c.contains("rope_scaling") && !c["rope_scaling"].is_null());
    if (!rope_given) {  // transformers' default: YaRN, 32 x 4096 positions
      f.rope.type = "yarn";
      f.rope.factor = 32;
      f.rope.original_max = 4096;
      f.rope.truncate = false;
    }
    if (c.contains("quantization_config") && !c["quantization_config"].is_null()) {
      const nlohmann::json &q = c["quantization_config"];
      const std::string method = q.is_object() ? field_or<std::string>(q, "quant_method", "", source) : "";
      ZF_REQUIRE(method == "mxfp4", "%s: config.json has \"quantization_config\": %s; zfcore reads gpt-oss's "
                 "experts unquantised or in MXFP4 (quant_method \"mxfp4\"), which it dequantises at load",
                 source.c_str(), excerpt(q.dump()).c_str());
    }
    compose(s);
  };
  f.write = [](const TransformerShape &s, nlohmann::json &c) {
    c.erase("mlp_bias");
    c["swiglu_alpha"] = s.features.moe.swiglu_alpha;
    c["swiglu_limit"] = s.features.moe.swiglu_limit;
    write_moe_config(s, keys(), c);
  };
  f.defaults = [](TransformerShape &s) {
    default_moe(s, true);
    s.features.moe.aux_coef = 0.001;
    s.features.attention_bias = true;
    if (s.features.sliding_layers.empty()) alternate_windows(s, 128);
    compose(s);
  };
  return f;
}

}  // namespace zf
