// The [model] table of the config. Transformer shape keys left out (or 0) come from the preset,
// from init_from's config.json, or from the family's conventions, in that order
// (model/transformer_options.cpp); a key written in the TOML overrides a preset.
#include "config/limits.hpp"
#include "model/family.hpp"
#include "model/transformer_shape.hpp"

namespace zf {

std::vector<zf_param_decl> model_schema() {
  // The choices and names below are built from the families and presets once; the schema keeps pointers.
  static const std::string types = [] {
    std::string names = "linear_stack|gpt2";
    for (const Family &family : families()) names += "|" + family.type;
    return names;
  }();
  static const std::string presets = [] {
    std::string names = "published shape:";
    for (const std::string &name : preset_names()) names += " " + name;
    return names;
  }();
  return {
      decl("type", ZF_PARAM_STRING, "linear_stack",
           "model architecture (default: the preset's or init_from's, else linear_stack)", 0, 0, 0,
           types.c_str()),
      decl("preset", ZF_PARAM_STRING, "", presets.c_str()),
      decl("init_from", ZF_PARAM_STRING, "",
           "Hugging Face checkpoint directory (config.json + model.safetensors or a sharded index) to start from"),
      decl("hidden", ZF_PARAM_INT, "64", "hidden size (linear_stack: features and classes)", kRange, 1, kMaxWidth),
      decl("layers", ZF_PARAM_INT, "4", "number of layers", kRange, 1, kMaxLayers),
      decl("heads", ZF_PARAM_INT, "0", "attention heads (0: preset's, else hidden / 64)", kRange, 0, kMaxWidth),
      decl("kv_heads", ZF_PARAM_INT, "0", "key/value heads for grouped-query attention (0: preset's, else heads)",
           kRange, 0, kMaxWidth),
      decl("intermediate", ZF_PARAM_INT, "0",
           "MLP width (0: preset's, else 4 * hidden for gpt2, 8/3 * hidden rounded up to 256 for the other families)", kRange,
           0, 4 * kMaxWidth),
      decl("vocab", ZF_PARAM_INT, "0", "vocabulary size (0: preset's, else the family's: 50257 gpt2, 32000 llama, 151936 qwen2 and qwen3, ...)",
           kRange, 0, kMaxVocab),
      decl("max_seq", ZF_PARAM_INT, "0",
           "context length; GPT-2's position table size (0: preset's, else the family's: 1024 gpt2, 4096 llama, 32768 qwen2, ...)",
           kRange, 0, kMaxSeqLen),
      decl("rope_theta", ZF_PARAM_FLOAT, "0", "RoPE base of full-attention layers (0: preset's, else the family's: 10000 llama, 1e6 qwen2 and qwen3, ...)", kMin, 0),
      decl("norm_eps", ZF_PARAM_FLOAT, "0", "LayerNorm/RMSNorm epsilon (0: preset's, else the family's: 1e-5 gpt2 and llama, 1e-6 qwen2, ...)", kMin, 0),
      decl("tie_embeddings", ZF_PARAM_BOOL, "false",
           "output head reuses the token embedding (unset: preset's, else true for gpt2, gemma3_text, gemma4_text and smollm3, as their transformers configs)"),
      decl("qkv_bias", ZF_PARAM_BOOL, "false", "q/k/v projections have biases (unset: true for gpt2 and qwen2)"),
      decl("dtype", ZF_PARAM_STRING, "float32", "compute and working-parameter precision", 0, 0, 0, "float32|bfloat16"),
      decl("dropout", ZF_PARAM_FLOAT, "0", "dropout probability (gpt2: embeddings, attention, residuals; llama: "
           "attention) while training; init_from's config.json dropout is not applied (the run says so)", kUnitOpen, 0, 1),
      decl("activation_checkpointing", ZF_PARAM_BOOL, "false",
           "keep only each transformer layer's input and recompute the layer in backward"),
      decl("checkpoint_layers", ZF_PARAM_INT, "0",
           "with activation_checkpointing: how many layers, the first ones, recompute in backward (0: all); the "
           "last layers keep their activations, trading GPU memory for less recompute",
           kRange, 0, kMaxLayers),
      decl("fused", ZF_PARAM_STRING, "true",
           "true: compute the loss with the output projection in chunks of tokens (the whole float32 logits and "
           "their gradient never exist) and, on GPUs, each layer's norms, RoPE and gated MLP and the loss's softmax "
           "with zfcore's fused kernels (on the CPU libtorch's ops, faster there); always: the same kernels on the "
           "CPU too (their host loops, what the tests check them by); false: libtorch's ops one by one, the loss "
           "from the whole logits (the same results within rounding)", 0, 0, 0, "true|false|always"),
      decl("attention", ZF_PARAM_STRING, "auto",
           "a GPU run's kernel for causal attention: auto (each of cudnn, flash and efficient timed forward + "
           "backward on the run's own attention at start-up, the fastest first in SDPA's order, logged) or one of "
           "them; sliding windows and packed documents always take FlashAttention's own entry", 0, 0, 0,
           "auto|cudnn|flash|efficient|math"),
      decl("column_major", ZF_PARAM_BOOL, "true", "store 2-D weights column by column (ZenFlow selects columns)"),
      decl("block_order", ZF_PARAM_STRING, "model",
           "the order of the blocks in the flat buffers: model (embedding, layers, head) or interleaved "
           "(bit-reversed: every ZeRO shard holds blocks from the whole depth, so that each rank's offloaded "
           "update starts early in the backward instead of the first layers' owner starting last); "
           "checkpoints resume only under the order that wrote them", 0, 0, 0, "model|interleaved")
  };
}

}  // namespace zf
